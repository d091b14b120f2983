"""The training-models suite: every model is held out and predicted from draws of N others, never itself; and the
H100's models are scored the same way on each device that measured them."""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.estimator.accuracy import POOLED, suite_training_models
from tests.estimator.conftest import synthetic_gemms


def four_models(hardware: str = "a100-sxm-80gb") -> pd.DataFrame:
    frame = synthetic_gemms(800, hardware=(hardware,))
    frame["model"] = np.array(["m1", "m2", "m3", "m4"])[np.arange(len(frame)) % 4]
    return frame.assign(source="vidur", group=frame["model"])


def test_each_model_is_held_out_and_predicted_from_draws_of_the_others():
    data = pd.concat([four_models(), four_models("h100-sxm").head(400)], ignore_index=True)
    out = suite_training_models(data, max_train_rows=None, draws=2, sizes=(1, 3))
    res = out[out["suite"] == "vidur_a100_training_models"]
    assert set(res["held_out"]) == {"m1", "m2", "m3", "m4"}
    assert res.groupby(["held_out", "model"]).size().to_dict() == {
        (m, size): count for m in ("m1", "m2", "m3", "m4") for size, count in (("1 models", 2), ("3 models", 1))}
    for held, draw in zip(res["held_out"], res["draw"]):
        assert held not in draw.split(",")
    assert (res["n"] == 200).all() and np.isfinite(res["mean_ape"]).all() and POOLED not in set(res["held_out"])
    # the H100's models (here all four) held out one at a time on every device that measured them all
    per_device = out[out["suite"] == "vidur_h100_models_per_device"].set_index("fold")["n"].to_dict()
    assert per_device == {"a100-sxm-80gb": 800, "h100-sxm": 400}
