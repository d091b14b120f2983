"""What every learned estimator shares: features, target transform, training support, bundle metadata.

One learned estimator covers one kernel family (the router combines them). Subclasses only fit and apply a
regressor on the feature matrix (``_fit_matrix`` / ``_predict_matrix``) and store its weights portably.

Targets (``target``):
- ``"efficiency"``: log(runtime / analytical baseline). The model learns how far a kernel falls short of the
  roofline on its device; the device's spec figures enter both the baseline and the features, which is what lets a
  model trained on some GPUs speak for another.
- ``"log_time"``: log(runtime) directly.

``kernel_config`` (GEMMs only): the features also describe the kernel that runs (``estimator.kernel_config``), from
the row's recorded launch or else cuBLASLt's own heuristic on the virtual device (``estimator.kernel_labels``).
``timing``: the timing method of the row's source is a feature (``estimator.features.TIMING_METHODS``), so sources
timed differently can train one model; rows without a source are predicted as a kernel inside a training step.
"""
from __future__ import annotations

import hashlib
import os
from abc import abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.bundle import read_json, seal_estimator_dir, write_json_atomic
from stepcast.estimator.features import FeatureFrame, categorical_keys, features
from stepcast.estimator.frames import Kernels, as_kernels, factorize
from stepcast.estimator.kernel_labels import label_for_features
from stepcast.estimator.support import SEEN_WITH, Support
from stepcast.profiling.families import key_columns
from stepcast.errors import InputError

TARGETS = ("efficiency", "log_time")


class LearnedEstimator(KernelEstimator):
    kind: str = "learned"

    def __init__(self, family: str = "gemm", target: str = "efficiency", spec_tolerance: float = 2.0,
                 kernel_config: bool = False, timing: bool = False) -> None:
        if target not in TARGETS:
            raise ValueError(f"target '{target}': expected one of {', '.join(TARGETS)}")
        self.family = family
        self.target = target
        self.spec_tolerance = spec_tolerance
        self.kernel_config = bool(kernel_config) and family == "gemm"
        self.timing = bool(timing)
        self.name = self.kind
        self.version = "0"
        self.feature_names: list[str] = []
        self.support: Support | None = None
        self.training: dict[str, Any] = {}

    # -- scikit-learn style parameters -------------------------------------------------------------------------
    def get_params(self) -> dict[str, Any]:
        return {"family": self.family, "target": self.target, "spec_tolerance": self.spec_tolerance,
                "kernel_config": self.kernel_config, "timing": self.timing}

    @property
    def families(self) -> tuple[str, ...]:
        return (self.family,)

    # -- training and prediction --------------------------------------------------------------------------------
    def _features(self, frame: Kernels) -> FeatureFrame:
        codes, uniques = factorize(frame["family"])
        if len(uniques) and (len(uniques) > 1 or str(uniques[0]) != self.family):
            raise ValueError(f"{self.name} estimator for '{self.family}' got rows of family "
                             f"{', '.join(map(str, uniques))} (route mixed frames through estimator.load())")
        if self.kernel_config:
            frame = label_for_features(frame)
        feats = features(self.family, frame, self.kernel_config, self.timing)
        if self.feature_names and feats.names != self.feature_names:
            differ = next((f"{a!r} vs {b!r}" for a, b in zip(self.feature_names, feats.names) if a != b),
                          f"{len(self.feature_names)} vs {len(feats.names)} features")
            raise InputError(f"{self.name}@{self.version} ({self.family}) was trained on other features than this "
                             f"version computes (first difference: {differ}): retrain or re-export the bundle")
        return feats

    def fit(self, frame: pd.DataFrame, runtime_us: np.ndarray) -> "LearnedEstimator":
        runtime_us = np.asarray(runtime_us, dtype=np.float64)
        if len(runtime_us) != len(frame) or not np.all(runtime_us > 0):
            raise ValueError("runtime_us: expected one positive time (microseconds) per row")
        feats = self._features(frame)
        y = np.log(runtime_us) - (np.log(feats.baseline_us) if self.target == "efficiency" else 0.0)
        self.feature_names = feats.names
        self.support = Support.fit(self.family, frame, feats.hardware, self.spec_tolerance)
        self.training = {"rows": int(len(frame)), "hardware": self.support.hardware,
                         "digest": frame_digest(frame, runtime_us)}
        self._fit_matrix(feats.matrix, y)
        return self

    def predict(self, frame: pd.DataFrame | list[dict]) -> np.ndarray:
        frame = as_kernels(frame)
        if len(frame) == 0:
            return np.empty(0)
        feats = self._features(frame)
        y = self._predict_matrix(feats.matrix).astype(np.float64)
        return np.exp(y) * feats.baseline_us if self.target == "efficiency" else np.exp(y)

    def predict_with_support(self, frame: Kernels) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Predictions, shape-in-range, hardware-seen and spec-in-range flags from one pass over the features (the
        router's path).

        Large frames with many repeated kernels (an emulated training step repeats each layer's kernels) are
        computed once per distinct kernel and scattered back."""
        distinct = distinct_rows(frame, self.family)
        if distinct is not None:
            rows, inverse = distinct
            return tuple(a[inverse] for a in self.predict_with_support(rows))
        parts = split_for_cores(frame)
        if parts is not None:
            with ThreadPoolExecutor(len(parts)) as pool:
                done = list(pool.map(self._predict_with_support, parts))
            return tuple(np.concatenate(column) for column in zip(*done))
        return self._predict_with_support(frame)

    def _predict_with_support(self, frame: Kernels) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        feats = self._features(frame)
        y = self._predict_matrix(feats.matrix).astype(np.float64)
        pred = np.exp(y) * feats.baseline_us if self.target == "efficiency" else np.exp(y)
        support = self._require_support()
        hw = feats.hardware
        return (pred, support.shape_in_range(frame), support.hardware_seen(frame, hw),
                hw.per_row(support.spec_in_range(hw.device_spec)))

    def in_range(self, frame: pd.DataFrame) -> np.ndarray:
        return self._require_support().in_range(as_kernels(frame))

    def support_note(self) -> str:
        seen_with = SEEN_WITH.get(self.family)
        return f"a device counts as seen only at the {', '.join(seen_with)} it was measured at" if seen_with else ""

    def spec_in_range(self, frame: pd.DataFrame) -> np.ndarray:
        from stepcast.estimator.hardware_table import row_hardware

        frame = as_kernels(frame)
        hw = row_hardware(frame["hardware"], frame["dtype"])
        return hw.per_row(self._require_support().spec_in_range(hw.device_spec))

    def _require_support(self) -> Support:
        if self.support is None:
            raise RuntimeError(f"{self.name} estimator is not fitted")
        return self.support

    @abstractmethod
    def _fit_matrix(self, x: np.ndarray, y: np.ndarray) -> None: ...

    @abstractmethod
    def _predict_matrix(self, x: np.ndarray) -> np.ndarray: ...

    # -- persistence -----------------------------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "params": self.get_params(),
                "feature_names": self.feature_names, "support": self._require_support().to_dict(),
                "training": self.training}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._save_weights(path)
        write_json_atomic(path / "meta.json", self._meta() | self._extra_meta())
        seal_estimator_dir(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LearnedEstimator":
        path = Path(path)
        meta = read_json(path / "meta.json")
        if meta.get("kind") != cls.kind:
            raise InputError(f"{path / 'meta.json'}: field 'kind' is {meta.get('kind')!r}, expected '{cls.kind}'")
        model = cls(**meta["params"])
        model.version = str(meta.get("version", "0"))
        model.feature_names = list(meta["feature_names"])
        model.support = Support.from_dict(meta["support"])
        model.training = meta.get("training", {})
        model._load_weights(path, meta)
        return model

    def _extra_meta(self) -> dict[str, Any]:
        return {}

    @abstractmethod
    def _save_weights(self, path: Path) -> None: ...

    @abstractmethod
    def _load_weights(self, path: Path, meta: dict[str, Any]) -> None: ...


#: frames at least this long are checked for repeated kernels
DEDUP_MIN_ROWS = 4096
#: frames at least this long are cut in one part per core, each predicted on its own thread: the features are numpy
#: (which releases the GIL over whole columns) and the regressors predict on one thread each, so a million kernels
#: use every core from the first column to the last
PARALLEL_MIN_ROWS = 1 << 17


def split_for_cores(frame: Kernels) -> list[pd.DataFrame] | None:
    if not isinstance(frame, pd.DataFrame) or len(frame) < PARALLEL_MIN_ROWS:
        return None
    cores = min(os.cpu_count() or 1, 8)
    if cores < 2:
        return None
    frame = categorical_keys(frame)  # once here, not in every part, where converting strings holds the GIL
    bounds = np.linspace(0, len(frame), cores + 1).astype(int)
    return [frame.iloc[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


def distinct_rows(frame: Kernels, family: str, max_share: float = 0.5) -> tuple[pd.DataFrame, np.ndarray] | None:
    """(distinct rows, index of each row's distinct row) when a large frame repeats kernels enough to pay off;
    None otherwise (judged on a sample first, so a frame of distinct kernels costs little)."""
    if not isinstance(frame, pd.DataFrame) or len(frame) < DEDUP_MIN_ROWS:
        return None
    cols = [c for c in key_columns(family) if c in frame.columns]
    sample = pd.util.hash_pandas_object(frame[cols].iloc[:DEDUP_MIN_ROWS], index=False).to_numpy()
    if len(np.unique(sample)) > max_share * len(sample):
        return None
    hashes = pd.util.hash_pandas_object(frame[cols], index=False).to_numpy()
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    if len(first) > max_share * len(frame):
        return None
    return frame.iloc[first], inverse


def frame_digest(frame: pd.DataFrame, runtime_us: np.ndarray) -> str:
    """A short content hash of the training rows (what MLflow's dataset digest and the model card record)."""
    h = hashlib.sha256(pd.util.hash_pandas_object(frame.reset_index(drop=True), index=False).to_numpy().tobytes())
    h.update(np.asarray(runtime_us, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]
