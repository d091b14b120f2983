"""emulate.sim.contention: a collective's NCCL CTAs hold SMs, so a kernel that fills the GPU beside one runs on the
SMs left (24 of an H100's 132 while they overlap); kernels too small to fill the GPU, kernels after the collective,
pipeline sends and receives, and GPUs without NVLink (two CTAs) cost what they did."""
from __future__ import annotations

import numpy as np
import pytest

from stepcast.emulate.sim import contention
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.profiling.hardware import lookup

#: launches on an H100 (grid, block, shared memory), as tests/emulate/test_sim_gpu_sharing.py has them
GEMM = ([128, 1, 1], [384, 1, 1], 231424)   # persistent blocks, one per SM: fills the GPU
SMALL = ([128, 1, 1], [128, 1, 1], 0)       # 6 % of the block slots


def kernel_us(launch=GEMM, op: str = "all_gather", after: bool = False, hardware: str = "h100-sxm",
              monkeypatch=None, contention_on: bool = True) -> tuple[float, float]:
    """(the kernel's simulated duration, its overlap with the collective) for a 100 us kernel issued beside (or,
    ``after``, behind) a 256 MiB collective of two ranks."""
    if monkeypatch is not None:
        monkeypatch.setenv("STEPCAST_COMM_CONTENTION", "on" if contention_on else "off")
    docs = []
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, hardware=hardware, meta={"launch_latency_us": 0.0})
        b.iteration(0)
        peer = (1 - rank) if op in ("send", "recv") else None
        b.collective(op=("send" if rank == 0 else "recv") if peer is not None else op, stream=2, nbytes=1 << 28,
                     peer=peer)
        if after:
            b.record(1, stream=2)
            b.wait(1, 1)
        grid, block, shmem = launch
        b.kernel(stream=1, duration_us=100.0).update(grid=grid, block=block, shmem=shmem)
        b.device_sync()
        b.iteration(1, end=True)
        docs.append(b.doc())
    result = simulate(docs, hardware)
    prog, tl = result.programs[0], result.timelines[0]
    k = int(np.flatnonzero(prog.kind_array == 0)[0])
    c = int(np.flatnonzero(prog.kind_array == 4)[0])
    overlap = max(0.0, min(tl.end[k], tl.end[c]) - max(tl.start[k], tl.start[c]))
    return float(tl.end[k] - tl.start[k]), overlap


def test_a_kernel_that_fills_the_gpu_beside_a_collective_runs_on_the_sms_nccl_leaves(monkeypatch):
    duration, overlap = kernel_us(monkeypatch=monkeypatch)
    assert overlap > 0.0
    assert duration == pytest.approx(100.0 * 132 / (132 - 24))


def test_switched_off_an_overlapped_collective_costs_compute_nothing(monkeypatch):
    assert kernel_us(monkeypatch=monkeypatch, contention_on=False)[0] == pytest.approx(100.0)


@pytest.mark.parametrize("case", [dict(launch=SMALL), dict(after=True), dict(op="send")],
                         ids=["too small to fill the GPU", "after the collective", "a pipeline send"])
def test_kernels_beside_no_collective_rings_keep_their_time(monkeypatch, case):
    assert kernel_us(monkeypatch=monkeypatch, **case)[0] == pytest.approx(100.0)


def test_a_gpu_without_nvlink_loses_the_two_sms_of_its_pcie_rings():
    spec = lookup("l40s")
    assert not spec.nvlink_bandwidth_gbps
    assert contention.slowdown_share(spec) == pytest.approx(2 / (spec.sm_count - 2))
    assert contention.slowdown_share(lookup("h100-sxm")) == pytest.approx(24 / 108)


def test_overlap_is_measured_against_the_union_of_collective_spans():
    starts, ends = contention.merge_spans(np.array([0.0, 5.0, 20.0]), np.array([10.0, 8.0, 30.0]))
    assert starts.tolist() == [0.0, 20.0] and ends.tolist() == [10.0, 30.0]
    got = contention.covered(starts, ends, np.array([-5.0, 5.0, 12.0, 25.0]), np.array([0.0, 25.0, 18.0, 40.0]))
    assert got.tolist() == [0.0, 10.0, 0.0, 5.0]
