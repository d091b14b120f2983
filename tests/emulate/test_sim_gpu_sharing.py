"""emulate.sim.engine: kernels that fill every SM share the GPU. An estimator times a kernel alone on the GPU; two
such kernels on different streams (async TP's matmuls on two streams, FSDP's copy-out beside compute) cannot both
have every SM at once, so the second ends its own duration of free GPU time later. Smaller grids, and kernels whose
recorded duration already includes the sharing, overlap as they are."""
from __future__ import annotations

import pytest

from stepcast.emulate.sim.engine import _share
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate

#: launches on an H100 (132 SMs, 2048 threads and 228 KB of shared memory per SM): (grid, block, shared memory)
GEMM = ([128, 1, 1], [384, 1, 1], 231424)        # a Hopper GEMM's persistent blocks: one per SM, 128 of 132 SMs
ELEMENTWISE = ([131072, 1, 1], [128, 1, 1], 0)   # many waves of small blocks
SMALL = ([128, 1, 1], [128, 1, 1], 0)            # 128 small blocks: 6 % of the GPU's 2112 block slots


def iteration_us(first, second, durations: str = "predicted") -> float:
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    for stream, (grid, block, shmem), us in ((1, first, 100.0), (2, second, 60.0)):
        b.kernel(stream=stream, duration_us=us).update(grid=grid, block=block, shmem=shmem)
    b.device_sync()
    b.iteration(1, end=True)
    result = simulate([b.doc()], "h100-sxm", durations=durations)
    return float(result.timelines[0].end.max())


@pytest.mark.parametrize("second", [GEMM, ELEMENTWISE])
def test_two_kernels_that_fill_the_gpu_on_two_streams_take_the_sum_of_their_times(second):
    assert iteration_us(GEMM, second) == pytest.approx(160.0)


def test_a_kernel_too_small_to_fill_the_gpu_overlaps_freely():
    assert iteration_us(GEMM, SMALL) == pytest.approx(100.0)


def test_recorded_durations_already_include_the_sharing():
    assert iteration_us(GEMM, GEMM, durations="measured") == pytest.approx(100.0)


def test_a_kernel_uses_the_free_time_left_between_earlier_ones_and_the_spans_merge():
    starts, ends = [0.0, 20.0], [10.0, 30.0]
    assert _share(starts, ends, 12.0, 5.0) == 17.0          # fits the gap
    assert (starts, ends) == ([0.0, 12.0, 20.0], [10.0, 17.0, 30.0])
    assert _share(starts, ends, 5.0, 6.0) == 31.0           # 2 + 3 free before 30, then 1 more
    assert (starts, ends) == ([0.0], [31.0])
    assert _share(starts, ends, 40.0, 1.0) == 41.0 and (starts, ends) == ([0.0, 40.0], [31.0, 41.0])
    assert _share(starts, ends, 41.0, 0.0) == 41.0 and len(starts) == 2
