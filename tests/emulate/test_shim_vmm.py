"""The driver's virtual memory API under the shim: with PYTORCH_ALLOC_CONF=expandable_segments:True torch's
allocator reserves address ranges and maps 20 MiB chunks (cuMemCreate) into them; the chunks are the device's
memory, so the log's peak equals torch's own peak reserved and a chunk beyond the target's memory raises torch's
OutOfMemoryError. Runs the preloaded interpreter directly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from emulate.shim_build import shim_path
from emulate.shimlog import peak_device_bytes, rank_events, read_rank_log

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
def test_expandable_segments_count_their_chunks_as_device_memory(tmp_path):
    shim = shim_path()
    script = tmp_path / "grow.py"
    script.write_text(GROW_AND_OVERFLOW)
    log = tmp_path / "rank0.log"
    env = {**os.environ, "LD_PRELOAD": str(shim), "LD_LIBRARY_PATH": str(shim.parent), "STEPCAST_LOG": str(log),
           "STEPCAST_GPU_MEM_BYTES": str(2 << 30), "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    env.pop("STEPCAST_LOG_OWNER", None)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    events = rank_events(read_rank_log(log), comm_sizes={}, ranks_per_node=1)
    chunks = [e for e in events if e["kind"] == "malloc" and not e.get("failed")]
    assert chunks and {e["bytes"] for e in chunks} == {20 << 20}  # expandable segments' chunk size
    mark = next(i for i, e in enumerate(events) if e["kind"] == "device_sync")
    assert peak_device_bytes(events[:mark]) == result["peak_reserved"] == 900 << 20
    assert any(e.get("failed") for e in events[mark:] if e["kind"] == "malloc")
    assert result["oom"]  # the 2 GiB tensor does not fit the target's 2 GiB beside the 600 MiB live: torch's error
