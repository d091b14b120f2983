"""torch's real CUDA stack on the emulated driver beyond GEMMs: cuDNN convolutions, SDPA, autograd's backward
thread, and torch.compile (Triton kernels built by ptxas on the host, launched through the driver)."""
from __future__ import annotations

import pytest

from emulate.driver.child import run_python

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
# Exiting the instant a cuDNN backward returns races autograd's worker thread, which still tidies up and needs the
# GIL while the interpreter finalises ("terminate called without an active exception"); 10 ms is enough.
import time; time.sleep(0.05)
"""

COMPILED = r"""
import torch
f = torch.compile(lambda x, y: (torch.relu(x) * y).sum(dim=-1))
print(f(torch.randn(64, 512, device="cuda"), torch.randn(64, 512, device="cuda")).shape)
"""


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
    run = run_python(["-c", COMPILED], "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("torch.Size([64])")
    assert any(n.startswith("triton_") and "fused" in n for n in run.launched())
