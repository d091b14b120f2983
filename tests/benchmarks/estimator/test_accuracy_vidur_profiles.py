"""The Vidur H100 suite can add profiled Hopper GEMMs to each fold's training rows, never the held-out model's."""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.estimator.accuracy import (
    POOLED,
    WITH_PROFILES,
    suite_vidur_h100,
    without_weights_of,
)
from tests.estimator.conftest import synthetic_gemms


def test_the_held_out_models_weights_are_dropped_in_every_pass():
    held_out = pd.DataFrame({"m": [1, 2], "n": [4096, 4096], "k": [1024, 1024]})
    extra = pd.DataFrame({"m": [7, 7, 4096, 7, 1024], "n": [4096, 1024, 1024, 4096, 1024],
                          "k": [1024, 4096, 7, 4096, 1024]})
    kept = without_weights_of(extra, held_out)
    # forward (7, 4096, 1024), input gradient (7, 1024, 4096) and weight gradient (4096, 1024, 7) of the weight go
    assert kept[["m", "n", "k"]].values.tolist() == [[7, 4096, 4096], [1024, 1024, 1024]]


def test_profiled_hopper_gemms_join_the_folds_as_a_column_of_their_own(light_tiled):
    vidur = synthetic_gemms(600, hardware=("h100-sxm",)).assign(dtype="fp16", source="vidur")
    vidur["model"] = np.array(["m1", "m2", "m3", "m4"])[np.arange(len(vidur)) % 4]
    vidur["group"] = vidur["model"]
    profiled = synthetic_gemms(300, hardware=("h200",), seed=5).assign(dtype="fp16", source="profiler")
    res = suite_vidur_h100(pd.concat([vidur, profiled], ignore_index=True), max_train_rows=None)
    ours = res[res["model"] == WITH_PROFILES].set_index("fold")
    assert set(ours.index) == {"m1", "m2", "m3", "m4", POOLED} and ours.loc[POOLED, "n"] == 600
    assert np.isfinite(ours["mean_ape"]).all()
    without = suite_vidur_h100(vidur, max_train_rows=None)
    assert WITH_PROFILES not in set(without["model"])
