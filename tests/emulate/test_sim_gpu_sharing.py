"""emulate.sim.engine: kernels that fill every SM share the GPU. An estimator times a kernel alone on the GPU; two
such kernels on different streams (async TP's matmuls on two streams, FSDP's copy-out beside compute) cannot both
have every SM at once, so the second ends its own duration of free GPU time later. Smaller grids, and kernels whose
recorded duration already includes the sharing, overlap as they are."""
from __future__ import annotations

import pytest

from emulate.sim.engine import _share
from emulate.sim.synthetic import TraceBuilder
from emulate.simulate import simulate

SMS = 132   # h100-sxm


def iteration_us(grids: tuple[int, int], durations: str = "predicted") -> float:
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    for stream, (blocks, us) in zip((1, 2), zip(grids, (100.0, 60.0))):
        b.kernel(stream=stream, duration_us=us)["grid"] = [blocks, 1, 1]
    b.device_sync()
    b.iteration(1, end=True)
    result = simulate([b.doc()], "h100-sxm", durations=durations)
    return float(result.timelines[0].end.max())


def test_two_kernels_that_fill_the_gpu_on_two_streams_take_the_sum_of_their_times():
    assert iteration_us((4 * SMS, SMS)) == pytest.approx(160.0)


def test_a_kernel_too_small_to_fill_the_gpu_overlaps_freely():
    assert iteration_us((4 * SMS, 8)) == pytest.approx(100.0)


def test_recorded_durations_already_include_the_sharing():
    assert iteration_us((4 * SMS, SMS), durations="measured") == pytest.approx(100.0)


def test_a_kernel_uses_the_free_time_left_between_earlier_ones_and_the_spans_merge():
    starts, ends = [0.0, 20.0], [10.0, 30.0]
    assert _share(starts, ends, 12.0, 5.0) == 17.0          # fits the gap
    assert (starts, ends) == ([0.0, 12.0, 20.0], [10.0, 17.0, 30.0])
    assert _share(starts, ends, 5.0, 6.0) == 31.0           # 2 + 3 free before 30, then 1 more
    assert (starts, ends) == ([0.0], [31.0])
    assert _share(starts, ends, 40.0, 1.0) == 41.0 and (starts, ends) == ([0.0, 40.0], [31.0, 41.0])
    assert _share(starts, ends, 41.0, 0.0) == 41.0 and len(starts) == 2
