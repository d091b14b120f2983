"""One estimator over a frame of mixed families: each family goes to its own estimator, the rest to the fallback.

Fallback rules, applied per row of a family with a learned estimator (``fallback_rule`` for all families, or
``rules`` per family):
- ``"never"``: always use the learned prediction (rows outside the support are still flagged ``in_range=False``);
- ``"unsupported_spec"``: use the fallback where the device's spec figures lie outside what the learned estimator
  was trained on (a GPU-only model asked about a CPU, or a device far beyond any seen), since an efficiency model
  then extrapolates in the hardware dimensions. Shapes beyond the training range keep the learned prediction:
  tree models clamp efficiency at its edge value, which beats the roofline there (out-of-range split, model card);
- ``"unseen_hardware"``: also use the fallback for every device not in the training data;
- ``"out_of_range"``: use the fallback for every flagged row.
The exporter (estimator/train.py) picks each family's rule from the held-out figures: ``unseen_hardware`` where the
roofline beats the learned model on leave-one-hardware-out, ``out_of_range`` where it wins on the out-of-range
split, ``unsupported_spec`` otherwise.

**Routes** (``routes``, per family; :mod:`estimator.routing`): a routed family holds several candidate models and
runs, for each row, the one its routes name for the row's (device, dtype) and situation: the within-device best
where the training data has rows of that device and dtype (and the family's primary model counts the device as
seen), else the unseen protocol's best for that dtype among devices held out in the same situation (another device
of the same SM design trained at that dtype, or none). Of the fallback rules only the spec test applies there
(``unsupported_spec``, on the model that runs the row); a route naming a model the bundle lacks runs the primary
model, and ``roofline`` is the fallback estimator.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator import attention_backward
from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.bundle import candidate_folder
from stepcast.estimator.frames import as_frame, as_kernels, family_positions, take, text
from stepcast.estimator.routing import ROOFLINE, FamilyRoutes
from stepcast.errors import InputError

FALLBACK_RULES = ("never", "unsupported_spec", "unseen_hardware", "out_of_range")


def _check_rule(rule: str) -> str:
    if rule not in FALLBACK_RULES:
        raise InputError(f"fallback rule '{rule}': expected one of {', '.join(FALLBACK_RULES)}")
    return rule


def fallback_mask(rule: str, shape_ok: np.ndarray, hardware_seen: np.ndarray, spec_ok: np.ndarray) -> np.ndarray:
    """Rows whose prediction should come from the fallback under ``rule``."""
    if rule == "never":
        return np.zeros(len(shape_ok), dtype=bool)
    if rule == "unsupported_spec":
        return ~spec_ok
    if rule == "unseen_hardware":
        return ~spec_ok | ~hardware_seen
    return ~(shape_ok & hardware_seen)


class FamilyRouter(KernelEstimator):
    name = "router"

    def __init__(
        self,
        estimators: dict[str, KernelEstimator] | None = None,
        fallback: KernelEstimator | None = None,
        fallback_rule: str = "unsupported_spec",
        version: str = "0",
        rules: dict[str, str] | None = None,
        candidates: dict[str, dict[str, KernelEstimator]] | None = None,
        routes: dict[str, FamilyRoutes] | None = None,
    ) -> None:
        """``candidates``: family -> kind -> the other models a routed family may run (its primary model is
        ``estimators[family]``); ``routes``: family -> which of them runs each row (:mod:`estimator.routing`)."""
        self.estimators = dict(estimators or {})
        self.candidates = {family: dict(models) for family, models in (candidates or {}).items()}
        self.routes = dict(routes or {})
        self.fallback = fallback or RooflineEstimator()
        self.fallback_rule = _check_rule(fallback_rule)
        self.rules = {family: _check_rule(rule) for family, rule in (rules or {}).items()}
        self.version = version
        self.conv_families = None   # estimator.conv_families.ConvFamilies shipped with the bundle, if any
        self.power_floor = None     # estimator.power_floor.PowerFloor shipped with the bundle, if any

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(self.estimators)

    def rule(self, family: str) -> str:
        return self.rules.get(family, self.fallback_rule)

    def _route(self, frame, labels: bool = True) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Predictions, estimator label (None unless ``labels``: a million-row object column is not free) and
        in-range flag for every row. A GPU's attention backward rows are predicted from their forward twins
        (:mod:`estimator.attention_backward`: no GPU training row times a backward)."""
        frame = as_kernels(frame)
        pred = np.empty(len(frame), dtype=np.float64)
        label = np.empty(len(frame), dtype=object) if labels else None
        ok = np.ones(len(frame), dtype=bool)
        for family, pos in family_positions(frame):
            rows = take(frame, pos)
            twins = attention_backward.gpu_backward_rows(rows) if family == "attention" else ()
            rows = attention_backward.with_forward_twins(rows, twins) if len(twins) else rows
            pred[pos], family_label, ok[pos] = self._family(family, rows, labels)
            if len(twins):
                at = pos[twins]
                pred[at] = attention_backward.backward_from_forward(pred[at], rows, twins)
                if labels:
                    family_label[twins] = family_label[twins] + attention_backward.LABEL
            if labels:
                label[pos] = family_label
        if self.power_floor is not None:
            self._floored(frame, pred, label)
        return pred, label, ok

    def _family(self, family: str, rows, labels: bool) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """One family's (predictions, labels or None, in-range flags): its model, routes and fallback rule."""
        model = self.estimators.get(family)
        if model is None:
            label = np.full(len(rows), _label(self.fallback), dtype=object) if labels else None
            return self.fallback.predict(rows), label, np.zeros(len(rows), dtype=bool)
        if family in self.routes:
            return self._routed(family, model, rows, labels)
        p, shape_ok, seen, spec_ok = self._learned(model, rows)
        use_fallback = fallback_mask(self.rule(family), shape_ok, seen, spec_ok)
        if use_fallback.any():
            p = p.copy()
            p[use_fallback] = self.fallback.predict(take(rows, np.flatnonzero(use_fallback)))
        label = np.where(use_fallback, _label(self.fallback), _label(model)).astype(object) if labels else None
        return p, label, shape_ok & seen

    def _floored(self, frame, pred: np.ndarray, label: np.ndarray | None) -> None:
        """Raise, in place, every prediction of a family the bundle's power floor covers to the least time its
        board's power allows (:mod:`estimator.power_floor`), whichever model made it; label the rows raised."""
        from stepcast.estimator.power_floor import FAMILIES, LABEL

        for family, pos in family_positions(frame):
            if family not in FAMILIES:
                continue
            pred[pos], raised = self.power_floor.apply(take(frame, pos), pred[pos])
            if label is not None and raised.any():
                label[pos[raised]] = label[pos[raised]] + LABEL

    def _routed(self, family: str, model: KernelEstimator, rows, labels: bool
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """A routed family's (predictions, labels, in-range flags): each row by the model its route names, the
        fallback where that model's spec test fails; in range as the primary model judges it."""
        p0, shape_ok, seen, spec_ok = self._learned(model, rows)
        routes = self.routes[family]
        hardware, dtype = text(rows, "hardware"), text(rows, "dtype")
        kinds = routes.kinds_for(hardware, dtype, routes.situations(hardware, dtype, seen))
        pred = np.empty(len(kinds), dtype=np.float64)
        label = np.empty(len(kinds), dtype=object) if labels else None
        for kind in pd.unique(kinds):
            mine = np.flatnonzero(kinds == kind)
            chosen = self.candidate(family, str(kind))
            if chosen is None:
                pred[mine] = self.fallback.predict(take(rows, mine))
                if labels:
                    label[mine] = _label(self.fallback)
                continue
            if chosen is model:
                p, ok = p0[mine], spec_ok[mine]
            else:
                p, _, _, ok = self._learned(chosen, take(rows, mine))
            off = np.flatnonzero(~ok)
            if len(off):
                p = p.copy()
                p[off] = self.fallback.predict(take(rows, mine[off]))
            pred[mine] = p
            if labels:
                label[mine] = np.where(ok, _label(chosen), _label(self.fallback))
        return pred, label, shape_ok & seen

    def candidate(self, family: str, kind: str) -> KernelEstimator | None:
        """The model of ``kind`` a routed family runs: None for ``roofline`` (the fallback), the primary model when
        it is of that kind or when the bundle holds no such candidate."""
        primary = self.estimators[family]
        if kind == ROOFLINE:
            return None
        if _kind(primary) == kind:
            return primary
        return self.candidates.get(family, {}).get(kind, primary)

    @staticmethod
    def _learned(model: KernelEstimator, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, shape in range, hardware seen, spec in range) for a family's rows."""
        if hasattr(model, "predict_with_support"):
            return model.predict_with_support(rows)
        p = np.asarray(model.predict(rows), dtype=np.float64)
        inside = np.asarray(model.in_range(rows), dtype=bool)
        spec = getattr(model, "spec_in_range", None)
        spec_ok = np.asarray(spec(rows), dtype=bool) if spec else np.ones(len(p), dtype=bool)
        return p, inside, np.ones(len(p), dtype=bool), spec_ok

    def predict(self, frame: pd.DataFrame | list[dict]) -> np.ndarray:
        return self._route(frame, labels=False)[0]

    def in_range(self, frame: pd.DataFrame) -> np.ndarray:
        return self._route(frame, labels=False)[2]

    def predict_frame(self, frame: pd.DataFrame | list[dict]) -> pd.DataFrame:
        pred, label, ok = self._route(frame)
        out = as_frame(frame).copy()
        out["predicted_us"], out["estimator"], out["in_range"] = pred, label, ok
        return out

    def save(self, path: str | Path) -> Path:
        from stepcast.estimator.bundle import BUNDLE_FORMAT, BUNDLE_FORMAT_VERSION, seal_bundle, write_json_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for family, model in self.estimators.items():
            _emptied(path / family)  # a re-export over another kind would leave its files in the folder, and sealed
            model.save(path / family)
        candidates = {family: {kind: candidate_folder(family, kind) for kind in models}
                      for family, models in self.candidates.items() if models}
        for family, models in self.candidates.items():
            for kind, model in models.items():
                model.save(_emptied(path / candidate_folder(family, kind)))
        _emptied(path / "_fallback")
        self.fallback.save(path / "_fallback")
        manifest = {
            "format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION, "version": self.version,
            "families": {f: f for f in self.estimators}, "fallback": "_fallback", "fallback_rule": self.fallback_rule,
            "fallback_rules": {f: self.rule(f) for f in self.estimators},
        }
        if self.routes:
            manifest |= {"candidates": candidates, "routes": {f: r.to_dict() for f, r in self.routes.items()}}
        write_json_atomic(path / "manifest.json", manifest)
        if self.conv_families is not None:
            from stepcast.estimator import conv_families

            conv_families.write(path / conv_families.FILENAME, self.conv_families)
        if self.power_floor is not None:
            from stepcast.estimator import power_floor

            power_floor.write(path / power_floor.FILENAME, self.power_floor)
        seal_bundle(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "FamilyRouter":
        """Load a bundle folder; every file is checked against its SHA256SUMS before any is parsed."""
        from stepcast.estimator.bundle import load_estimator_dir, named_folders, verified_manifest

        path = Path(path)
        manifest = verified_manifest(path)
        folders = named_folders(path, manifest)
        estimators = {f: load_estimator_dir(folders[f], verified=True) for f in manifest["families"]}
        fallback = load_estimator_dir(folders["_fallback"], verified=True) if "_fallback" in folders else None
        candidates = {family: {kind: load_estimator_dir(folders[candidate_folder(family, kind)], verified=True)
                               for kind in models} for family, models in manifest.get("candidates", {}).items()}
        source = path / "manifest.json"
        try:
            routes = {f: FamilyRoutes.from_dict(r, f"{source}: field 'routes.{f}'")
                      for f, r in manifest.get("routes", {}).items()}
            router = cls(estimators, fallback, manifest.get("fallback_rule", "unsupported_spec"),
                         str(manifest.get("version", "0")), manifest.get("fallback_rules"), candidates, routes)
        except ValueError as exc:
            raise InputError(f"{source}: {exc}" if str(source) not in str(exc) else str(exc)) from None
        from stepcast.estimator import conv_families, power_floor

        router.conv_families = conv_families.for_bundle(path)   # checked with the bundle's SHA256SUMS
        router.power_floor = power_floor.for_bundle(path)       # likewise; None: no floor
        return router


def _emptied(folder: Path) -> Path:
    """``folder`` with nothing in it (created where missing)."""
    if folder.is_dir():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _label(model: KernelEstimator) -> str:
    return f"{model.name}@{model.version}"


def _kind(model: KernelEstimator) -> str:
    """The bundle kind of a model (``estimator.bundle.KINDS``)."""
    return str(getattr(model, "kind", model.name))
