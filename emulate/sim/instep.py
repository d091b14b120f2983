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
of at least ``MIN_MODELS`` models. A GPU that has in-step rows, but of fewer models for a family (the P4: two
models, so one once a model is held out), takes the mean of that family's factors on the GPUs that have enough
(pooling): one model's rows are one set of shapes and one run's thermal state, and do not carry to another model
(on the P4 the GEMM factor fitted on BERT-large is 0.90, on GPT-2 large 0.56), whereas the factor is a property of
the timing protocol (isolated sweep vs in-model trace) shared by the GPUs NeuSight measured (GEMM 0.79 to 1.00 on
the four others). A GPU without in-step rows (H100, B200...) keeps the estimator's times: its estimator data come
from other protocols. The rows are forward-pass kernels: the factor of a family is applied to its backward kernels
too.

``exclude`` leaves models out (``STEPCAST_INSTEP_EXCLUDE``): the end-to-end benchmark fits the factors without the
model it evaluates (leave-one-model-out), so no label's own operators calibrate its prediction. A GPU named there is
left out whole: it takes the pooled factors of the other GPUs, as a GPU with too few models does (the end-to-end
benchmark's ``--unseen``: nothing of that GPU's own calibrates it).

Fitting reads and classifies every trace (about 1.5 s), so :func:`cached_factors`, which the emulator calls at
every start, keeps the result under ``cache_root()/instep/``, one file per (estimator ``name@version``, data
fingerprint, GPU, held-out models): the fingerprint hashes the label files and the code that turns them into
factors, so new data, a new bundle version or a changed rule each fit afresh.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from stepcast.estimator.importers import neusight_inmodel
from stepcast.profiling import classify
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.families import key_columns
from stepcast.profiling.paths import cache_root, shared_data_root

FAMILIES = ("gemm", "norm", "elementwise")
CACHE_FOLDER = "instep"
#: A GPU's own factor needs in-step rows of at least this many models (module docstring: with fewer, the factor is
#: pooled over the other GPUs).
MIN_MODELS = 2


@functools.lru_cache(maxsize=2)
def in_step_rows(root: str | None = None) -> pd.DataFrame:
    """Every in-step row (empty when the shared data is absent)."""
    path = shared_data_root() if root is None else root
    try:
        return neusight_inmodel.load(path)
    except OSError:
        return pd.DataFrame()


def own_factors(hardware: str, estimator, exclude: Iterable[str], rows: pd.DataFrame) -> dict[str, float]:
    """{family: factor} on ``hardware`` from its own in-step rows of every model but ``exclude``, for the families
    with rows of at least ``MIN_MODELS`` models."""
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


def factors(hardware: str, estimator, exclude: Iterable[str] = (), rows: pd.DataFrame | None = None) \
        -> dict[str, float]:
    """{family: factor} on ``hardware`` from the in-step rows of every model but ``exclude``: its own where it has
    enough models, else pooled over the other GPUs (module docstring); families without either are absent."""
    rows = in_step_rows() if rows is None else rows
    excluded = set(exclude)
    held_out = hardware in excluded  # wholly unseen: its own rows left out, the others' pooled
    if rows.empty or hardware not in set(rows["hardware"]):
        return {}
    rows = rows[~rows["hardware"].isin(excluded)]
    out = {} if held_out else own_factors(hardware, estimator, exclude, rows)
    missing = [f for f in FAMILIES if f not in out]
    if missing:
        others = [own_factors(str(g), estimator, exclude, rows) for g in sorted(set(rows["hardware"]) - {hardware})]
        for family in missing:
            values = [o[family] for o in others if family in o]
            if values:
                out[family] = float(np.mean(values))
    return out


def describe(hardware: str, fitted: dict[str, float], exclude: Iterable[str] = ()) -> str:
    """One line for the report's estimator label: ``in-step t4 (gemm x0.78, norm x0.91; without bert_large)``."""
    parts = ", ".join(f"{f} x{v:.2f}" for f, v in sorted(fitted.items()))
    held = f"; without {', '.join(sorted(exclude))}" if exclude else ""
    return f"in-step {hardware} ({parts}{held})"


def data_fingerprint(root: str | None = None) -> str:
    """sha256 of the in-step label files under ``root`` (names and bytes) and of the code that fits factors from
    them (this module, the importer and the op classification it shares): what the cached factors depend on besides
    the estimator."""
    base = Path(shared_data_root() if root is None else root)
    digest = hashlib.sha256()
    for path in [Path(__file__), Path(neusight_inmodel.__file__), Path(classify.__file__),
                 *neusight_inmodel.input_files(base)]:
        name = str(path.relative_to(base)) if path.is_relative_to(base) else path.name
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cached_factors(hardware: str, estimator, exclude: Iterable[str] = (), root: str | None = None) \
        -> dict[str, float]:
    """:func:`factors` of ``hardware`` from the cache when this estimator, data and held-out models were fitted
    before (module docstring); an estimator that names no version is fitted every time."""
    version = getattr(estimator, "version", None)
    if version is None:
        return factors(hardware, estimator, exclude, in_step_rows(root))
    key: dict[str, Any] = {"estimator": f"{getattr(estimator, 'name', type(estimator).__name__)}@{version}",
                           "data": data_fingerprint(root), "hardware": hardware, "exclude": sorted(set(exclude))}
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_root() / CACHE_FOLDER / f"{name}.json"
    try:
        stored = json.loads(path.read_text())
        # nothing fitted (a GPU without in-step rows: H100, B200...) depends on no prediction: no probe to check
        if stored["key"] == key and (not stored["factors"] or _probe(estimator, stored["probe"]) == stored["probe_us"]):
            return {str(f): float(v) for f, v in stored["factors"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # absent, unreadable or from another estimator: fit afresh and rewrite
    rows = in_step_rows(root)
    fitted = factors(hardware, estimator, exclude, rows)
    probe = _probe_rows(rows) if fitted else []
    write_json_atomic(path, {"key": key, "factors": fitted, "probe": probe, "probe_us": _probe(estimator, probe)})
    return fitted


def _probe_rows(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """A few in-step rows per GPU and family (their key columns): a cached fit is reused only while the estimator
    still predicts these as it did, so a bundle re-exported under the same version is not mistaken for the old."""
    if rows.empty:
        return []
    columns = sorted({c for f in FAMILIES for c in key_columns(f)} & set(rows.columns))
    sample = rows[rows["family"].isin(FAMILIES)].groupby(["hardware", "family"]).head(2)[columns]
    return [{c: v for c, v in r.items() if v == v and v is not None} for r in sample.to_dict("records")]


def _probe(estimator, probe: list[dict[str, Any]]) -> list[float]:
    """The estimator's predictions of the probe rows (us, rounded to 6 significant digits: JSON-stable)."""
    if not probe:
        return []
    predicted = estimator.predict_frame(pd.DataFrame.from_records(probe))["predicted_us"].to_numpy(dtype=float)
    return [float(f"{v:.6g}") for v in predicted]
