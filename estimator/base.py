"""The one estimator contract, scikit-learn style: parameters in the constructor, ``fit`` / ``predict`` / ``save`` /
``load``. Inputs are data frames of kernel rows (columns of :mod:`profiling.families`); outputs are microseconds."""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
import pandas as pd


class KernelEstimator(ABC):
    """Predicts kernel runtimes in microseconds for rows of one or several families."""

    #: short name recorded in predictions ("xgboost", "roofline", ...)
    name: str = "estimator"
    #: version string recorded in predictions (bundle version, registry version)
    version: str = "0"

    def fit(self, frame: pd.DataFrame, runtime_us: np.ndarray) -> "KernelEstimator":
        raise NotImplementedError(f"{type(self).__name__} is not trainable")

    @abstractmethod
    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Runtime in microseconds for every row, as a float64 array (vectorised)."""

    def in_range(self, frame: pd.DataFrame) -> np.ndarray:
        """True where the row lies inside the training support (shapes and hardware seen in training)."""
        return np.ones(len(frame), dtype=bool)

    def support_note(self) -> str:
        """What counts as a seen device for this model's ``in_range`` flag, when it is not simply "trained on that
        device" (the model card's fallback-rule notes)."""
        return ""

    def predict_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The input rows plus ``predicted_us``, ``estimator`` (name@version) and ``in_range``."""
        out = frame.copy()
        out["predicted_us"] = self.predict(frame)
        out["estimator"] = f"{self.name}@{self.version}"
        out["in_range"] = self.in_range(frame)
        return out

    def save(self, path: str | Path) -> Path:
        raise NotImplementedError(f"{type(self).__name__} cannot be saved")

    @classmethod
    def load(cls, path: str | Path) -> "KernelEstimator":
        raise NotImplementedError(f"{cls.__name__} cannot be loaded")
