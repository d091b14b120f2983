"""GEMM: ``torch.mm`` / ``addmm`` / ``bmm`` / ``matmul`` (cuBLAS / cuBLASLt on GPU), fp8 through ``torch._scaled_mm``.

C[m, n] = A[m, k] @ B[k, n] per batch entry. ``trans_a``: A is stored [k, m] and passed transposed; ``trans_b``: B is
stored [n, k] and passed transposed (``nn.Linear`` forward: y = x @ W.T is trans_b=True).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch

from stepcast.profiling.families import dtype_bytes
from stepcast.profiling.model_catalog import ModelConfig
from stepcast.profiling.ops.base import FP8_DTYPES, FamilyBench, divisible, tensor


def _operand(rows: int, cols: int, batch: int | None, transposed: bool, dtype: str, device: str) -> torch.Tensor:
    """A [.., rows, cols] operand, stored transposed when asked (a column-major view of the same shape)."""
    shape = (cols, rows) if transposed else (rows, cols)
    t = tensor((batch, *shape) if batch is not None else shape, dtype, device)
    return t.transpose(-1, -2) if transposed else t


class GemmBench(FamilyBench):
    family = "gemm"

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """Forward, input-gradient and weight-gradient GEMMs of every linear layer of a tensor-parallel block."""
        qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
        mlp_up = (2 if model.gated_mlp else 1) * model.ffn
        if not all(divisible(x, tp) for x in (qkv, model.hidden, mlp_up, model.ffn, model.vocab)):
            return
        linears = [  # (out, in) of each weight on one rank
            (qkv // tp, model.hidden), (model.hidden, model.hidden // tp),
            (mlp_up // tp, model.hidden), (model.hidden, model.ffn // tp), (model.vocab // tp, model.hidden),
        ]
        for out, inp in linears:
            yield {"op": "mm", "m": tokens, "n": out, "k": inp, "batch": 1, "trans_a": False, "trans_b": True}
            yield {"op": "mm", "m": tokens, "n": inp, "k": out, "batch": 1, "trans_a": False, "trans_b": False}
            yield {"op": "mm", "m": out, "n": inp, "k": tokens, "batch": 1, "trans_a": True, "trans_b": False}

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        values.setdefault("batch", 1)
        values.setdefault("trans_a", False)
        values.setdefault("trans_b", False)
        if values["op"] in ("mm", "addmm") and values["batch"] != 1:
            return None
        if values["dtype"] in FP8_DTYPES:
            # _scaled_mm: A row-major, B column-major, dims multiples of 16.
            if values["op"] != "mm" or values["trans_a"] or not values["trans_b"]:
                return None
            if not all(divisible(values[d], 16) for d in ("m", "n", "k")):
                return None
        return values

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        m, n, k, b = (values[d] for d in ("m", "n", "k", "batch"))
        return 2.0 * m * n * k * b, float((m * k + k * n + m * n) * b * dtype_bytes(values["dtype"]))

    def build(self, values: Mapping[str, Any], device: str) -> Callable[[], Any]:
        m, n, k, batch, op, dtype = (values[c] for c in ("m", "n", "k", "batch", "op", "dtype"))
        trans_a, trans_b = values["trans_a"], values["trans_b"]
        if dtype in FP8_DTYPES:
            a = _operand(m, k, None, False, dtype, device)
            b = _operand(k, n, None, True, "fp8_e4m3", device)  # e5m2 x e5m2 is not a cuBLASLt combination
            one = torch.ones((), device=device)
            return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        if op == "mm":
            a, b = _operand(m, k, None, trans_a, dtype, device), _operand(k, n, None, trans_b, dtype, device)
            return lambda: torch.mm(a, b)
        if op == "addmm":
            a, b = _operand(m, k, None, trans_a, dtype, device), _operand(k, n, None, trans_b, dtype, device)
            bias = tensor((n,), dtype, device)
            return lambda: torch.addmm(bias, a, b)
        if op == "bmm":
            a, b = _operand(m, k, batch, trans_a, dtype, device), _operand(k, n, batch, trans_b, dtype, device)
            return lambda: torch.bmm(a, b)
        # matmul: a batched activation times one weight, as nn.Linear does on a 3-D input.
        a = _operand(m, k, batch if batch > 1 else None, trans_a, dtype, device)
        b = _operand(k, n, None, trans_b, dtype, device)
        return lambda: torch.matmul(a, b)
