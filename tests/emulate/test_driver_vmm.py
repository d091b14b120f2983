"""The driver's virtual memory API (emulate/driver/csrc/memory.c): with PYTORCH_ALLOC_CONF=expandable_segments:True
torch's allocator reserves address ranges and maps 20 MiB chunks (cuMemCreate) into them; the chunks are the
device's memory, so the log's peak equals torch's own peak reserved and a chunk beyond the target's memory raises
torch's OutOfMemoryError."""
from __future__ import annotations

import json
import textwrap

import pytest

from stepcast.emulate.driver.child import run_python
from stepcast.emulate.driver.tracelog import DriverLog, driver_events, peak_device_bytes

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


SYMMETRIC_MEMORY = textwrap.dedent("""
    import ctypes, json, os
    import torch
    import torch.distributed as dist
    from torch.distributed._symmetric_memory import rendezvous

    torch.cuda.set_device(1)
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    t = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p((1 << 20,), (1,), torch.uint8,
                                                                       torch.device("cuda:1"))
    hdl = rendezvous(t, dist.group.WORLD.group_name)  # exports its block as a file descriptor

    cuda = ctypes.CDLL("libcuda.so.1")
    prop, handle, fd, imported = ctypes.create_string_buffer(64), ctypes.c_uint64(), ctypes.c_int(-1), ctypes.c_uint64()
    assert cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(6 << 20), prop, ctypes.c_ulonglong(0)) == 0
    assert cuda.cuMemExportToShareableHandle(ctypes.byref(fd), handle, 1, ctypes.c_ulonglong(0)) == 0
    size = os.fstat(fd.value).st_size
    assert cuda.cuMemImportFromShareableHandle(ctypes.byref(imported), ctypes.c_void_p(fd.value), 1) == 0
    assert cuda.cuMemRelease(imported) == 0 and cuda.cuMemRelease(handle) == 0
    print(json.dumps({"device": t.device.index, "world": hdl.world_size, "exported_size": size}))
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_symmetric_memory_blocks_are_on_the_current_device_and_shared_by_file_descriptor():
    """torch's symmetric memory (async TP) allocates a block on the rank's device and exports it for its peers to
    import: the block's pointer answers that device (not device 0), the exported descriptor has the block's size,
    and an imported block is a peer's memory, not counted on this device."""
    run = run_python(["-c", SYMMETRIC_MEMORY], "h100-sxm", extra_env={"STEPCAST_DEVICE_COUNT": "2"})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == {"device": 1, "world": 1, "exported_size": 6 << 20}
    (records,) = run.events.values()
    sizes = [r.get("bytes") for r in records if r.get("event") == "malloc"]
    assert sizes.count(6 << 20) == 1  # the created block only: importing it added nothing


PEER_COPY = textwrap.dedent("""
    import ctypes, os
    import torch

    torch.cuda.init()
    cuda = ctypes.CDLL("libcuda.so.1")
    u64, size = ctypes.c_uint64, ctypes.c_size_t(2 << 20)
    prop, handle, fd, imported = ctypes.create_string_buffer(64), u64(), ctypes.c_int(-1), u64()
    assert cuda.cuMemCreate(ctypes.byref(handle), size, prop, ctypes.c_ulonglong(0)) == 0
    assert cuda.cuMemExportToShareableHandle(ctypes.byref(fd), handle, 1, ctypes.c_ulonglong(0)) == 0
    assert cuda.cuMemImportFromShareableHandle(ctypes.byref(imported), ctypes.c_void_p(fd.value), 1) == 0
    own, peer, local = u64(), u64(), u64()
    for va, h in ((own, handle), (peer, imported)):
        assert cuda.cuMemAddressReserve(ctypes.byref(va), size, size, u64(0), ctypes.c_ulonglong(0)) == 0
        assert cuda.cuMemMap(va, size, ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(local), size) == 0
    for nbytes, dst, src in ((1 << 20, own, local), (3 << 16, peer, local), (5 << 16, local, peer)):
        assert cuda.cuMemcpyDtoD_v2(dst, src, ctypes.c_size_t(nbytes)) == 0
    assert cuda.cuMemUnmap(peer, size) == 0
    assert cuda.cuMemcpyDtoD_v2(local, peer, ctypes.c_size_t(7 << 16)) == 0
""")


@pytest.mark.slow
def test_copies_to_and_from_a_mapped_peer_block_are_marked_peer():
    """A copy with either end in a peer's block mapped here (symmetric memory's async-TP shards) is logged with
    ``peer`` (the simulator times it over NVLink); a copy within this device's memory, or to the address once the
    peer's block is unmapped, is not."""
    run = run_python(["-c", PEER_COPY], "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    (records,) = run.events.values()
    copies = {r["bytes"]: bool(r.get("peer")) for r in records if r.get("event") == "memcpy"}
    assert {n: copies.get(n) for n in (1 << 20, 3 << 16, 5 << 16, 7 << 16)} == \
        {1 << 20: False, 3 << 16: True, 5 << 16: True, 7 << 16: False}
