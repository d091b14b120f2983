"""Peak memory learned from the trials so far, to rule out configurations that will not fit before emulating them.

An emulation reports its peak memory even when the configuration fits, and most of a training step's memory is a
fixed part (weights, gradients, optimizer state, gathered parameters) plus a part that grows linearly in the
micro-batch (activations). ``memory.model`` in a search config says which parameter scales the memory
(``scale: micro_batch``), which parameters the fixed part depends on (``static: [reshard]``) and which the part per
unit of the scale depends on (``per_unit: [ac]``); the model is then

    peak(config) = static[config's static values] + scale(config) * per_unit[config's per-unit values]

fitted by least squares to the feasible trials' peaks. It predicts a configuration only where the trials determine
it (its feature row lies in the span of the fitted rows: e.g. reshard=never at micro-batch 2 once never at
micro-batch 1 and one other checkpointing mode at both micro-batches ran), never by extrapolating a guess, and a
configuration is ruled out only when its prediction exceeds the target's memory by more than ``margin`` (the
model's own error, reported, is the check on that margin). Out-of-memory trials are not fitted (their peak is
only known to exceed the memory); they are counted against the model when it had predicted them to fit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepcast.emulate.search.space import Config

GIB = 2 ** 30


@dataclass(frozen=True)
class Prediction:
    """A predicted peak (GiB) and how many feasible trials it was fitted to."""
    peak_gib: float
    trials: int


class MemoryModel:
    """Least-squares fit of peak memory (GiB) over the feasible trials seen so far (not thread-safe: the caller
    holds its lock)."""

    def __init__(self, scale: str, static: list[str], per_unit: list[str]) -> None:
        self.scale, self.static, self.per_unit = scale, list(static), list(per_unit)
        self._rows: list[tuple[Config, float]] = []
        self._fit: tuple[list[tuple], np.ndarray, np.ndarray] | None = None

    def observe(self, config: Config, peak_bytes: int | float) -> None:
        """Record a feasible trial's peak memory."""
        self._rows.append((config, float(peak_bytes) / GIB))
        self._fit = None

    def _features(self, config: Config, columns: list[tuple]) -> np.ndarray:
        row = np.zeros(len(columns))
        for i, (kind, values) in enumerate(columns):
            if kind == "static" and values == tuple(config[n] for n in self.static):
                row[i] = 1.0
            elif kind == "per_unit" and values == tuple(config[n] for n in self.per_unit):
                row[i] = float(config[self.scale])
        return row

    def _columns(self, configs: list[Config]) -> list[tuple]:
        columns: list[tuple] = []
        for config in configs:
            for kind, names in (("static", self.static), ("per_unit", self.per_unit)):
                column = (kind, tuple(config[n] for n in names))
                if column not in columns:
                    columns.append(column)
        return columns

    def predict(self, config: Config) -> Prediction | None:
        """The predicted peak of ``config``, or None when the trials so far do not determine it."""
        if not self._rows:
            return None
        if self._fit is None:
            columns = self._columns([c for c, _ in self._rows])
            design = np.array([self._features(c, columns) for c, _ in self._rows])
            peaks = np.array([p for _, p in self._rows])
            coef = np.linalg.lstsq(design, peaks, rcond=None)[0]
            self._fit = (columns, coef, np.linalg.pinv(design) @ design)   # projector onto the rows' span
        columns, coef, projector = self._fit
        own = self._columns([config])
        if any(column not in columns for column in own):
            return None   # a static or per-unit group no feasible trial has shown
        row = self._features(config, columns)
        if np.linalg.norm(row - row @ projector) > 1e-6 * max(1.0, np.linalg.norm(row)):
            return None   # not determined by the trials (e.g. only one micro-batch seen for every group)
        return Prediction(peak_gib=float(row @ coef), trials=len(self._rows))


def relative_error(predicted_gib: float, measured_bytes: int | float) -> float:
    """(predicted - measured) / measured for one feasible trial."""
    measured = float(measured_bytes) / GIB
    return (predicted_gib - measured) / measured


@dataclass(frozen=True)
class ModelErrors:
    """How the learned model did in one search: its relative error on the feasible trials it predicted before they
    ran, and the out-of-memory trials it had predicted to fit."""
    predicted: int                  # feasible trials predicted before they ran
    median_abs_error: float | None  # of (predicted - measured) / measured
    worst_error: float | None       # the signed error of largest size
    oom_predicted_to_fit: int
    model_pruned: int


def model_errors(trials, memory_gib: float) -> ModelErrors:
    """The learned model's errors over a search's distinct trials (TrialResult with ``predicted_peak_gib``)."""
    errors = [relative_error(t.predicted_peak_gib, t.peak_memory_bytes) for t in trials
              if t.feasible and t.predicted_peak_gib is not None and t.peak_memory_bytes]
    missed = sum(t.status == "oom" and t.predicted_peak_gib is not None and t.predicted_peak_gib <= memory_gib
                 for t in trials)
    pruned = sum(t.status == "pruned" and t.predicted_peak_gib is not None for t in trials)
    return ModelErrors(predicted=len(errors),
                       median_abs_error=float(np.median(np.abs(errors))) if errors else None,
                       worst_error=max(errors, key=abs) if errors else None,
                       oom_predicted_to_fit=missed, model_pruned=pruned)


__all__ = ["GIB", "MemoryModel", "ModelErrors", "Prediction", "model_errors", "relative_error"]
