"""emulate.sim.durations: copies are timed by the link they cross: a device copy reads and writes HBM, a copy to or
from a peer GPU (async TP's shards through symmetric memory) crosses NVLink, a copy to or from the host PCIe, each
link at the share of its rated bandwidth a copy engine was measured to move."""
from __future__ import annotations

import pytest

from stepcast.emulate.sim.durations import COPY_LATENCY_US, LINK_COPY_EFFICIENCY
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.profiling.hardware import lookup

NBYTES = 128 << 20


def copy_us(hardware: str, **fields) -> float:
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    b.memcpy(NBYTES, direction="d2d", stream=1).update(fields)
    b.device_sync()
    b.iteration(1, end=True)
    index = next(i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "memcpy")
    return float(simulate([b.doc()], hardware).durations.us[0][index]) - COPY_LATENCY_US


@pytest.mark.parametrize("hardware", ["h100-sxm", "a100-sxm-80gb"])
def test_a_peer_copy_crosses_nvlink_and_a_device_copy_reads_and_writes_hbm(hardware):
    hw = lookup(hardware)
    assert copy_us(hardware) == pytest.approx(NBYTES / (hw.memory_bandwidth / 2) * 1e6)
    assert copy_us(hardware, peer=True) == pytest.approx(NBYTES / (hw.nvlink_bandwidth_gbps * 1e9 * 0.84) * 1e6)
    assert copy_us(hardware, peer=True) > 2 * copy_us(hardware)


def test_a_copy_engine_moves_what_was_measured_across_nvlink_and_pcie():
    # 380 of 450 GB/s between two H100 SXM (NVIDIA/nccl#1264), 26.3 of 31.5 GB/s between two A6000 over PCIe 4
    assert 380 / 450 == pytest.approx(LINK_COPY_EFFICIENCY, abs=0.01)
    assert 26.3 / 31.5 == pytest.approx(LINK_COPY_EFFICIENCY, abs=0.01)
    hw = lookup("h100-sxm")
    h2d = copy_us("h100-sxm", direction="h2d")
    assert h2d == pytest.approx(NBYTES / (hw.pcie_bandwidth_gbps * 1e9 * LINK_COPY_EFFICIENCY) * 1e6)
