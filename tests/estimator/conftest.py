"""Small synthetic training frames for the estimator tests (fast; the real data is exercised by the benchmark).

Runtimes are the roofline estimate scaled by a shape-dependent efficiency plus noise, so a learned model has
something to learn and a model that learned it beats one that did not.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.analytical import RooflineEstimator


def synthetic_gemms(n: int = 400, hardware=("h100-sxm", "a100-sxm-80gb"), seed: int = 0,
                    max_dim: int = 4096) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "family": "gemm", "hardware": rng.choice(list(hardware), n), "dtype": "bf16",
        "m": rng.integers(16, max_dim, n).astype(float), "n": rng.integers(16, max_dim, n).astype(float),
        "k": rng.integers(16, max_dim, n).astype(float), "batch": 1.0,
    })
    efficiency = 0.3 + 0.6 / (1.0 + np.exp(-(np.log2(frame["m"]) - 9.0)))  # small m: far below the roofline
    frame["runtime_us"] = RooflineEstimator().predict(frame) / efficiency * rng.lognormal(0.0, 0.02, n)
    frame["source"], frame["group"] = "synthetic", np.where(frame["k"] > 2048, "big-k", "small-k")
    return frame


def synthetic_norms(n: int = 200, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "family": "norm", "hardware": "h100-sxm", "dtype": "bf16", "op": rng.choice(["layer_norm", "rms_norm"], n),
        "rows": rng.integers(1, 8192, n).astype(float), "cols": rng.integers(64, 8192, n).astype(float),
        "pass": rng.choice(["fwd", "bwd"], n),
    })
    frame["runtime_us"] = RooflineEstimator().predict(frame) * 1.5 * rng.lognormal(0.0, 0.02, n)
    frame["source"], frame["group"] = "synthetic", "norms"
    return frame


@pytest.fixture(scope="session")
def gemm_rows() -> pd.DataFrame:
    return synthetic_gemms()


@pytest.fixture(scope="session")
def norm_rows() -> pd.DataFrame:
    return synthetic_norms()
