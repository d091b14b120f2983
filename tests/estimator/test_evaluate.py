"""Scoring held-out predictions: the pooled figure weighs rows, the fold mean weighs held-out groups."""
from __future__ import annotations

import pandas as pd
import pytest

from stepcast.estimator.evaluate import Evaluation


def test_a_large_group_decides_the_pooled_figure_and_every_group_weighs_the_same_in_the_fold_mean():
    big = pd.DataFrame({"fold": "big", "runtime_us": 100.0, "predicted_us": 101.0}, index=range(90))  # 1 % off
    small = pd.DataFrame({"fold": "small", "runtime_us": 100.0, "predicted_us": 150.0}, index=range(10))  # 50 %
    other = pd.DataFrame({"fold": "only", "runtime_us": 10.0, "predicted_us": 12.0}, index=range(5))  # 20 %
    preds = pd.concat([big.assign(split="held_out_shapes"), small.assign(split="held_out_shapes"),
                       other.assign(split="random")], ignore_index=True)
    table = Evaluation(pd.DataFrame(), preds).by_split().set_index("split")
    assert table.loc["held_out_shapes", "mean_ape"] == pytest.approx(0.9 * 1.0 + 0.1 * 50.0)
    assert table.loc["held_out_shapes", "fold_mean_ape"] == pytest.approx((1.0 + 50.0) / 2)
    assert table.loc["random", "fold_mean_ape"] == pytest.approx(table.loc["random", "mean_ape"]) == pytest.approx(20.0)
