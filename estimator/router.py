"""One estimator over a frame of mixed families: each family goes to its own estimator, the rest to the fallback.

Fallback rule (``fallback_rule``), applied per row to rows a learned estimator flags:
- ``"never"``: always use the learned prediction (still flagged ``in_range=False``);
- ``"unsupported_spec"``: use the fallback where the device's spec figures lie outside what the learned estimator
  was trained on (e.g. a GPU-only model asked about a CPU, or a device far faster than any seen), since an
  efficiency model then extrapolates in the hardware dimensions; shapes beyond the training range keep the learned
  prediction, because tree models clamp efficiency to its saturated edge value, which beats the roofline there;
- ``"out_of_range"``: use the fallback for every flagged row.
The shipped default is chosen by measurement on the out-of-range split (see the model card).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from estimator.analytical import RooflineEstimator
from estimator.base import KernelEstimator
from estimator.frames import as_frame, as_kernels, family_positions, take

FALLBACK_RULES = ("never", "unsupported_spec", "out_of_range")


class FamilyRouter(KernelEstimator):
    name = "router"

    def __init__(
        self,
        estimators: dict[str, KernelEstimator] | None = None,
        fallback: KernelEstimator | None = None,
        fallback_rule: str = "unsupported_spec",
        version: str = "0",
    ) -> None:
        if fallback_rule not in FALLBACK_RULES:
            raise ValueError(f"fallback_rule '{fallback_rule}': expected one of {', '.join(FALLBACK_RULES)}")
        self.estimators = dict(estimators or {})
        self.fallback = fallback or RooflineEstimator()
        self.fallback_rule = fallback_rule
        self.version = version

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(self.estimators)

    def _route(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Predictions, estimator label and in-range flag for every row."""
        frame = as_kernels(frame)
        pred = np.empty(len(frame), dtype=np.float64)
        label = np.empty(len(frame), dtype=object)
        ok = np.ones(len(frame), dtype=bool)
        fallback_label = _label(self.fallback)
        for family, pos in family_positions(frame):
            rows = take(frame, pos)
            model = self.estimators.get(family)
            if model is None:
                pred[pos], label[pos], ok[pos] = self.fallback.predict(rows), fallback_label, False
                continue
            if hasattr(model, "predict_with_support"):
                p, inside, spec_ok = model.predict_with_support(rows)
                use_fallback = self._fallback_mask(inside, spec_ok)
            else:
                p = np.asarray(model.predict(rows), dtype=np.float64)
                inside = np.asarray(model.in_range(rows), dtype=bool)
                use_fallback = self._needs_fallback(model, rows, inside)
            if use_fallback.any():
                p = p.copy()
                p[use_fallback] = self.fallback.predict(take(rows, np.flatnonzero(use_fallback)))
            pred[pos], ok[pos] = p, inside
            label[pos] = np.where(use_fallback, fallback_label, _label(model))
        return pred, label, ok

    def _fallback_mask(self, inside: np.ndarray, spec_ok: np.ndarray) -> np.ndarray:
        if self.fallback_rule == "never":
            return np.zeros(len(inside), dtype=bool)
        return ~inside if self.fallback_rule == "out_of_range" else ~spec_ok

    def _needs_fallback(self, model: KernelEstimator, rows: pd.DataFrame, inside: np.ndarray) -> np.ndarray:
        if self.fallback_rule == "never":
            return np.zeros(len(rows), dtype=bool)
        if self.fallback_rule == "out_of_range":
            return ~inside
        spec_ok = getattr(model, "spec_in_range", None)
        return ~np.asarray(spec_ok(rows), dtype=bool) if spec_ok else np.zeros(len(rows), dtype=bool)

    def predict(self, frame: pd.DataFrame | list[dict]) -> np.ndarray:
        return self._route(frame)[0]

    def in_range(self, frame: pd.DataFrame) -> np.ndarray:
        return self._route(frame)[2]

    def predict_frame(self, frame: pd.DataFrame | list[dict]) -> pd.DataFrame:
        pred, label, ok = self._route(frame)
        frame = as_frame(frame)
        out = frame.copy()
        out["predicted_us"], out["estimator"], out["in_range"] = pred, label, ok
        return out

    def save(self, path: str | Path) -> Path:
        from estimator.bundle import BUNDLE_FORMAT, BUNDLE_FORMAT_VERSION, write_json_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for family, model in self.estimators.items():
            model.save(path / family)
        self.fallback.save(path / "_fallback")
        write_json_atomic(path / "manifest.json", {
            "format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION, "version": self.version,
            "families": {f: f for f in self.estimators}, "fallback": "_fallback", "fallback_rule": self.fallback_rule,
        })
        return path

    @classmethod
    def load(cls, path: str | Path) -> "FamilyRouter":
        from estimator.bundle import BUNDLE_FORMAT, load_estimator_dir, read_json

        path = Path(path)
        manifest = read_json(path / "manifest.json")
        if manifest.get("format") != BUNDLE_FORMAT:
            raise ValueError(f"{path / 'manifest.json'}: field 'format' is {manifest.get('format')!r}, "
                             f"expected '{BUNDLE_FORMAT}'")
        estimators = {f: load_estimator_dir(path / sub) for f, sub in manifest["families"].items()}
        fallback = load_estimator_dir(path / manifest["fallback"]) if manifest.get("fallback") else None
        return cls(estimators, fallback, manifest.get("fallback_rule", "unsupported_spec"),
                   str(manifest.get("version", "0")))


def _label(model: KernelEstimator) -> str:
    return f"{model.name}@{model.version}"
