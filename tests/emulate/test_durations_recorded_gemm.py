"""emulate.sim.durations: a GEMM row carries the cuBLAS launch the trace recorded (kernel_name, grid) when the target
is the device the trace was captured on, so a kernel-configuration estimator reads the kernel that ran."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.xgb import XGBoostEstimator
from tests.estimator.test_kernel_config import _two_kernel_world

GEMM = {"family": "gemm", "dtype": "bf16", "m": 2048, "n": 2048, "k": 2048, "batch": 1}
# the two kernels of the two-kernel world the kernel-configuration model below is fitted on (slow, fast)
SLOW = "_ZN7cutlass7Kernel2I57cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_32x2_tn_align1EE"
FAST = "nvjet_sm90_tst_128x256_64x4_2x1_h_bz_coopA_TNT"


@pytest.fixture(autouse=True)
def no_instep(monkeypatch):
    monkeypatch.setenv("STEPCAST_INSTEP", "off")  # the rows as the estimator predicts them


class TenMicroseconds(KernelEstimator):
    name = "ten"

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return np.full(len(frame), 10.0)


def gemm_trace(launches: list[tuple[str, list[int]]], hardware: str = "h100-sxm") -> dict:
    """One step of GEMM launches (kernel name, grid), every one carrying the same GEMM spec."""
    b = TraceBuilder(rank=0, world_size=1, hardware=hardware, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    for name, grid in launches:
        b.kernel(name=name, spec=GEMM)["grid"] = grid
    b.device_sync()
    b.iteration(1, end=True)
    return b.doc()


def spec_rows(doc: dict, target: str, estimator: KernelEstimator | None = None) -> pd.DataFrame:
    return simulate([doc], target, estimator=estimator or TenMicroseconds()).durations.spec_rows


def test_a_gemm_on_the_captured_device_carries_its_recorded_kernel_and_grid():
    doc = gemm_trace([(FAST, [16, 8, 1])])
    rows = spec_rows(doc, "h100-sxm")
    assert rows[["kernel_name", "grid"]].to_dict("records") == [{"kernel_name": FAST, "grid": "16,8,1"}]
    assert "kernel_name" not in next(e["spec"] for e in doc["events"] if e["kind"] == "kernel")  # a copy


def test_another_target_or_a_kernel_that_is_not_the_gemm_leaves_the_row_unlabelled():
    assert "kernel_name" not in spec_rows(gemm_trace([(FAST, [16, 8, 1])]), "a100-sxm-80gb").columns
    # a convolution call's first kernel (its layout transform) carries the GEMM spec but is no GEMM kernel
    layout = "void cudnn::engines_precompiled::nchwToNhwcKernel<float>"
    assert "kernel_name" not in spec_rows(gemm_trace([(layout, [64, 1, 1])]), "h100-sxm").columns


def test_the_same_gemm_run_by_two_kernels_is_two_rows_and_repeats_are_one():
    doc = gemm_trace([(FAST, [16, 8, 1]), (SLOW, [32, 32, 1]), (FAST, [16, 8, 1])])
    rows = spec_rows(doc, "h100-sxm")
    assert sorted(rows["kernel_name"]) == sorted([FAST, SLOW])
    assert dict(zip(rows["kernel_name"], rows["grid"])) == {FAST: "16,8,1", SLOW: "32,32,1"}


def test_a_kernel_configuration_model_predicts_the_recorded_kernel():
    train = _two_kernel_world(1000, 0)  # the slow kernel runs at a quarter of the fast one's FLOP rate
    model = XGBoostEstimator(kernel_config=True).fit(train, train["runtime_us"].to_numpy())
    slow, fast = (spec_rows(gemm_trace([(name, [16, 8, 1])]), "h100-sxm", model)["predicted_us"].iloc[0]
                  for name in (SLOW, FAST))
    assert slow > 2 * fast
