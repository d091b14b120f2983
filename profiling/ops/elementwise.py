"""Elementwise: unary and binary math, activations, copies, dtype casts, dropout and fills over ``numel`` elements.

``cast`` converts ``dtype`` to fp32 (fp32 to bf16): the casts mixed precision inserts. ``copy`` copies into a
preallocated tensor of the same dtype. Integer and bool dtypes run only add/mul/copy/cast/fill; fp8 only copy/cast.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch
import torch.nn.functional as F

from stepcast.profiling.families import dtype_bytes
from stepcast.profiling.model_catalog import ModelConfig
from stepcast.profiling.ops.base import FLOAT_DTYPES, FP8_DTYPES, FamilyBench, divisible, tensor

_BINARY = {"add": torch.add, "mul": torch.mul, "div": torch.div}
_UNARY = {"exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "gelu": F.gelu, "silu": F.silu,
          "relu": F.relu}
_INTEGER_OPS = frozenset({"add", "mul", "copy", "cast", "fill"})
_FP8_OPS = frozenset({"copy", "cast"})


def cast_target(dtype: str) -> torch.dtype:
    return torch.bfloat16 if dtype == "fp32" else torch.float32


class ElementwiseBench(FamilyBench):
    family = "elementwise"

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """Activations of one block: the residual stream (tokens x hidden) and the MLP inner tensor on a rank."""
        yield {"numel": tokens * model.hidden}
        if divisible(model.ffn, tp):
            yield {"numel": tokens * model.ffn // tp}

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        dtype, op = values["dtype"], values["op"]
        if dtype in FP8_DTYPES and op not in _FP8_OPS:
            return None
        if dtype not in FLOAT_DTYPES | FP8_DTYPES and op not in _INTEGER_OPS:
            return None
        return values

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        n, op = values["numel"], values["op"]
        tensors = 3 if op in _BINARY else (1 if op == "fill" else 2)
        return float(n), float(n * tensors * dtype_bytes(values["dtype"]))

    def build(self, values: Mapping[str, Any], device: str) -> Callable[[], Any]:
        n, op, dtype = values["numel"], values["op"], values["dtype"]
        x = tensor((n,), dtype, device)
        if op in _BINARY:
            y = tensor((n,), dtype, device)
            if op == "div" and dtype in FLOAT_DTYPES:
                y = y.abs() + 1
            fn = _BINARY[op]
            return lambda: fn(x, y)
        if op in _UNARY:
            fn = _UNARY[op]
            return lambda: fn(x)
        if op == "copy":
            out = torch.empty_like(x)
            return lambda: out.copy_(x)
        if op == "cast":
            target = cast_target(dtype)
            return lambda: x.to(target)
        if op == "dropout":
            return lambda: F.dropout(x, p=0.1, training=True)
        if op == "fill":
            return x.zero_
        raise ValueError(f"unknown elementwise op '{op}'")
