"""aiconfigurator's fused-MoE layers: ``<gpu>/moe/<framework>/<version>/moe_perf.parquet`` (NVIDIA, Apache-2.0).

Columns ``framework, version, device, op_name, kernel_source, moe_dtype, num_tokens, hidden_size, inter_size, topk,
num_experts, moe_tp_size, moe_ep_size, distribution, latency``: one fused MoE layer's forward on one GPU (routing,
permute, the gate+up and down grouped GEMMs of its local experts, unpermute and combine), **latency in ms**, under
CUDA graphs. ``moe_ep_size`` and ``moe_tp_size`` give the GPU's share of the layer: num_experts / ep local experts,
each with inter_size / tp of the intermediate width; ``num_tokens`` is every token the layer routes (the collectors
keep only the routes that land on this GPU's experts, and put the busiest expert-parallel slice on it).
``distribution`` is ``balanced`` or ``power_law_<alpha>`` (``estimator.moe.expert_loads`` gives the counts).

Imported: the ``bfloat16`` and per-tensor ``fp8`` rows (dtype ``bf16`` and ``fp8_e4m3``; the block-scaled, fp4 and
int4 rows are other kernels a training step does not run), of catalog devices; the ``wideep_*`` tables (other
files) are not read. One row per (device, kernel_source, dtype, shape, distribution): the median over the framework
releases that timed it (``estimator.importers.aiconfigurator.median_rows``). ``runtime_us`` in microseconds,
``backend`` the kernel_source, ``skew`` the power-law exponent (0 for balanced), ``gated`` (:func:`gated`), ``group``
``aiconfigurator-moe/s<i>``: the layer shape's (hidden, inter, topk, experts, tp, ep) fixed set among five, so a
held-out set is held out on every device at once.

Not a training source of the per-kernel estimators (not in ``estimator.importers.SOURCES``): a fused MoE layer is
no family of ``profiling.families`` yet; ``estimator.moe`` is fitted on these rows and
``python -m benchmarks.emulate.moe`` scores it.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.importers.aiconfigurator import (
    SOURCE,
    catalog_tables,
    median_rows,
    release_disagreement,
    shape_set,
    tables,
    without_outlier_tables,
)
from stepcast.estimator.importers.common import DataImportError

REQUIRED = ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
            "moe_tp_size", "moe_ep_size", "distribution", "latency")
#: aiconfigurator's moe_dtype -> this project's dtype name (profiling.families.DTYPES)
DTYPES = {"bfloat16": "bf16", "fp8": "fp8_e4m3"}
#: the table's shape columns -> this project's names
SHAPE = {"num_tokens": "tokens", "hidden_size": "hidden", "inter_size": "inter", "topk": "topk",
         "num_experts": "experts", "moe_tp_size": "tp", "moe_ep_size": "ep"}
#: a layer's shape without its token count: what a held-out set holds out
LAYER = ("hidden", "inter", "topk", "experts", "tp", "ep")
#: a model's expert MLP shape: whether it is gated is a property of the model, so of this shape
MODEL = ("hidden", "inter", "topk", "experts")
COLUMNS = ("hardware", "dtype", "backend", *SHAPE.values(), "skew", "gated", "runtime_us", "source", "group")
_POWER_LAW = re.compile(r"power_law_(\d+(?:\.\d+)?)$")


def input_files(root: Path) -> list[Path]:
    """The fused-MoE tables (``moe_perf.parquet``; the wide-EP variants have other names and are not read)."""
    return tables(root, "moe", "moe_perf.parquet")


def skew(distribution: pd.Series, path: Path | str = "moe_perf.parquet") -> np.ndarray:
    """The power-law exponent of each ``distribution`` value (0 for ``balanced``); a one-line error otherwise."""
    codes, names = pd.factorize(distribution.astype(str))
    exponents = []
    for name in names:
        match = _POWER_LAW.match(name)
        if name != "balanced" and match is None:
            raise DataImportError(f"{path}: column 'distribution': unexpected '{name}', expected balanced or "
                                  "power_law_<exponent>")
        exponents.append(float(match.group(1)) if match else 0.0)
    return np.asarray(exponents, dtype=np.float64)[codes]


def gated(rows: pd.DataFrame) -> np.ndarray:
    """Whether each row's experts are gated (SwiGLU: a first GEMM 2 x inter wide): not for a model shape
    (:data:`MODEL`) that some table times with a ``nongated`` kernel (TensorRT-LLM's ``moe_torch_flow_nongated``:
    the squared-ReLU MLPs of Nemotron-H-style models), whose other backends run the same plain MLP."""
    plain = rows.loc[rows["backend"].astype(str).str.contains("nongated"), list(MODEL)].drop_duplicates()
    keys = pd.MultiIndex.from_frame(rows[list(MODEL)])
    return ~keys.isin(pd.MultiIndex.from_frame(plain))


#: what one row is: a layer on a device with one kernel, dtype and routing (the releases that timed it are its
#: measurements)
KEYS = ["hardware", "dtype", "backend", *SHAPE.values(), "skew"]


def load(root: Path) -> pd.DataFrame:
    """Every bf16 / fp8 fused-MoE layer of a catalog device, one row per (device, kernel_source, dtype, shape,
    distribution), runtime in microseconds."""
    return layers(measurements(root))


def layers(measured: pd.DataFrame) -> pd.DataFrame:
    """:func:`load`'s rows from the releases' timings (:func:`measurements`): one per layer, their median."""
    if measured.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    rows = median_rows(measured.drop(columns="table"), KEYS)   # the outlier tables are out already
    rows = rows[np.isfinite(rows["latency"]) & (rows["latency"] > 0)]
    rows = rows.assign(gated=gated(rows), runtime_us=rows["latency"] * 1000.0, source=SOURCE,
                       group="aiconfigurator-moe/s" + pd.Series(shape_set(*(rows[c] for c in LAYER)),
                                                                index=rows.index).astype(str))
    return rows[list(COLUMNS)].reset_index(drop=True)


def release_spread(measured: pd.DataFrame) -> pd.DataFrame:
    """Per (hardware, dtype): how far one framework release's time of a layer lies from the other releases' median
    of the same kernel, shape and routing (``estimator.importers.aiconfigurator.release_disagreement``), over the
    releases' timings ``measured`` (:func:`measurements`): mean and median APE % over ``measurements`` (one
    release's timing of a row timed by two or more releases)."""
    if measured.empty:
        return pd.DataFrame(columns=["hardware", "dtype", "mean_ape", "median_ape", "measurements"])
    per = release_disagreement(measured, KEYS)
    return per.groupby(["hardware", "dtype"], sort=True).agg(
        mean_ape=("ape", "mean"), median_ape=("ape", "median"), measurements=("ape", "size")).reset_index()


def measurements(root: Path) -> pd.DataFrame:
    """Every release's timing of every bf16 / fp8 layer of a catalog device: :data:`KEYS`, ``latency`` (ms) and the
    ``table`` it came from; a release's table far off its siblings' is left out here, once, with a warning naming
    it (``estimator.importers.aiconfigurator.without_outlier_tables``)."""
    parts = []
    for path, raw, hardware in catalog_tables(input_files(root), root, REQUIRED):
        raw = raw[raw["moe_dtype"].astype(str).isin(list(DTYPES))]
        shape = raw[list(SHAPE)].rename(columns=SHAPE)
        if len(shape) and not (shape >= 1).all(axis=None):
            column = next(c for c in SHAPE.values() if (shape[c] < 1).any())
            raise DataImportError(f"{path}: column '{column}': expected a positive integer")
        parts.append(shape.assign(hardware=hardware, dtype=raw["moe_dtype"].astype(str).map(DTYPES),
                                  backend=raw["kernel_source"].astype(str),
                                  skew=skew(raw["distribution"], path), latency=raw["latency"].to_numpy(),
                                  table=str(path)))
    if not parts:
        return pd.DataFrame(columns=[*KEYS, "latency", "table"])
    return without_outlier_tables(pd.concat(parts, ignore_index=True), KEYS)
