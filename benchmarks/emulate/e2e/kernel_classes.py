"""What a training step's predicted device time is made of, by the kind of kernel a timing model must know: the
torchtitan rows' attribution of their error (:mod:`benchmarks.emulate.e2e.torchtitan`).

The estimators' own families (``spec.family``) put every Inductor kernel in one bin (no spec: ``other``) and fp8
GEMMs with bf16 ones. These classes split them where the models differ:

- ``gemm fp8`` / ``gemm <dtype>``: cuBLAS(Lt) GEMMs by operand type (``gemm bf16``; ``_scaled_mm``, torchao's
  Float8 GEMM, is fp8 whatever its spec says);
- ``flex attention``: FlexAttention's Triton kernels (its forward and backward templates and block-mask kernels);
- ``triton gemm template``: Inductor's other ``triton_tem`` kernels (max-autotune's matmul templates);
- ``triton fused``: Inductor's pointwise / reduction / persistent-reduction kernels (``triton_poi/red/per``):
  compiled norms, activations, rotary embeddings, Float8's amax / cast / scale;
- ``nccl <op>``: collectives (all_gather, reduce_scatter, all_reduce, send, recv ...), their whole time, exposed
  or not;
- ``copy`` / ``memset``: memory operations (symmetric memory's peer copies in async TP are copies);
- otherwise the estimator's family (``attention`` for cuDNN / FlashAttention SDPA, ``elementwise``, ``norm``,
  ``optimizer``; ``other``: no spec).
"""
from __future__ import annotations

from typing import Any

from stepcast.emulate.emulation import OTHER

FP8_GEMM_OP = "_scaled_mm"


def kernel_class(event: dict[str, Any]) -> str:
    """The class of one device event of a captured trace (module docstring)."""
    kind = event["kind"]
    if kind == "collective":
        return f"nccl {event.get('op') or 'collective'}"
    if kind == "memcpy":
        return "copy"
    if kind == "memset":
        return "memset"
    name = event.get("name") or ""
    spec = event.get("spec") or {}
    if "flex_attention" in name:
        return "flex attention"
    if name.startswith("triton_tem"):
        return "triton gemm template"
    if name.startswith("triton_"):
        return "triton fused"
    if spec.get("family") == "gemm":
        dtype = str(spec.get("dtype") or "")
        return "gemm fp8" if dtype.startswith("fp8") or FP8_GEMM_OP in str(event.get("op") or "") \
            else f"gemm {dtype or 'unknown'}"
    return spec.get("family") or OTHER
