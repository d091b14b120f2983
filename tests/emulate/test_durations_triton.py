"""emulate.sim.durations: Inductor's Triton kernels (no aten op, no spec) are timed from their launch."""
from __future__ import annotations

import numpy as np
import pandas as pd

from emulate.sim.synthetic import TraceBuilder
from emulate.simulate import simulate
from estimator.base import KernelEstimator


class ElementsEstimator(KernelEstimator):
    """Predicts one microsecond per million elements of an elementwise row and records the rows it saw."""

    name = "elements"

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        self.seen += frame.to_dict("records")
        return (frame["numel"] / 1e6).to_numpy(dtype=float)


def test_a_triton_pointwise_kernel_is_predicted_from_its_grid_not_the_launch_floor():
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    ev = b.kernel(stream=1, name="triton_poi_fused_add_mul_0")
    ev.update(grid=[4096, 1, 1], block=[128, 1, 1], op="CompiledFunction.default", op_shapes=[[4096, 1024]],
              op_dtypes=["torch.bfloat16"])
    b.device_sync()
    b.iteration(1, end=True)
    est = ElementsEstimator()
    result = simulate([b.doc()], "h100-sxm", estimator=est)
    assert est.seen and est.seen[0]["numel"] == 4096 * 128 * 8 and est.seen[0]["dtype"] == "bf16"
    assert result.durations.fallback_reasons == {}
    kernel = next(i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "kernel")
    assert result.durations.us[0][kernel] == 4096 * 128 * 8 / 1e6
