"""XGBoost regressor on the kernel features: the primary learned estimator. Weights are stored as UBJ."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from estimator.learned import LearnedEstimator
from estimator.tree_walker import TreeWalker


#: batches at least this long are predicted on every core
PARALLEL_ROWS = 65536
#: batches at most this long skip XGBoost's per-call overhead (see estimator.tree_walker)
WALKER_ROWS = 16


class XGBoostEstimator(LearnedEstimator):
    kind = "xgboost"

    def __init__(
        self,
        family: str = "gemm",
        target: str = "efficiency",
        spec_tolerance: float = 2.0,
        n_estimators: int = 300,
        max_depth: int = 8,
        learning_rate: float = 0.08,
        subsample: float = 0.9,
        colsample_bytree: float = 0.9,
        min_child_weight: float = 1.0,
        reg_lambda: float = 1.0,
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(family, target, spec_tolerance)
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.n_jobs = n_jobs
        self.seed = seed
        self.booster: xgb.Booster | None = None
        self._walker: TreeWalker | None = None

    def get_params(self) -> dict[str, Any]:
        return super().get_params() | {
            k: getattr(self, k) for k in ("n_estimators", "max_depth", "learning_rate", "subsample",
                                          "colsample_bytree", "min_child_weight", "reg_lambda", "n_jobs", "seed")
        }

    def _fit_matrix(self, x: np.ndarray, y: np.ndarray) -> None:
        params = {"objective": "reg:squarederror", "tree_method": "hist", "max_depth": self.max_depth,
                  "eta": self.learning_rate, "subsample": self.subsample, "colsample_bytree": self.colsample_bytree,
                  "min_child_weight": self.min_child_weight, "lambda": self.reg_lambda, "nthread": self.n_jobs,
                  "seed": self.seed}
        data = xgb.DMatrix(x, label=y, feature_names=self.feature_names)
        self.booster = xgb.train(params, data, num_boost_round=self.n_estimators)
        self._walker = None

    def _predict_matrix(self, x: np.ndarray) -> np.ndarray:
        if self.booster is None:
            raise RuntimeError("xgboost estimator is not fitted")
        if len(x) <= WALKER_ROWS:
            if self._walker is None:
                self._walker = TreeWalker(self.booster)
            return self._walker.predict(x)
        if len(x) < PARALLEL_ROWS:  # small batches: one thread (no pool wake-up, no fight with a busy machine)
            return self.booster.inplace_predict(x, validate_features=False)
        self.booster.set_param({"nthread": os.cpu_count() or 1})
        try:
            return self.booster.inplace_predict(x, validate_features=False)
        finally:
            self.booster.set_param({"nthread": self.n_jobs})

    def _save_weights(self, path: Path) -> None:
        tmp = path / ".partial.model.ubj"
        self.booster.save_model(str(tmp))
        tmp.replace(path / "model.ubj")

    def _load_weights(self, path: Path, meta: dict[str, Any]) -> None:
        self.booster = xgb.Booster()
        self.booster.load_model(str(path / "model.ubj"))
        self._walker = None
        self.booster.set_param({"nthread": self.n_jobs})
