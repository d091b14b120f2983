"""Training support: shapes beyond the training range and unseen hardware are flagged; the router falls back to the
roofline where the rule says the learned model is not to be trusted."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.router import FamilyRouter
from stepcast.estimator.xgb import XGBoostEstimator


@pytest.fixture(scope="module")
def model(gemm_rows) -> XGBoostEstimator:
    return XGBoostEstimator(n_estimators=20).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())


def rows(hardware: str, m: float) -> pd.DataFrame:
    return pd.DataFrame([dict(family="gemm", hardware=hardware, dtype="bf16", m=m, n=1024, k=1024, batch=1)])


def test_inside_support_is_in_range(model):
    assert model.in_range(rows("h100-sxm", 1024))[0]


def test_shape_beyond_training_max_is_flagged(model, gemm_rows):
    assert not model.in_range(rows("h100-sxm", gemm_rows["m"].max() * 8))[0]


def test_unseen_hardware_is_flagged_but_similar_spec_is_trusted(model):
    frame = rows("h100-pcie", 1024)
    assert not model.in_range(frame)[0]
    assert model.spec_in_range(frame)[0]  # an H100 PCIe is within the spec range of H100 SXM + A100


def test_cpu_is_outside_a_gpu_models_spec(model):
    assert not model.spec_in_range(rows("cpu-intel-xeon-2c", 1024))[0]


@pytest.mark.parametrize("rule, expect_fallback", [
    ("never", False), ("unsupported_spec", True), ("unseen_hardware", True), ("out_of_range", True)])
def test_router_fallback_rules_for_unsupported_hardware(model, rule, expect_fallback):
    frame = rows("cpu-intel-xeon-2c", 1024)
    out = FamilyRouter({"gemm": model}, fallback_rule=rule).predict_frame(frame)
    assert out["estimator"].iat[0].startswith("roofline" if expect_fallback else "xgboost")
    assert not out["in_range"].iat[0]
    if expect_fallback:
        assert out["predicted_us"].iat[0] == RooflineEstimator().predict(frame)[0]


def test_shape_out_of_range_keeps_learned_prediction_under_default_rule(model, gemm_rows):
    frame = rows("h100-sxm", gemm_rows["m"].max() * 8)
    out = FamilyRouter({"gemm": model}).predict_frame(frame)
    assert out["estimator"].iat[0].startswith("xgboost") and not out["in_range"].iat[0]
    np.testing.assert_allclose(out["predicted_us"], model.predict(frame))


def test_unseen_hardware_rule_falls_back_for_a_similar_but_unmeasured_device(model):
    frame = rows("h100-pcie", 1024)
    kept = FamilyRouter({"gemm": model}, fallback_rule="unsupported_spec").predict_frame(frame)
    dropped = FamilyRouter({"gemm": model}, rules={"gemm": "unseen_hardware"}).predict_frame(frame)
    assert kept["estimator"].iat[0].startswith("xgboost")
    assert dropped["estimator"].iat[0].startswith("roofline")


def test_rules_survive_save_and_load(model, tmp_path):
    path = FamilyRouter({"gemm": model}, rules={"gemm": "unseen_hardware"}).save(tmp_path / "b")
    assert FamilyRouter.load(path).rule("gemm") == "unseen_hardware"


def test_rules_follow_the_held_out_figures():
    from stepcast.estimator.train import choose_rules

    metrics = pd.DataFrame([
        ("gemm", "leave_one_hardware_out", "xgboost", 10.0), ("gemm", "leave_one_hardware_out", "roofline", 30.0),
        ("gemm", "out_of_range", "xgboost", 8.0), ("gemm", "out_of_range", "roofline", 20.0),
        ("collective", "leave_one_hardware_out", "xgboost", 90.0),
        ("collective", "leave_one_hardware_out", "roofline", 40.0),
        ("norm", "out_of_range", "xgboost", 50.0), ("norm", "out_of_range", "roofline", 20.0),
    ], columns=["family", "split", "model", "mean_ape"])
    assert choose_rules(metrics, "xgboost", "unsupported_spec") == {
        "collective": "unseen_hardware", "gemm": "unsupported_spec", "norm": "out_of_range"}


def collectives(hardware: str, ranks: float, op: str = "all_reduce", n: int = 60) -> pd.DataFrame:
    size = np.logspace(10, 30, n, base=2.0)
    frame = pd.DataFrame({"family": "collective", "hardware": hardware, "dtype": "bf16", "op": op, "bytes": size,
                          "ranks": ranks, "ranks_per_node": ranks})
    frame["runtime_us"] = RooflineEstimator().predict(frame) * 1.3
    return frame


def test_a_collective_topology_a_device_was_not_measured_at_counts_as_unseen_hardware():
    train = pd.concat([collectives("a100-sxm-80gb", 2), collectives("a100-sxm-80gb", 8), collectives("a40", 2)])
    model = XGBoostEstimator(family="collective", n_estimators=10).fit(train, train["runtime_us"].to_numpy())
    frame = pd.concat([collectives("a40", 2, n=1), collectives("a40", 8, n=1),  # a40 measured at 2 ranks only
                       collectives("a40", 2, op="all_gather", n=1)], ignore_index=True)  # and all_reduce only
    assert model.in_range(frame).tolist() == [True, False, False]
    out = FamilyRouter({"collective": model}, rules={"collective": "unseen_hardware"}).predict_frame(frame)
    assert [e.split("@")[0] for e in out["estimator"]] == ["xgboost", "roofline", "roofline"]
