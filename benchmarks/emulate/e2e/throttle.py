"""Does a GPU's isolated GEMM sweep slow down because its kernels ran long, or because long kernels have other shapes?

NeuSight times each op of its sweeps 25 times back to back (the mean of the fastest 5), so an op of d ms keeps the
board loaded for about 25 d ms: a board whose clock drops under sustained load (a power cap, or heat on a passively
cooled card) shows throughput that falls as its ops run longer. But in a sweep the long ops are also the large
shapes, and throughput depends on shape too (tile fit, reduction length: the P100's ``linear`` sweep runs reductions
over 16k at half the speed of short ones, however long they take), so throughput by duration over the whole sweep
(:func:`benchmarks.emulate.e2e.diagnose.sweep_by_duration`) cannot tell the two apart.

This compares rows only within one efficiency class: the same kernel (its tile), the same reduction length (k, in
power-of-two buckets) and, for batched GEMMs, the same per-matrix shape (m and n buckets), among launches of at least
``MIN_BLOCKS_PER_SM`` blocks per SM (no partial-wave effects). Inside a class only the amount of work, and so the
duration, varies. A row's throughput over its class's median among ops under ``REFERENCE_MS`` (too short to heat
the board in 25 repetitions) is the share of the unthrottled rate it kept; the median of that share per duration
bucket is the sweep's throttling curve. On NeuSight's data (``python -m benchmarks.emulate.e2e.diagnose p4 t4 p100``) it
falls on the two boards of 75 W and less (P4, T4) and stays flat on the P100, V100 and A100.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

REFERENCE_MS = 2.0
MIN_BLOCKS_PER_SM = 4
MIN_REFERENCE_ROWS = 3


def launch_blocks(grid: pd.Series) -> pd.Series:
    """Blocks of each launch from its ``"x,y,z"`` grid (0 where unreadable)."""
    parts = grid.astype(str).str.split(",", expand=True).apply(pd.to_numeric, errors="coerce")
    return parts.prod(axis=1, min_count=1).fillna(0)


def efficiency_class(sweep: pd.DataFrame) -> pd.Series:
    """The class of each sweep row (module docstring): collection, kernel and log2 buckets of k (and of m and n for
    batched GEMMs, whose duration grows with the batch)."""
    def bucket(column: str) -> pd.Series:
        return np.floor(np.log2(sweep[column].clip(lower=1))).astype(int).astype(str)

    label = sweep["gemm_op"].astype(str) + "/" + sweep["kernel_name"].astype(str) + "/k" + bucket("k")
    batched = sweep["batch"] > 1
    return label.where(~batched, label + "/m" + bucket("m") + "/n" + bucket("n"))


def retained_by_duration(sweep: pd.DataFrame, sm_count: int, edges_ms: Sequence[float]) -> pd.DataFrame:
    """Per collection (``gemm_op``) and kernel-duration bucket (``edges_ms``): rows compared and the median share of
    the unthrottled throughput they kept (1.0: no slowdown; module docstring)."""
    columns = ["gemm_op", "duration_ms", "rows", "retained"]
    full = sweep[launch_blocks(sweep["grid"]) >= MIN_BLOCKS_PER_SM * sm_count]
    if full.empty:
        return pd.DataFrame(columns=columns)
    rate = 2.0 * full["m"] * full["n"] * full["k"] * full["batch"] / full["runtime_us"]
    classes = efficiency_class(full)
    short = full["runtime_us"] < REFERENCE_MS * 1e3
    reference = rate[short].groupby(classes[short]).agg(["median", "size"])
    reference = reference.loc[reference["size"] >= MIN_REFERENCE_ROWS, "median"]
    known = classes.isin(reference.index)
    frame = pd.DataFrame({"gemm_op": full["gemm_op"][known],
                          "duration_ms": pd.cut(full["runtime_us"][known] / 1e3, list(edges_ms), right=False),
                          "retained": rate[known] / classes[known].map(reference)})
    out = frame.groupby(["gemm_op", "duration_ms"], observed=True)["retained"].agg(["size", "median"]).reset_index()
    out.columns = columns
    return out
