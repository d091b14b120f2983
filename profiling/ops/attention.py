"""Attention: ``scaled_dot_product_attention`` forward or backward, one backend forced per point.

Inputs are [batch, heads, seq, head_dim]; ``heads_kv < heads_q`` is grouped-query attention (``enable_gqa``).
The forward runs with inputs that require grad (as in training, so backends save what the backward needs);
the backward point times ``autograd.grad`` of one forward's output.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from stepcast.profiling.families import dtype_bytes
from stepcast.profiling.model_catalog import ModelConfig
from stepcast.profiling.ops.base import FLOAT_DTYPES, FamilyBench, divisible, fp32_precision, tensor

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


class AttentionBench(FamilyBench):
    family = "attention"

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """One sequence of ``tokens`` tokens through the model's attention on one tensor-parallel rank."""
        if not divisible(model.heads, tp):
            return
        yield {"batch": 1, "heads_q": model.heads // tp, "heads_kv": max(1, model.kv_heads // tp),
               "seq_q": tokens, "seq_kv": tokens, "head_dim": model.head_dim}

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        values.setdefault("seq_kv", values["seq_q"])
        values.setdefault("heads_kv", values["heads_q"])
        if values["dtype"] not in FLOAT_DTYPES or not divisible(values["heads_q"], values["heads_kv"]):
            return None
        return values

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        b, hq, hkv, sq, skv, d = (values[c] for c in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"))
        flops = 4.0 * b * hq * sq * skv * d * (0.5 if values["causal"] else 1.0)
        size = (2 * b * hq * sq * d + 2 * b * hkv * skv * d) * dtype_bytes(values["dtype"])
        return (flops, float(size)) if values["pass"] == "fwd" else (2.5 * flops, 2.0 * size)

    def context(self, values: Mapping[str, Any], device: str) -> ContextManager:
        stack = contextlib.ExitStack()
        stack.enter_context(fp32_precision(values["dtype"], device))
        stack.enter_context(sdpa_kernel(BACKENDS[values["backend"]]))
        return stack

    def build(self, values: Mapping[str, Any], device: str) -> Callable[[], Any]:
        b, hq, hkv, sq, skv, d = (values[c] for c in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"))
        dtype, causal = values["dtype"], values["causal"]
        q = tensor((b, hq, sq, d), dtype, device, requires_grad=True)
        k = tensor((b, hkv, skv, d), dtype, device, requires_grad=True)
        v = tensor((b, hkv, skv, d), dtype, device, requires_grad=True)
        gqa = hq != hkv

        def forward() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        if values["pass"] == "fwd":
            return forward
        out = forward()
        grad = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
