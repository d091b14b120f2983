"""Splits: held-out shapes hold out whole groups, but never a device's only data (that would be an unseen-device
test, which is leave-one-hardware-out's)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stepcast.estimator.splits import folds, shape_hash
from tests.estimator.conftest import synthetic_gemms


def three_groups() -> pd.DataFrame:
    """Two groups on H100 and A100, and a third group that is the only A40 data."""
    frame = synthetic_gemms(600, hardware=("h100-sxm", "a100-sxm-80gb"))
    frame["group"] = np.where(np.arange(len(frame)) % 2 == 0, "model-a", "model-b")
    only_a40 = synthetic_gemms(200, hardware=("a40",), seed=3).assign(group="model-c")
    return pd.concat([frame, only_a40], ignore_index=True)


def test_held_out_shapes_holds_out_a_group_whole_when_its_devices_stay_seen():
    frame = three_groups()
    fold = next(f for f in folds("held_out_shapes", frame) if f.name == "model-a")
    assert set(frame["group"].iloc[fold.test]) == {"model-a"}
    assert (frame["group"] == "model-a").sum() == len(fold.test)


def test_held_out_shapes_keeps_the_device_of_a_group_that_alone_measures_it_seen():
    frame = three_groups()
    fold = next(f for f in folds("held_out_shapes", frame) if f.name.startswith("model-c"))
    test, train = frame.iloc[fold.test], frame.iloc[fold.train]
    assert set(test["group"]) == {"model-c"}
    assert 0 < len(test) < (frame["group"] == "model-c").sum()
    assert "a40" in set(train["hardware"])
    # whole shapes are held out: none of the test shapes is also in training
    assert not np.isin(shape_hash(test), shape_hash(train)).any()
