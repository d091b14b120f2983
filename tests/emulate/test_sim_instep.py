"""In-step calibration: one factor per GPU and family from in-step rows, models held out on request."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.sim import instep


class HalfOfRuntime:
    """An estimator that predicts every kernel at a fixed time, so the factor is checkable by hand."""

    def predict_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(predicted_us=np.where(frame["family"] == "gemm", 100.0, 10.0))


def rows() -> pd.DataFrame:
    return pd.DataFrame([
        # model a: gemm 80 us x 24 layers at pass scale 0.5 -> 40 us in-step each
        {"family": "gemm", "hardware": "t4", "m": 8, "n": 8, "k": 8, "batch": 1, "op": None, "numel": np.nan,
         "runtime_us": 80.0, "repeat": 24, "pass_scale": 0.5, "model": "a", "sample": "T4/a-inf"},
        {"family": "elementwise", "hardware": "t4", "m": np.nan, "n": np.nan, "k": np.nan, "batch": np.nan,
         "op": "add", "numel": 64, "runtime_us": 12.0, "repeat": 1, "pass_scale": 0.5, "model": "a",
         "sample": "T4/a-inf"},
        # model b: gemm 300 us once at pass scale 1.0
        {"family": "gemm", "hardware": "t4", "m": 8, "n": 8, "k": 8, "batch": 1, "op": None, "numel": np.nan,
         "runtime_us": 300.0, "repeat": 1, "pass_scale": 1.0, "model": "b", "sample": "T4/b-inf"},
        {"family": "gemm", "hardware": "p4", "m": 8, "n": 8, "k": 8, "batch": 1, "op": None, "numel": np.nan,
         "runtime_us": 50.0, "repeat": 1, "pass_scale": 1.0, "model": "b", "sample": "P4/b-inf"},
    ])


def test_factor_is_in_step_time_over_predicted_time_weighted_by_repeats(monkeypatch):
    monkeypatch.setattr(instep, "MIN_MODELS", 1)
    fitted = instep.factors("t4", HalfOfRuntime(), rows=rows())
    assert fitted["gemm"] == pytest.approx((40.0 * 24 + 300.0) / (100.0 * 24 + 100.0))
    assert fitted["elementwise"] == pytest.approx(6.0 / 10.0)
    assert "norm" not in fitted


def test_a_held_out_model_does_not_calibrate(monkeypatch):
    monkeypatch.setattr(instep, "MIN_MODELS", 1)
    fitted = instep.factors("t4", HalfOfRuntime(), exclude=["a"], rows=rows())
    assert fitted == {"gemm": pytest.approx(3.0)}
    assert instep.factors("t4", HalfOfRuntime(), exclude=["a", "b"], rows=rows()) == {}


def test_one_model_is_not_enough_evidence_for_a_factor():
    assert instep.MIN_MODELS == 2
    assert instep.factors("t4", HalfOfRuntime(), exclude=["a"], rows=rows()) == {}
    assert "elementwise" not in instep.factors("t4", HalfOfRuntime(), rows=rows())  # only model a has one


def test_a_gpu_without_in_step_rows_is_not_calibrated(monkeypatch):
    assert instep.factors("h100-sxm", HalfOfRuntime(), rows=rows()) == {}
    monkeypatch.setattr(instep, "MIN_MODELS", 1)
    assert instep.factors("h100-sxm", HalfOfRuntime(), rows=rows()) == {}
    assert instep.factors("p4", HalfOfRuntime(), rows=rows())["gemm"] == pytest.approx(0.5)


def pooled_rows() -> pd.DataFrame:
    """rows() plus a third GPU (v100) whose gemm rows of models a and b run at 0.9 of the prediction."""
    extra = pd.DataFrame([
        {"family": "gemm", "hardware": "v100-pcie-32gb", "m": 8, "n": 8, "k": 8, "batch": 1, "op": None,
         "numel": np.nan, "runtime_us": 90.0, "repeat": 1, "pass_scale": 1.0, "model": m, "sample": f"V100/{m}-inf"}
        for m in ("a", "b")])
    return pd.concat([rows(), extra], ignore_index=True)


def test_a_gpu_with_one_models_rows_takes_the_mean_factor_of_the_gpus_that_have_enough():
    # p4: gemm rows of model b only; t4 (a, b) and v100 (a, b) have their own gemm factors
    t4 = (40.0 * 24 + 300.0) / (100.0 * 24 + 100.0)
    assert instep.factors("p4", HalfOfRuntime(), rows=pooled_rows()) == {"gemm": pytest.approx((t4 + 0.9) / 2)}
    assert instep.own_factors("p4", HalfOfRuntime(), (), pooled_rows()) == {}


def test_pooled_factors_hold_the_excluded_model_out_on_every_gpu():
    # without model a no GPU has two models' gemm rows: nothing to pool, so no factor (not b's 0.5, 3.0 or 0.9)
    assert instep.factors("p4", HalfOfRuntime(), exclude=["a"], rows=pooled_rows()) == {}


def test_a_gpus_own_factor_wins_over_the_pool():
    assert instep.factors("v100-pcie-32gb", HalfOfRuntime(), rows=pooled_rows()) == {"gemm": pytest.approx(0.9)}


def test_a_gpu_held_out_whole_takes_the_other_gpus_pooled_factors_not_its_own():
    # v100's own gemm factor is 0.9; held out whole (--unseen) it gets the t4's, the only other GPU with two models
    t4 = (40.0 * 24 + 300.0) / (100.0 * 24 + 100.0)
    fitted = instep.factors("v100-pcie-32gb", HalfOfRuntime(), exclude=["v100-pcie-32gb"], rows=pooled_rows())
    assert fitted == {"gemm": pytest.approx(t4)}
    # and a held-out GPU's rows calibrate no other GPU: p4 pools the t4 alone
    assert instep.factors("p4", HalfOfRuntime(), exclude=["v100-pcie-32gb"], rows=pooled_rows()) == {
        "gemm": pytest.approx(t4)}


def test_the_label_names_factors_and_held_out_models():
    line = instep.describe("t4", {"gemm": 0.784, "norm": 0.9}, ["bert_large"])
    assert line == "in-step t4 (gemm x0.78, norm x0.90; without bert_large)"


class FlatEstimator:
    """Every kernel 100 us, under a learned-looking label."""

    def predict_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(predicted_us=100.0, estimator="flat@1", in_range=True)


def emulated_kernels(monkeypatch, hardware: str, instep_on: bool) -> tuple[list[float], str]:
    from stepcast.emulate.sim.durations import assign_durations
    from stepcast.emulate.sim.program import build_program
    from stepcast.emulate.sim.synthetic import TraceBuilder
    from stepcast.profiling.hardware import lookup

    monkeypatch.setenv("STEPCAST_INSTEP", "on" if instep_on else "off")
    monkeypatch.setenv("STEPCAST_INSTEP_EXCLUDE", "c")
    monkeypatch.setattr(instep, "in_step_rows", lambda root=None: rows())
    b = TraceBuilder(hardware=hardware)
    b.iteration(0)
    b.kernel(spec={"family": "gemm", "m": 8, "n": 8, "k": 8, "batch": 1, "dtype": "fp32"})
    b.kernel(spec={"family": "norm", "op": "layer_norm", "rows": 8, "cols": 8, "pass": "bwd", "dtype": "fp32"})
    b.iteration(1, end=True)
    out = assign_durations([build_program(b.doc())], lookup(hardware), "predicted", FlatEstimator(), 8)
    kernels = [e["seq"] for e in b.events if e["kind"] == "kernel"]
    return [float(out.us[0][i]) for i in kernels], out.estimator_label


def test_durations_scale_predicted_kernels_by_the_targets_in_step_factor(monkeypatch):
    # rows(): gemm of models a and b on this GPU -> factor (40 x 24 + 300) / (100 x 24 + 100); no norm rows
    (gemm, norm), label = emulated_kernels(monkeypatch, "t4", instep_on=True)
    assert gemm == pytest.approx(100.0 * (40.0 * 24 + 300.0) / (100.0 * 24 + 100.0))
    assert norm == pytest.approx(100.0)
    assert "in-step t4 (gemm x0.50; without c)" in label


def test_durations_without_the_calibration_are_the_estimators(monkeypatch):
    (gemm, norm), label = emulated_kernels(monkeypatch, "t4", instep_on=False)
    assert (gemm, norm) == (100.0, 100.0) and "in-step" not in label
