"""The bounds of benchmarks.estimator.diagnose: each is zero where the data carries no error of its kind, and not
otherwise."""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.estimator.diagnose import (
    feature_variants,
    level_oracle,
    neighbour_bound,
    transfer_bound,
)


def _series(times: list[float], **keys) -> pd.DataFrame:
    return pd.DataFrame({"m": np.arange(1, len(times) + 1) * 8.0, "runtime_us": times} | keys)


def test_level_oracle_removes_a_constant_error_per_series_and_not_a_staircase():
    a = _series([10, 10, 20, 20, 40, 40, 80, 80, 160, 160], model="a")
    b = _series([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], model="b")
    pred = pd.concat([a.assign(predicted_us=a["runtime_us"] * 1.3), b.assign(predicted_us=b["runtime_us"] * 0.8)])
    assert level_oracle(pred, ["model"], parts=1) < 1e-9
    flat = pd.concat([a.assign(predicted_us=40.0), b.assign(predicted_us=9.0)])
    assert level_oracle(flat, ["model"], parts=1) > 20
    assert level_oracle(flat, ["model"], parts=5) < level_oracle(flat, ["model"], parts=1)


def test_neighbour_bound_is_zero_on_a_flat_series_and_grows_with_a_step():
    assert neighbour_bound(_series([10.0] * 6, model="a"), ["model"]) == 0.0
    stepped = neighbour_bound(_series([10.0, 10, 10, 20, 20, 20], model="a"), ["model"])
    assert stepped > 10


def test_neighbour_bound_never_mixes_two_series():
    both = pd.concat([_series([10.0] * 5, model="a"), _series([100.0] * 5, model="b")])
    assert neighbour_bound(both, ["model"]) == 0.0


def test_transfer_bound_is_zero_between_devices_that_differ_by_a_ratio_per_decade():
    shapes = np.arange(1, 41, dtype=float)
    a = pd.DataFrame({"m": shapes, "hardware": "a", "runtime_us": shapes * 10})
    b = a.assign(hardware="b", runtime_us=a["runtime_us"] * np.where(a["runtime_us"] < 100, 2.0, 3.0))
    bound = transfer_bound(pd.concat([a, b]), ["m"])
    assert bound.loc["b", "best"] < 1e-9
    noisy = b.assign(runtime_us=b["runtime_us"] * np.where(np.arange(40) % 2, 1.5, 1.0))
    assert transfer_bound(pd.concat([a, noisy]), ["m"]).loc["b", "best"] > 10


def test_feature_variants_score_every_variant_on_every_fold(gemm_rows):
    table = feature_variants(gemm_rows, "leave_one_hardware_out", None)
    assert set(table.columns) == {"h100-sxm", "a100-sxm-80gb", "pooled"}
    assert table.notna().all().all() and len(table) >= 2


def test_an_unknown_suite_stops_the_command_with_exit_2(capsys):
    import pytest

    from benchmarks.estimator.diagnose import main

    with pytest.raises(SystemExit) as stopped:
        main(["--suites", "vidur,nope"])
    assert stopped.value.code == 2 and "unknown suite(s) nope" in capsys.readouterr().err
