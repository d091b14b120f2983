"""emulate.sim.durations: a cuDNN convolution call timed as a GEMM is scaled by its kernel family's factor
(estimator.conv_families, shipped with the bundle); other kernels keep the estimator's time."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.conv_families import ConvFamilies

GEMM = {"family": "gemm", "dtype": "tf32", "m": 4096, "n": 64, "k": 27, "batch": 1}
CONV = "aten.cudnn_convolution.default"


class TenMicroseconds(KernelEstimator):
    name = "ten"

    def __init__(self, table: ConvFamilies | None) -> None:
        self.conv_families = table

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return np.full(len(frame), 10.0)


def conv_step(op: str = CONV) -> tuple[dict, list[int]]:
    """One step: a TF32 convolution call (layout transform carrying the row, the xmma kernel and the transform
    back as op_part kernels), then a plain matmul with the same row. Returns the trace and the kernel positions."""
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    first = b.kernel(name="void cudnn::engines_precompiled::nchwToNhwcKernel<float>", spec=GEMM)
    first.update(op=op, op_part=False)
    for name in ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc",
                 "void cudnn::engines_precompiled::nhwcToNchwKernel<float>"):
        b.kernel(name=name).update(op=op, op_part=True)
    b.kernel(name="ampere_sgemm_128x64_nn", spec=GEMM).update(op="aten.mm.default", op_part=False)
    b.device_sync()
    b.iteration(1, end=True)
    doc = b.doc()
    return doc, [i for i, e in enumerate(doc["events"]) if e["kind"] == "kernel"]


@pytest.mark.parametrize("table, conv_us", [(None, 10.0), (ConvFamilies({"tc_fprop": math.log(2.0)}), 20.0),
                                            (ConvFamilies({"scudnn": math.log(2.0)}), 10.0)])
def test_a_convolution_call_is_scaled_by_its_family_and_a_matmul_is_not(table, conv_us):
    doc, (conv, xmma, back, mm) = conv_step()
    us = simulate([doc], "a10g", estimator=TenMicroseconds(table)).durations.us[0]
    assert us[conv] == pytest.approx(conv_us)
    assert us[xmma] == us[back] == 0.0       # op_part kernels: timed with the call's first kernel
    assert us[mm] == pytest.approx(10.0)


def test_a_convolution_backward_keeps_the_gemm_time():
    doc, (conv, *_) = conv_step("aten.convolution_backward.default")
    table = ConvFamilies({"tc_fprop": math.log(2.0)})
    assert simulate([doc], "a10g", estimator=TenMicroseconds(table)).durations.us[0][conv] == pytest.approx(10.0)
