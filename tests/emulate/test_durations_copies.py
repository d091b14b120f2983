"""emulate.sim.durations: copies are timed by the link they cross: a device copy reads and writes HBM, a copy to or
from a peer GPU (async TP's shards through symmetric memory) crosses NVLink."""
from __future__ import annotations

import pytest

from stepcast.emulate.sim.durations import COPY_LATENCY_US
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
    assert copy_us(hardware, peer=True) == pytest.approx(NBYTES / (hw.nvlink_bandwidth_gbps * 1e9) * 1e6)
    assert copy_us(hardware, peer=True) > 2 * copy_us(hardware)
