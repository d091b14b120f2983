"""Kernel families and the columns that describe one kernel of each.

This is the one contract shared by the profiler's datasets, the estimators (``stepcast predict``) and the
emulator's captured traces: a kernel is a row with ``family``, ``hardware``, ``dtype`` and its family's key columns.
"""
from __future__ import annotations

from stepcast.errors import InputError

FAMILIES: dict[str, tuple[str, ...]] = {
    # batch = 1 for a plain matmul; C[m, n] = A[m, k] @ B[k, n] per batch entry.
    "gemm": ("m", "n", "k", "batch"),
    # pass: fwd | bwd. causal: bool.
    "attention": ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "pass"),
    # op: add, mul, gelu, silu, relu, copy, cast, dropout, ... numel: elements of the output.
    "elementwise": ("op", "numel"),
    # op: layer_norm, rms_norm, softmax, log_softmax, cross_entropy, sum, mean. pass: fwd | bwd.
    "norm": ("op", "rows", "cols", "pass"),
    # op: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv. bytes per rank (nccl-tests 'size').
    "collective": ("op", "bytes", "ranks", "ranks_per_node"),
    # op: adamw_foreach, adamw_fused, sgd_foreach, sgd_fused. params: parameter elements updated by the step.
    "optimizer": ("op", "params"),
}

COMMON_COLUMNS: tuple[str, ...] = ("family", "hardware", "dtype")

# fp32 means IEEE fp32 with TF32 off; tf32 means fp32 tensors with TF32 tensor-core math allowed.
DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int64", "bool")

STRING_COLUMNS = frozenset({"family", "hardware", "dtype", "op", "pass"})
BOOL_COLUMNS = frozenset({"causal"})


def key_columns(family: str) -> tuple[str, ...]:
    """All columns that identify one kernel of ``family`` (common columns first)."""
    if family not in FAMILIES:
        raise InputError(f"unknown family '{family}': expected one of {', '.join(FAMILIES)}")
    return COMMON_COLUMNS + FAMILIES[family]


def dtype_bytes(dtype: str) -> int:
    return {"fp64": 8, "int64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1, "bool": 1}.get(
        dtype, 1 if dtype.startswith("fp8") else 4
    )
