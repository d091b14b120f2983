"""In-step calibration: from kernels timed one at a time to kernels inside a running step, per GPU and family.

The estimators learn from kernels timed on their own (NeuSight's sweeps, Vidur's, aiconfigurator's, the profiler's).
Inside a step the same kernel can run faster or slower: clocks under sustained load, caches warm from the previous
op, no synchronisation between ops. Where per-operator times measured inside whole-model runs exist
(:mod:`estimator.importers.neusight_inmodel`: NeuSight's label traces, five GPUs, fp32), the estimator predicts
those very kernels and the ratio

    factor(GPU, family) = sum(in-step time x repeat) / sum(predicted time x repeat)

over every row of that GPU and family (in-step time = the node's trace time x its label's ``pass_scale``, its share
of the measured pass) scales the family's predicted kernel times on that GPU (:func:`emulate.sim.durations
.assign_durations`). It is one number per GPU and family, fitted from data, never set by hand, and only from the rows
of at least ``MIN_MODELS`` models; a GPU with fewer (H100, B200...; the P4 once a model is held out) keeps the
estimator's times. The rows are forward-pass kernels: the factor of a family is applied to its backward kernels too.

``exclude`` leaves models out (``STEPCAST_INSTEP_EXCLUDE``): the end-to-end benchmark fits the factors without the
model it evaluates (leave-one-model-out), so no label's own operators calibrate its prediction.
"""
from __future__ import annotations

import functools
from typing import Iterable

import numpy as np
import pandas as pd

from estimator.importers import neusight_inmodel
from profiling.families import key_columns
from profiling.paths import shared_data_root

FAMILIES = ("gemm", "norm", "elementwise")
#: A factor needs in-step rows of at least this many models: one model's rows are one set of shapes and one run's
#: clock state, and on the P4 (two models) the factor of each does not carry to the other (GEMMs: BERT-large 0.61,
#: GPT-2 large 0.91 of the estimator's predictions).
MIN_MODELS = 2


@functools.lru_cache(maxsize=2)
def in_step_rows(root: str | None = None) -> pd.DataFrame:
    """Every in-step row (empty when the shared data is absent)."""
    path = shared_data_root() if root is None else root
    try:
        return neusight_inmodel.load(path)
    except OSError:
        return pd.DataFrame()


def factors(hardware: str, estimator, exclude: Iterable[str] = (), rows: pd.DataFrame | None = None) \
        -> dict[str, float]:
    """{family: factor} on ``hardware`` from the in-step rows of every model but ``exclude`` (module docstring);
    families without rows are absent."""
    rows = in_step_rows() if rows is None else rows
    if rows.empty:
        return {}
    excluded = set(exclude)
    mine = rows[(rows["hardware"] == hardware) & ~rows["model"].isin(excluded) & rows["family"].isin(FAMILIES)]
    out: dict[str, float] = {}
    for family, part in mine.groupby("family"):
        if part["model"].nunique() < MIN_MODELS:
            continue
        columns = [c for c in key_columns(str(family)) if c in part]
        predicted = estimator.predict_frame(part[columns].reset_index(drop=True))["predicted_us"].to_numpy()
        weight = part["repeat"].to_numpy(dtype=np.float64)
        measured = part["runtime_us"].to_numpy() * part["pass_scale"].to_numpy() * weight
        total_predicted = float(np.sum(predicted * weight))
        if total_predicted > 0 and np.isfinite(measured).all():
            out[str(family)] = float(np.sum(measured)) / total_predicted
    return out


def describe(hardware: str, fitted: dict[str, float], exclude: Iterable[str] = ()) -> str:
    """One line for the report's estimator label: ``in-step t4 (gemm x0.78, norm x0.91; without bert_large)``."""
    parts = ", ".join(f"{f} x{v:.2f}" for f, v in sorted(fitted.items()))
    held = f"; without {', '.join(sorted(exclude))}" if exclude else ""
    return f"in-step {hardware} ({parts}{held})"
