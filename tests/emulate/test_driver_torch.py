"""torch's real CUDA stack on the emulated driver beyond GEMMs: cuDNN convolutions, SDPA, autograd's backward
thread, and torch.compile (Triton kernels built by ptxas on the host, launched through the driver)."""
from __future__ import annotations

import pytest

from stepcast.emulate.driver.child import run_python

LAYERS = r"""
import torch, torch.nn.functional as F
x = torch.randn(16, 64, 56, 56, device="cuda", requires_grad=True)
w = torch.randn(64, 64, 3, 3, device="cuda", requires_grad=True)
F.conv2d(x, w, padding=1).sum().backward()
F.conv2d(x.detach().bfloat16(), w.detach().bfloat16(), padding=1)
lin = torch.nn.Linear(768, 3072, device="cuda", dtype=torch.bfloat16)
lin(torch.randn(788, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)).sum().backward()
q = torch.randn(4, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
print(x.grad.shape, w.grad.shape, q.grad.shape, float(x.grad.sum().item()))
# Exiting the instant a convolution's backward returns races torch's autograd worker thread: after waking the
# caller it drops the GraphTask, whose ThreadLocalState holds a Python object, and its decref needs the GIL while
# the interpreter finalises (gil_scoped_acquire -> pthread_exit -> "terminate called without an active
# exception"). A torch race, not the driver's (the backtrace has no driver frame); 10 ms of slack avoids it.
import time; time.sleep(0.05)
"""

COMPILED = r"""
import torch
f = torch.compile(lambda x, y: (torch.relu(x) * y).sum(dim=-1))
print(f(torch.randn(64, 512, device="cuda"), torch.randn(64, 512, device="cuda")).shape)
"""


RUNTIME = r"""
import torch, torch.nn.functional as F
a = torch.randn(256, 256, device="cuda")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    a @ a  # warm-up outside the capture, as torch.cuda.graphs asks
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    b = a @ a + 1
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
torch.backends.cudnn.benchmark = True
F.conv2d(torch.randn(8, 32, 28, 28, device="cuda"), torch.randn(32, 32, 3, 3, device="cuda"), padding=1)
big = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
print("reserved", torch.cuda.memory_reserved(), "free", free, "total", total)
"""


@pytest.mark.slow
def test_graph_replays_cudnn_benchmark_and_expandable_segments_work():
    run = run_python(["-c", RUNTIME], "h100-sxm", extra_env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert run.returncode == 0, run.stderr[-2000:]
    launches = [e for per in run.events.values() for e in per if e.get("event") == "launch"]
    replayed = [e["name"] for e in launches if e["via"] == "cuGraphLaunch"]
    one = replayed[: len(replayed) // 3]
    assert replayed == one * 3  # the captured kernels, once per replay
    assert "gemm" in one[0] and "add" in one[-1]  # a @ a, then + 1
    direct = [e["name"] for e in launches if e["via"] != "cuGraphLaunch" and e["name"] == one[0]]
    assert len(direct) == one.count(one[0])  # the warm-up only: captured launches are not run at capture
    assert any("fprop" in e["name"] for e in launches)  # cudnn.benchmark chose and ran a convolution
    words = run.stdout.split()
    reserved, free, total = int(words[1]), int(words[3]), int(words[5])
    assert reserved >= 3 << 30 and total - free >= 3 << 30  # expandable segments map device memory


@pytest.mark.slow
def test_cudnn_convolutions_linear_backward_and_sdpa_run_their_real_kernels():
    run = run_python(["-c", LAYERS], "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    names = run.launched()
    assert any(n.startswith("sm80_xmma_fprop_implicit_gemm_tf32f32") for n in names)  # fp32 conv (TF32 off: sm80)
    assert any(n.startswith("sm90_xmma_fprop_implicit_gemm_bf16bf16") for n in names)  # bf16 conv, Hopper kernel
    assert any("dgrad" in n for n in names) and any("wgrad" in n for n in names)  # conv backward
    assert any(n.startswith("nvjet_sm90") and "_bias_" in n for n in names)  # Linear forward with its bias epilogue
    assert any("sdpa" in n and "fprop" in n for n in names) and any("sdpa" in n and "bprop" in n for n in names)
    assert "torch.Size([16, 64, 56, 56])" in run.stdout


@pytest.mark.slow
def test_torch_compile_launches_its_triton_kernel():
    # compiled in-process: Inductor's pool of compile workers (which load the driver too, each logging under its own
    # pid) costs ~30 s of start-up on a 2-core machine
    run = run_python(["-c", COMPILED], "h100-sxm", extra_env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("torch.Size([64])")
    assert any(n.startswith("triton_") and "fused" in n for n in run.launched())


TWO_DEVICES = r"""
import torch
a = torch.randn(512, 512, device="cuda:1", dtype=torch.bfloat16)
a @ a
print(torch.cuda.device_count(), torch.randn(4, device="cuda:0").to("cuda:1").device)
"""


@pytest.mark.slow
def test_launches_name_the_device_they_ran_on():
    run = run_python(["-c", TWO_DEVICES], "a100-sxm-80gb", extra_env={"STEPCAST_DEVICE_COUNT": "2"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["2", "cuda:1"]
    launches = [e for per in run.events.values() for e in per if e.get("event") == "launch"]
    gemm = [e for e in launches if "gemm" in e["name"]]
    assert gemm and all(e["device"] == 1 for e in gemm)
    assert {e["device"] for e in launches} == {0, 1}


@pytest.mark.slow
def test_real_gpu_capture_and_compare_round_trip(tmp_path):
    """The capture tool meant for a lent GPU, run on the emulated driver, reads back the catalog's attributes; the
    comparer then finds no attribute difference against the same device and some against another."""
    import json

    from stepcast.emulate.driver.real_gpu import compare

    out = tmp_path / "capture.json"
    run = run_python(["-m", "stepcast.emulate.driver.real_gpu", "capture", "--no-kernels", "--out", str(out)], "l4")
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["name"] == "NVIDIA L4" and doc["attributes"]["MULTIPROCESSOR_COUNT"] == 58
    assert compare(doc, "l4")["attributes"] == {}
    assert "MULTIPROCESSOR_COUNT" in compare(doc, "h100-sxm")["attributes"]
