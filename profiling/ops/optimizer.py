"""Optimizer steps: AdamW and SGD (momentum 0.9), ``foreach`` or ``fused``, over ``params`` parameter elements.

The parameters are split into tensors of at most 2**22 elements (at least one), like the layers of a model.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import torch

from stepcast.profiling.families import dtype_bytes
from stepcast.profiling.model_catalog import ModelConfig
from stepcast.profiling.ops.base import FLOAT_DTYPES, FamilyBench, tensor

MAX_TENSOR_ELEMENTS = 2**22


def split_params(params: int) -> list[int]:
    """Tensor sizes that add up to ``params``, each at most MAX_TENSOR_ELEMENTS."""
    count = max(1, math.ceil(params / MAX_TENSOR_ELEMENTS))
    base, extra = divmod(params, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


class OptimizerBench(FamilyBench):
    family = "optimizer"

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """The weights of one transformer block on one tensor-parallel rank (``tokens`` plays no part)."""
        yield {"params": model.layer_params // tp}

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        return values if values["dtype"] in FLOAT_DTYPES else None

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        states = 4 if values["op"].startswith("adamw") else 3  # param, grad, exp_avg(, exp_avg_sq) / momentum
        n = values["params"]
        return 10.0 * n, float(n * (states + 1) * dtype_bytes(values["dtype"]))

    def build(self, values: Mapping[str, Any], device: str) -> Callable[[], Any]:
        op, dtype = values["op"], values["dtype"]
        params = [tensor((size,), dtype, device, requires_grad=True) for size in split_params(values["params"])]
        for p in params:
            p.grad = torch.randn_like(p)
        kind, impl = op.split("_")
        flags = {"foreach": impl == "foreach", "fused": impl == "fused"}
        if kind == "adamw":
            opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **flags)
        elif kind == "sgd":
            opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9, **flags)
        else:
            raise ValueError(f"unknown optimizer op '{op}'")
        return opt.step
