"""The numpy tree walker used for small batches gives XGBoost's own predictions, missing values included."""
from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from stepcast.estimator.tree_walker import TreeWalker


@pytest.fixture(scope="module")
def booster() -> xgb.Booster:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan  # learn default directions
    y = np.nan_to_num(np.sin(x[:, 0])) + np.nan_to_num(x[:, 1]) * np.nan_to_num(x[:, 2]) + (x[:, 3] > 0.3)
    params = {"objective": "reg:squarederror", "max_depth": 5, "eta": 0.3, "nthread": 1, "seed": 0}
    return xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=40)


def test_walker_matches_xgboost_on_rows_with_and_without_missing_values(booster):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 6)).astype(np.float32) * 2
    x[rng.random(x.shape) < 0.1] = np.nan
    expected = booster.inplace_predict(x, validate_features=False)
    np.testing.assert_allclose(TreeWalker(booster).predict(x), expected, rtol=1e-5, atol=1e-5)


def test_walker_refuses_boosters_it_cannot_evaluate():
    x = np.random.default_rng(2).normal(size=(100, 3))
    logistic = xgb.train({"objective": "binary:logistic", "nthread": 1}, xgb.DMatrix(x, label=x[:, 0] > 0),
                         num_boost_round=2)
    with pytest.raises(ValueError, match="unsupported booster"):
        TreeWalker(logistic)


def test_shipped_gemm_model_predicts_the_same_through_both_paths():
    from stepcast import estimator

    model = estimator.load()
    rows = [{"family": "gemm", "hardware": hw, "dtype": dt, "m": m, "n": n, "k": k, "batch": 1}
            for hw in ("h100-sxm", "a100-sxm-80gb") for dt in ("bf16", "fp32") for m, n, k in
            ((1, 4096, 4096), (512, 12288, 4096), (8192, 8192, 1024), (37, 11008, 4096), (4096, 4096, 4096))]
    small = np.concatenate([model.predict(rows[i:i + 4]) for i in range(0, len(rows), 4)])  # walker
    large = model.predict(rows * 2)[: len(rows)]                                             # xgboost
    np.testing.assert_allclose(small, large, rtol=1e-4)


def test_one_row_frames_predict_like_the_batch_they_came_from():
    import pandas as pd

    from stepcast import estimator

    model = estimator.load()
    frame = pd.DataFrame({"family": pd.Categorical(["gemm"] * 6), "hardware": ["h100-sxm", "a100-sxm-80gb"] * 3,
                          "dtype": pd.array(["bf16", "fp16", "fp32"] * 2, dtype="string"),
                          "m": [1, 512, 8192, 37, 4096, 300], "n": [4096, 12288, 8192, 11008, 4096, 64],
                          "k": [4096, 4096, 1024, 4096, 4096, 100], "batch": [1, 1, 1, 1, 1, 8]})
    one_by_one = [model.predict(frame.iloc[[i]])[0] for i in range(len(frame))]
    np.testing.assert_allclose(one_by_one, model.predict(frame), rtol=1e-6)
