"""Large frames that repeat kernels are predicted once per distinct kernel; the answer is the same row by row."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stepcast.estimator.learned import DEDUP_MIN_ROWS, distinct_rows
from stepcast.estimator.router import FamilyRouter
from stepcast.estimator.xgb import XGBoostEstimator


def test_repeated_kernels_give_the_same_predictions(gemm_rows):
    model = XGBoostEstimator(n_estimators=10).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())
    kernels = gemm_rows[["family", "hardware", "dtype", "m", "n", "k", "batch"]]
    repeated = pd.concat([kernels] * (DEDUP_MIN_ROWS // len(kernels) + 2), ignore_index=True)
    rows, inverse = distinct_rows(repeated, "gemm")
    assert len(rows) == len(kernels.drop_duplicates())
    routed = FamilyRouter({"gemm": model}).predict(repeated)
    np.testing.assert_allclose(routed, np.tile(model.predict(kernels), len(repeated) // len(kernels)))


def test_distinct_kernels_are_not_deduplicated(gemm_rows):
    rng = np.random.default_rng(0)
    n = DEDUP_MIN_ROWS * 2
    frame = pd.DataFrame({"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": rng.integers(1, 10**6, n),
                          "n": rng.integers(1, 10**6, n), "k": 64, "batch": 1})
    assert distinct_rows(frame, "gemm") is None


def test_large_frames_split_across_cores_give_the_same_predictions(gemm_rows, monkeypatch):
    import stepcast.estimator.learned as learned

    model = XGBoostEstimator(n_estimators=10).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())
    rng = np.random.default_rng(1)
    n = 5000
    frame = pd.DataFrame({"family": "gemm", "hardware": rng.choice(["h100-sxm", "a100-sxm-80gb", "b200"], n),
                          "dtype": "bf16", "m": rng.integers(1, 8192, n), "n": rng.integers(64, 8192, n),
                          "k": rng.integers(64, 8192, n), "batch": 1})
    whole = model.predict_with_support(frame)
    monkeypatch.setattr(learned, "PARALLEL_MIN_ROWS", 1000)
    monkeypatch.setattr(learned.os, "cpu_count", lambda: 3)  # three uneven parts, whatever this machine has
    parts = learned.split_for_cores(frame)
    assert parts is not None and [len(p) for p in parts] == [1666, 1667, 1667]
    split = model.predict_with_support(frame)
    for a, b in zip(whole, split):
        np.testing.assert_array_equal(a, b)
