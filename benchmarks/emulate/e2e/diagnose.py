"""Where a GPU's end-to-end error comes from, without emulating: ``python -m benchmarks.emulate.e2e.diagnose p4 t4``.

The end-to-end benchmark (:mod:`benchmarks.emulate.e2e`) emulates each NeuSight label; this sets the estimator's
predictions of the labels' own operators (the in-step rows, :mod:`estimator.importers.neusight_inmodel`) beside
their measured times, in five tables per GPU:

1. per label and family: NeuSight's per-op trace as timed, the same scaled to the measured pass (in step), the
   estimator's prediction (before calibration), in-step / predicted, and the GEMMs' achieved TFLOPS in step: a
   GPU whose labels ran at different GEMM throughputs cannot be predicted within their spread by any rule that
   sees only shapes; a line under it gives the error any one GEMM factor for all the labels leaves
   (:func:`shared_factor_floor`);
2. the in-step factors each label's emulation gets (leave-one-model-out): the GPU's own, or pooled over the other
   GPUs when its other models are too few (:func:`emulate.sim.instep.factors`);
3. every GEMM row: shape, in-step and predicted time, their ratio, achieved TFLOPS;
4. the estimator's training data for the GPU's GEMMs (NeuSight's isolated sweeps, one collection per op: ``linear``
   and ``bmm``): median TFLOPS of GEMMs of at least 1 GFLOP by how long the kernel ran. Throughput that falls as
   kernels run longer is the signature of a clock that dropped during the sweep (power or thermal throttling), which
   the estimator then learns as the GPU's speed; but long kernels are also other shapes;
5. the same sweep compared within efficiency classes (same kernel, reduction length and per-matrix shape; only the
   duration varies, :mod:`benchmarks.emulate.e2e.throttle`): the share of the short ops' throughput that longer ops
   kept. Below 1 it is the clock, not the shape.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from benchmarks.emulate.e2e import throttle
from stepcast.emulate.sim import instep
from stepcast.estimator.importers import neusight as sweeps
from stepcast.errors import report
from stepcast.profiling.families import key_columns
from stepcast.profiling.hardware import lookup
from stepcast.profiling.paths import shared_data_root

DURATION_EDGES_MS = (0.0, 2.0, 10.0, 50.0, 200.0, np.inf)
MIN_SWEEP_GFLOP = 1.0


def predicted_us(rows: pd.DataFrame, estimator) -> np.ndarray:
    """The estimator's prediction of every in-step row (us, uncalibrated), one call per family."""
    out = np.full(len(rows), np.nan)
    for family, part in rows.groupby("family"):
        columns = [c for c in key_columns(str(family)) if c in part]
        values = estimator.predict_frame(part[columns].reset_index(drop=True))["predicted_us"].to_numpy()
        out[rows.index.get_indexer(part.index)] = values
    return out


def gemm_gflop(rows: pd.DataFrame) -> pd.Series:
    """Floating-point work of one call of each GEMM row (GFLOP; 0 for other families)."""
    flop = 2.0 * rows.get("m", 0) * rows.get("n", 0) * rows.get("k", 0) * rows.get("batch", 1)
    return pd.Series(np.where(rows["family"] == "gemm", flop, 0.0), index=rows.index).fillna(0.0) / 1e9


def label_family_table(rows: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    """Per (sample, family): trace ms, in-step ms, predicted ms, in-step / predicted, GEMM TFLOPS in step."""
    repeat = rows["repeat"].to_numpy(dtype=float)
    frame = pd.DataFrame({
        "sample": rows["sample"], "family": rows["family"],
        "trace_ms": rows["runtime_us"] * repeat / 1e3,
        "in_step_ms": rows["runtime_us"] * rows["pass_scale"] * repeat / 1e3,
        "predicted_ms": predicted * repeat / 1e3,
        "gflop": gemm_gflop(rows) * repeat})
    out = frame.groupby(["sample", "family"], as_index=False).sum(numeric_only=True)
    out["ratio"] = out["in_step_ms"] / out["predicted_ms"]
    out["tflops"] = np.where(out["gflop"] > 0, out["gflop"] / out["in_step_ms"], np.nan)
    return out.drop(columns="gflop")


def shared_factor_floor(labels: pd.DataFrame, family: str = "gemm") -> tuple[float, float, float]:
    """(lowest and highest in-step / predicted of ``family`` over the labels of :func:`label_family_table`, and the
    error that any one factor shared by those labels leaves on at least one of them: (hi - lo) / (hi + lo), what
    the best factor, 2 / (1/lo + 1/hi), leaves on both ends). However it is fitted, a calibration that scales a
    GPU's kernels of a family alike cannot do better on these labels."""
    ratios = labels.loc[labels["family"] == family, "ratio"].to_numpy(dtype=float)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if not len(ratios):
        return float("nan"), float("nan"), float("nan")
    lo, hi = float(ratios.min()), float(ratios.max())
    return lo, hi, (hi - lo) / (hi + lo)


def gemm_table(rows: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    """Every GEMM row: sample, op, shape, repeat, in-step us, predicted us, ratio, TFLOPS in step."""
    gemm = rows["family"] == "gemm"
    part = rows[gemm]
    in_step = part["runtime_us"] * part["pass_scale"]
    out = pd.DataFrame({"sample": part["sample"], "op": part.get("aten_op", ""),
                        "batch": part["batch"].astype(int), "m": part["m"].astype(int),
                        "n": part["n"].astype(int), "k": part["k"].astype(int),
                        "repeat": part["repeat"].astype(int), "in_step_us": in_step,
                        "predicted_us": predicted[gemm.to_numpy()]})
    out["ratio"] = out["in_step_us"] / out["predicted_us"]
    out["tflops"] = gemm_gflop(part) * 1e3 / in_step
    return out.reset_index(drop=True)


def sweep_by_duration(sweep: pd.DataFrame) -> pd.DataFrame:
    """Median TFLOPS (and row count) of the sweep's GEMMs of at least ``MIN_SWEEP_GFLOP`` per collection
    (``gemm_op``) and kernel-duration bucket."""
    big = sweep[gemm_gflop(sweep) >= MIN_SWEEP_GFLOP].copy()
    if big.empty:
        return pd.DataFrame(columns=["gemm_op", "duration_ms", "rows", "median_tflops"])
    big["tflops"] = gemm_gflop(big) * 1e3 / big["runtime_us"]
    big["duration_ms"] = pd.cut(big["runtime_us"] / 1e3, DURATION_EDGES_MS, right=False)
    out = big.groupby(["gemm_op", "duration_ms"], observed=True)["tflops"].agg(["size", "median"]).reset_index()
    out.columns = ["gemm_op", "duration_ms", "rows", "median_tflops"]
    return out


def load_sweep(root: Path, hardware: str) -> pd.DataFrame:
    """NeuSight's isolated GEMM collections of ``hardware`` (empty when absent)."""
    frames = [sweeps.load_gemm(p) for p in sweeps.input_files(root) if p.parent.parent.name in ("bmm", "linear")]
    frames = [f[f["hardware"] == hardware] for f in frames]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["gemm_op", "runtime_us"])


def print_gpu(hardware: str, rows: pd.DataFrame, estimator, root: Path, console: Console) -> None:
    """The four tables of one GPU (module docstring)."""
    mine = rows[(rows["hardware"] == hardware) & rows["family"].isin(instep.FAMILIES)].reset_index(drop=True)
    predicted = predicted_us(mine, estimator)
    labels = label_family_table(mine, predicted)
    table = Table(title=f"{hardware}: in-step rows per label and family (ms over the whole model; predicted = the "
                        "estimator before calibration)")
    for column in ("label", "family", "trace", "in step", "predicted", "in step/pred", "TFLOPS in step"):
        table.add_column(column, justify="left" if column in ("label", "family") else "right")
    for r in labels.itertuples(index=False):
        table.add_row(r.sample, r.family, f"{r.trace_ms:.0f}", f"{r.in_step_ms:.0f}", f"{r.predicted_ms:.0f}",
                      f"{r.ratio:.2f}", "" if np.isnan(r.tflops) else f"{r.tflops:.2f}")
    console.print(table)
    lo, hi, floor = shared_factor_floor(labels)
    if np.isfinite(floor):
        console.print(f"{hardware}: GEMM in step / predicted ranges {lo:.2f}-{hi:.2f} over its labels: any one GEMM "
                      f"factor for them all leaves at least {100 * floor:.1f} % on one of them", highlight=False)

    held = Table(title=f"{hardware}: in-step factors per held-out model (own: this GPU's other models; used: what "
                       f"the emulation applies, pooled over the other GPUs where own is missing)")
    for column in ("held out", "models left", "own", "used"):
        held.add_column(column, justify="left")
    for model in sorted(mine["model"].unique()):
        left = sorted(set(mine["model"]) - {model})
        own = instep.own_factors(hardware, estimator, [model], rows)
        used = instep.factors(hardware, estimator, [model], rows)
        held.add_row(model, ", ".join(left), fmt_factors(own), fmt_factors(used))
    console.print(held)

    gemm = gemm_table(mine, predicted)
    table = Table(title=f"{hardware}: GEMM rows (one call; in step / predicted, TFLOPS achieved in step)")
    for column in ("label", "op", "batch", "m", "n", "k", "x", "in step us", "pred us", "ratio", "TFLOPS"):
        table.add_column(column, justify="left" if column in ("label", "op") else "right")
    for r in gemm.itertuples(index=False):
        table.add_row(r.sample, str(r.op), str(r.batch), str(r.m), str(r.n), str(r.k), str(r.repeat),
                      f"{r.in_step_us:.0f}", f"{r.predicted_us:.0f}", f"{r.ratio:.2f}", f"{r.tflops:.2f}")
    console.print(table)

    raw = load_sweep(root, hardware)
    sweep = sweep_by_duration(raw)
    table = Table(title=f"{hardware}: the estimator's GEMM training sweep (NeuSight, isolated, >= "
                        f"{MIN_SWEEP_GFLOP:g} GFLOP): median TFLOPS by kernel duration")
    table.add_column("collection", justify="left")
    for interval in sweep["duration_ms"].cat.categories if len(sweep) else []:
        table.add_column(f"{interval.left:g}-{interval.right:g} ms", justify="right")
    for op, part in sweep.groupby("gemm_op"):
        cells = {str(r.duration_ms): f"{r.median_tflops:.2f} ({r.rows})" for r in part.itertuples(index=False)}
        table.add_row(str(op), *(cells.get(str(c), "") for c in sweep["duration_ms"].cat.categories))
    console.print(table)

    kept = throttle.retained_by_duration(raw, lookup(hardware).sm_count, DURATION_EDGES_MS) if len(raw) else None
    table = Table(title=f"{hardware}: the same sweep within efficiency classes (same kernel, reduction and per-matrix "
                        f"shape): throughput kept vs ops under {throttle.REFERENCE_MS:g} ms (median, rows)")
    table.add_column("collection", justify="left")
    buckets = kept["duration_ms"].cat.categories if kept is not None and len(kept) else []
    for interval in buckets:
        table.add_column(f"{interval.left:g}-{interval.right:g} ms", justify="right")
    for op, part in kept.groupby("gemm_op") if kept is not None else []:
        cells = {str(r.duration_ms): f"{r.retained:.2f} ({r.rows})" for r in part.itertuples(index=False)}
        table.add_row(str(op), *(cells.get(str(c), "") for c in buckets))
    console.print(table)


def fmt_factors(fitted: dict[str, float]) -> str:
    return ", ".join(f"{f} x{v:.2f}" for f, v in sorted(fitted.items())) or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.e2e.diagnose",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("gpus", nargs="+", help="catalog ids of GPUs with NeuSight labels (p4, t4, p100, ...)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--estimator", default=None,
                        help="stepcast.estimator.load source (default: the shipped bundle)")
    args = parser.parse_args(argv)
    import stepcast.estimator as estimators

    root = args.root or shared_data_root()
    rows = instep.in_step_rows(str(root))
    known = sorted(set(rows["hardware"])) if len(rows) else []
    unknown = [g for g in args.gpus if g not in known]
    if unknown:
        return report(f"{root}: no in-step rows for {', '.join(unknown)}; expected some of {', '.join(known)}")
    model = estimators.load(args.estimator)
    console = Console(width=200)
    for hardware in args.gpus:
        print_gpu(hardware, rows, model, root, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
