"""Random forest on the kernel features: the Vidur/Maya baseline, for benchmarks only.

It is not shipped: scikit-learn forests have no portable format short of pickling, and shipped bundles hold no
pickles. ``save`` says so.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestRegressor

from stepcast.estimator.learned import LearnedEstimator


class RandomForestEstimator(LearnedEstimator):
    kind = "random_forest"

    def __init__(
        self,
        family: str = "gemm",
        target: str = "log_time",
        spec_tolerance: float = 2.0,
        kernel_config: bool = False,
        timing: bool = False,
        n_estimators: int = 100,
        max_features: float = 1.0,
        min_samples_leaf: int = 1,
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(family, target, spec_tolerance, kernel_config, timing)
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.n_jobs = n_jobs
        self.seed = seed
        self.forest: RandomForestRegressor | None = None

    def get_params(self) -> dict[str, Any]:
        return super().get_params() | {k: getattr(self, k) for k in
                                       ("n_estimators", "max_features", "min_samples_leaf", "n_jobs", "seed")}

    def _fit_matrix(self, x: np.ndarray, y: np.ndarray) -> None:
        self.forest = RandomForestRegressor(n_estimators=self.n_estimators, max_features=self.max_features,
                                            min_samples_leaf=self.min_samples_leaf, n_jobs=self.n_jobs,
                                            random_state=self.seed)
        self.forest.fit(np.nan_to_num(x, nan=-1.0), y)

    def _predict_matrix(self, x: np.ndarray) -> np.ndarray:
        return self.forest.predict(np.nan_to_num(x, nan=-1.0))

    def save(self, path: str | Path) -> Path:
        raise NotImplementedError("random_forest is a benchmark-only baseline: scikit-learn forests have no "
                                  "pickle-free format, and bundles hold no pickles")

    def _save_weights(self, path: Path) -> None:  # pragma: no cover - save() refuses first
        raise NotImplementedError

    def _load_weights(self, path: Path, meta: dict[str, Any]) -> None:
        raise NotImplementedError("random_forest bundles do not exist (benchmark-only baseline)")
