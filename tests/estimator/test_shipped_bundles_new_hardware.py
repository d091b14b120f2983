"""The shipped bundles (``models/``) describe the catalog's newest GPUs from their yaml alone: B300, GB200 and GB300
were added after the bundles were fitted, and the features and link figures the bundles read keep their names."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast import estimator
from stepcast.profiling.paths import MODELS_DIR

NEW = ("b300", "gb200-nvl72", "gb300-nvl72")


@pytest.mark.parametrize("bundle", ["xgboost", "mlp"])
def test_a_shipped_bundle_predicts_gemms_and_collectives_on_the_new_gpus(bundle):
    rows = [{"family": "gemm", "hardware": h, "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "batch": 1}
            for h in NEW]
    rows += [{"family": "collective", "hardware": h, "dtype": "bf16", "op": "all_reduce", "bytes": 2 ** 26,
              "ranks": 8, "ranks_per_node": 8} for h in NEW]
    out = estimator.load(MODELS_DIR / bundle).predict_frame(pd.DataFrame(rows))
    us = out["predicted_us"].to_numpy()
    assert np.isfinite(us).all() and (us > 0).all()
    flops = 2 * 4096 ** 3 / (us[:3] * 1e-6)
    assert (flops < 2.5e15).all()  # none beats the catalog's dense bf16 peak (2.25-2.5 PFLOP/s)
