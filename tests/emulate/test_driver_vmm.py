"""The driver's virtual memory API (emulate/driver/csrc/memory.c): with PYTORCH_ALLOC_CONF=expandable_segments:True
torch's allocator reserves address ranges and maps 20 MiB chunks (cuMemCreate) into them; the chunks are the
device's memory, so the log's peak equals torch's own peak reserved and a chunk beyond the target's memory raises
torch's OutOfMemoryError."""
from __future__ import annotations

import json
import textwrap

import pytest

from emulate.driver.child import run_python
from emulate.driver.tracelog import DriverLog, driver_events, peak_device_bytes

GROW_AND_OVERFLOW = textwrap.dedent("""
    import json, sys
    import torch

    x = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
    del x
    z = torch.empty(500 << 20, dtype=torch.uint8, device="cuda")
    peak = torch.cuda.max_memory_reserved()
    torch.cuda.synchronize()  # a mark in the log: the overflow attempt follows
    try:
        torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
        oom = False
    except torch.cuda.OutOfMemoryError:
        oom = True
    print(json.dumps({"peak_reserved": peak, "oom": oom}))
""")


@pytest.mark.slow
def test_expandable_segments_count_their_chunks_as_device_memory():
    run = run_python(["-c", GROW_AND_OVERFLOW], "h100-sxm",
                     extra_env={"PYTORCH_ALLOC_CONF": "expandable_segments:True",
                                "STEPCAST_GPU_MEM_BYTES": str(2 << 30)})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    (records,) = run.events.values()
    log = DriverLog(path=None, records=[r for r in records if r.get("event") in ("malloc", "free", "device_sync",
                                                                                  "stream_sync")])
    events = driver_events(log)
    chunks = [e for e in events if e["kind"] == "malloc" and not e.get("failed")]
    assert chunks and {e["bytes"] for e in chunks} == {20 << 20}  # expandable segments' chunk size
    mark = next(i for i, e in enumerate(events) if e["kind"] in ("device_sync", "stream_sync"))
    assert peak_device_bytes(events[:mark]) == result["peak_reserved"] == 900 << 20
    assert any(e.get("failed") for e in events[mark:] if e["kind"] == "malloc")
    assert result["oom"]  # the 2 GiB tensor does not fit the target's 2 GiB beside the 600 MiB live: torch's error
