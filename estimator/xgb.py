"""XGBoost regressor on the kernel features: the primary learned estimator. Weights are stored as UBJ.

The default objective is absolute error on the log target (efficiency or log-time): the median in log space, which
suits a mean-APE metric and is not dragged by the few kernels whose measured time jumps (a different cuBLAS kernel
choice at the next shape); it scored 6.4 against 6.7 % mean APE for squared error on Vidur's held-out H100 models
(300 trees of depth 6, same folds).

The default size, 32 trees of depth 6, is set by prediction cost: a tree ensemble costs about 2.5 ns per row and tree
level on one core, and a million distinct GEMMs have to be timed in a second on two cores, features included, on a
shared machine whose speed varies by half from minute to minute. Against 300 trees of depth 6 (9.4 times the cost)
it gives up about 0.3 points of held-out-model error on Vidur's H100 GEMMs and nothing on NeuSight
leave-one-GPU-out (40 trees scored the same as 32); deeper or more trees at a similar cost did no better (a random
search over 15 configurations: 6.4 - 7.3 % on the Vidur split; docs/estimators.md, "Design decisions").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from stepcast.estimator.learned import LearnedEstimator
from stepcast.estimator.tree_walker import TreeWalker
from stepcast.errors import InputError


#: batches at most this long skip XGBoost's per-call overhead (see estimator.tree_walker)
WALKER_ROWS = 16


class XGBoostEstimator(LearnedEstimator):
    kind = "xgboost"

    def __init__(
        self,
        family: str = "gemm",
        target: str = "efficiency",
        spec_tolerance: float = 2.0,
        kernel_config: bool = False,
        timing: bool = False,
        objective: str = "reg:absoluteerror",
        n_estimators: int = 32,
        max_depth: int = 6,
        learning_rate: float = 0.35,
        subsample: float = 0.9,
        colsample_bytree: float = 0.9,
        min_child_weight: float = 1.0,
        reg_lambda: float = 1.0,
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(family, target, spec_tolerance, kernel_config, timing)
        self.objective = objective
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
            k: getattr(self, k) for k in ("objective", "n_estimators", "max_depth", "learning_rate", "subsample",
                                          "colsample_bytree", "min_child_weight", "reg_lambda", "n_jobs", "seed")
        }

    def _fit_matrix(self, x: np.ndarray, y: np.ndarray) -> None:
        params = {"objective": self.objective, "tree_method": "hist", "max_depth": self.max_depth,
                  "eta": self.learning_rate, "subsample": self.subsample, "colsample_bytree": self.colsample_bytree,
                  "min_child_weight": self.min_child_weight, "lambda": self.reg_lambda, "nthread": self.n_jobs,
                  "seed": self.seed}
        data = xgb.DMatrix(x, label=y, feature_names=self.feature_names)
        self.booster = xgb.train(params, data, num_boost_round=self.n_estimators)
        self.booster.set_param({"nthread": 1})  # n_jobs is for training; prediction threads: see _predict_matrix
        self._walker = None

    def _predict_matrix(self, x: np.ndarray) -> np.ndarray:
        if self.booster is None:
            raise RuntimeError("xgboost estimator is not fitted")
        if len(x) <= WALKER_ROWS:
            if self._walker is None:
                self._walker = TreeWalker(self.booster)
            return self._walker.predict(x)
        # one thread: large frames are split across cores by LearnedEstimator (features and trees both), and
        # inplace_predict is thread-safe where changing the booster's nthread per call would not be
        return self.booster.inplace_predict(x, validate_features=False)

    def _save_weights(self, path: Path) -> None:
        tmp = path / ".partial.model.ubj"
        self.booster.save_model(str(tmp))
        tmp.replace(path / "model.ubj")

    def _load_weights(self, path: Path, meta: dict[str, Any]) -> None:
        self.booster = xgb.Booster()
        try:
            self.booster.load_model(str(path / "model.ubj"))
        except xgb.core.XGBoostError as exc:  # the native message is a multi-line stack without the file name
            first = next((line for line in str(exc).splitlines() if line.strip()), "")
            raise InputError(f"{path / 'model.ubj'}: not a readable XGBoost model ({first.strip()[:200]})") from None
        self._walker = None
        self.booster.set_param({"nthread": 1})
