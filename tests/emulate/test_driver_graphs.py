"""CUDA graphs on the emulated driver: graphs built node by node (cuGraphAdd*Node, as CUDA programs and libraries
build them) and copies captured from a stream replay their work at each launch, as a GPU runs it, and nothing runs
while the graph is built; on both backends a captured collective runs again at each launch."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stepcast.emulate.driver.child import run_python
from stepcast.emulate.trace import read_trace
from stepcast.profiling.paths import REPO_ROOT

# A driver-API program (ctypes, no torch): a kernel node, a fill node (32 bytes of 7), a copy node (the filled
# device bytes to a host buffer) and a kernel node through the generic cuGraphAddNode, launched twice.
NODE_BY_NODE = r"""
import ctypes as C
cu = C.CDLL("libcuda.so.1")
def ok(rc):
    assert rc == 0, rc
class KernelParams(C.Structure):
    _fields_ = [("func", C.c_void_p), *((d, C.c_uint) for d in ("gx", "gy", "gz", "bx", "by", "bz", "smem")),
                ("params", C.c_void_p), ("extra", C.c_void_p), ("kern", C.c_void_p), ("ctx", C.c_void_p)]
class MemsetParams(C.Structure):
    _fields_ = [("dst", C.c_uint64), ("pitch", C.c_size_t), ("value", C.c_uint), ("elementSize", C.c_uint),
                ("width", C.c_size_t), ("height", C.c_size_t)]
def side(prefix):
    return [(prefix + "XInBytes", C.c_size_t), (prefix + "Y", C.c_size_t), (prefix + "Z", C.c_size_t),
            (prefix + "LOD", C.c_size_t), (prefix + "MemoryType", C.c_int), (prefix + "Host", C.c_void_p),
            (prefix + "Device", C.c_uint64), (prefix + "Array", C.c_void_p), (prefix + "Reserved", C.c_void_p),
            (prefix + "Pitch", C.c_size_t), (prefix + "Height", C.c_size_t)]
class Memcpy3D(C.Structure):
    _fields_ = [*side("src"), *side("dst"), ("WidthInBytes", C.c_size_t), ("Height", C.c_size_t),
                ("Depth", C.c_size_t)]
ok(cu.cuInit(0))
ctx = C.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), 0))
ok(cu.cuCtxSetCurrent(ctx))
module, func = C.c_void_p(), C.c_void_p()
ok(cu.cuModuleLoadData(C.byref(module), b"image"))
ok(cu.cuModuleGetFunction(C.byref(func), module, b"scale_kernel"))
dev = C.c_uint64()
ok(cu.cuMemAlloc_v2(C.byref(dev), 32))
host = (C.c_ubyte * 32)()
graph, node = C.c_void_p(), C.c_void_p()
ok(cu.cuGraphCreate(C.byref(graph), 0))
# what a launcher says (Inductor's, through the capture layer)
cu.stepcast_kernel_bytes(C.c_ulonglong(100), C.c_ulonglong(200))
ok(cu.cuGraphAddKernelNode_v2(C.byref(node), graph, None, 0, C.byref(KernelParams(func, 4, 2, 1, 128, 1, 1, 0))))
cu.stepcast_kernel_bytes(C.c_ulonglong(0), C.c_ulonglong(0))
ok(cu.cuGraphAddMemsetNode(C.byref(node), graph, None, 0, C.byref(MemsetParams(dev.value, 0, 7, 1, 32, 1)), ctx))
copy = Memcpy3D(srcMemoryType=2, srcDevice=dev.value, dstMemoryType=1, dstHost=C.addressof(host), WidthInBytes=32,
                Height=1, Depth=1)
ok(cu.cuGraphAddMemcpyNode(C.byref(node), graph, None, 0, C.byref(copy), ctx))
class Generic(C.Structure):  # CUgraphNodeParams: the runtime's cudaGraphAddNode comes through cuGraphAddNode
    _fields_ = [("type", C.c_int), ("reserved0", C.c_int * 3), ("kernel", KernelParams),
                ("pad", C.c_char * (29 * 8 - C.sizeof(KernelParams))), ("reserved2", C.c_longlong)]
generic = C.c_void_p()
ok(cu.cuModuleGetFunction(C.byref(generic), module, b"generic_kernel"))
ok(cu.cuGraphAddNode_v2(C.byref(node), graph, None, None, 0,
                        C.byref(Generic(0, kernel=KernelParams(generic, 1, 1, 1, 32, 1, 1, 0)))))
count = C.c_size_t()
ok(cu.cuGraphGetNodes(graph, None, C.byref(count)))
execg, stream = C.c_void_p(), C.c_void_p()
ok(cu.cuGraphInstantiateWithFlags(C.byref(execg), graph, 0))
ok(cu.cuStreamCreate(C.byref(stream), 0))
print("nodes", count.value, "before", sum(host))
ok(cu.cuGraphLaunch(execg, stream))
ok(cu.cuGraphLaunch(execg, stream))
ok(cu.cuStreamSynchronize(stream))
print("after", sum(host))
"""


@pytest.mark.slow
def test_a_graph_built_node_by_node_replays_its_kernel_fill_and_copy_at_each_launch():
    run = run_python(["-c", NODE_BY_NODE], "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "nodes 4 before 0" in run.stdout  # adding nodes runs nothing
    assert "after 224" in run.stdout  # the launch filled 32 bytes with 7 and copied them back: 32 * 7
    (events,) = run.events.values()
    work = [e for e in events if e.get("event") in ("launch", "memset", "memcpy")]
    assert [(e["event"], e["graph"], e["node"]) for e in work] == [
        ("launch", 1, 0), ("memset", 1, 1), ("memcpy", 1, 2), ("launch", 1, 3),
        ("launch", 2, 0), ("memset", 2, 1), ("memcpy", 2, 2), ("launch", 2, 3)]
    kernel = work[0]
    assert (kernel["name"], kernel["grid"], kernel["block"], kernel["via"]) == (
        "scale_kernel", [4, 2, 1], [128, 1, 1], "cuGraphLaunch")
    assert work[1]["bytes"] == 32 and work[2]["direction"] == "d2h"
    assert work[3]["name"] == "generic_kernel" and work[3]["block"] == [32, 1, 1]
    assert (work[4]["rd"], work[4]["wr"]) == (100, 200) and "rd" not in work[3]  # kept from the node's creation


CAPTURED_COPY = r"""
import torch
a = torch.randn(1024, device="cuda")
b = torch.empty_like(a)
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    b.copy_(a)  # warm-up outside the capture
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    b.copy_(a)
    b.mul_(2)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
"""


@pytest.mark.slow
def test_a_copy_captured_from_a_stream_is_logged_at_each_replay_not_at_capture():
    run = run_python(["-c", CAPTURED_COPY], "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    events = [e for per in run.events.values() for e in per]
    d2d = [e for e in events if e.get("event") == "memcpy" and e["direction"] == "d2d"]
    assert len(d2d) == 4  # the warm-up, then once per replay
    assert "graph" not in d2d[0] and [e["graph"] for e in d2d[1:]] == [1, 2, 3]
    replayed = [e for e in events if e.get("graph") == 1 and e.get("event") in ("memcpy", "launch")]
    assert [e["event"] for e in replayed] == ["memcpy", "launch"]  # in capture order: the copy, then the mul


CAPTURED_ALL_REDUCE = r"""
import os
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1 << 16, device="cuda")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    dist.all_reduce(x)  # warm-up outside the capture
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    dist.all_reduce(x)
    x.mul_(0.5)
for _ in range(3):
    g.replay()
dist.all_reduce(x)
torch.cuda.synchronize()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_collective_captured_in_a_graph_runs_again_at_each_replay_and_pairs_across_ranks(tmp_path):
    # each replay is a new run of NCCL's kernel: a fresh sequence number of its communicator (replays that repeated
    # the captured number made the simulator reject the run: 'duplicate comm_seq'), the same on every rank
    script = tmp_path / "graph_all_reduce.py"
    script.write_text(CAPTURED_ALL_REDUCE)
    cmd = [sys.executable, "-m", "stepcast.emulate", "run", "--nproc", "2", "--no-dedup",
           "--report", str(tmp_path / "r.json"), "--trace-dir", str(tmp_path / "traces"), "--", str(script)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    traces = [read_trace(path) for path in doc["traces"]]
    calls = [[(e["comm_seq"], e["op"], e.get("graph_launch")) for e in t["events"]
              if e["kind"] == "collective" and e["bytes"] == 4 << 16] for t in traces]
    assert calls[0] == calls[1]
    seqs = [seq for seq, _, _ in calls[0]]
    assert len(seqs) == len(set(seqs)) == 5  # warm-up, three replays, the eager one after
    assert [bool(graph) for _, _, graph in calls[0]] == [False, True, True, True, False]
