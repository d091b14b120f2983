"""emulate.sim.durations: a PyTorch reduction launched with too few threads to cover the DRAM latency takes at least
its latency bound (estimator.memory_latency) whatever the estimator predicts; launches the bound does not know, and
an op call's first kernel whose row covers further kernels, keep the prediction."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.estimator.memory_latency import latency_bound_us
from stepcast.estimator.workload import norm
from stepcast.profiling.hardware import lookup
from tests.emulate.test_durations_triton import Recording

LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float)"
SPEC = {"family": "norm", "dtype": "fp32", "op": "layer_norm", "rows": 16, "cols": 4 * 2**20, "pass": "fwd"}


@pytest.fixture(autouse=True)
def rows_as_predicted(monkeypatch):
    monkeypatch.setenv("STEPCAST_INSTEP", "off")   # the rows as the estimator predicts them


def kernel_times(*kernels: tuple[str, list[int], bool | None], hardware: str = "t4") -> list[float]:
    """Predicted us of each (name, grid, op_part) kernel of one iteration, the estimator saying 1 ms a row; op_part
    None: a kernel with no spec of its own, whose row the simulator makes of its op's tensors."""
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    for name, grid, part in kernels:
        ev = b.kernel(stream=0, name=name, spec=dict(SPEC) if part is False else None)
        ev.update(grid=grid, block=[32, 4, 1], thread=0, **({"op_part": True} if part else {}))
        if part is None:
            ev.update(op="aten.native_layer_norm.default", op_shapes=[[16, 4 * 2**20]], op_dtypes=["torch.float32"])
    b.device_sync()
    b.iteration(1, end=True)
    result = simulate([b.doc()], hardware, estimator=Recording(lambda frame: np.full(len(frame), 1000.0)))
    events = b.doc()["events"]
    return [float(result.durations.us[0][i]) for i, e in enumerate(events) if e["kind"] == "kernel"]


def test_a_layer_norm_of_sixteen_blocks_takes_its_latency_bound_and_one_that_fills_the_gpu_its_prediction():
    moved = norm(pd.DataFrame.from_records([SPEC])).bytes
    bound = float(latency_bound_us(moved, np.array([16 * 128.0]), np.array([1.0]), lookup("t4"))[0])
    assert bound > 5000.0                                       # us, where the estimator said 1 ms
    few, many = kernel_times((LAYER_NORM, [16, 1, 1], False), (LAYER_NORM, [4096, 1, 1], False))
    assert few == pytest.approx(bound) and many == 1000.0


def test_kernels_whose_code_or_bytes_the_bound_does_not_know_keep_the_prediction():
    triton, head, part, derived = kernel_times(("triton_red_fused_native_layer_norm_0", [16, 1, 1], False),
                                               (LAYER_NORM, [16, 1, 1], False),
                                               ("void at::native::other_kernel<T>()", [1, 1, 1], True),
                                               (LAYER_NORM, [16, 1, 1], None))
    assert triton == 1000.0 and head == 1000.0 and part == 0.0   # the head's row covers its op_part kernel too
    assert derived == 1000.0                                      # its op's tensors: an estimate, not its bytes
