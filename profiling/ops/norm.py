"""Normalisations and reductions over the last dim of a [rows, cols] tensor, forward or backward.

``cross_entropy`` treats the tensor as logits (rows tokens, cols classes); ``sum``/``mean`` reduce each row.
The backward point times ``autograd.grad`` of one forward's output with respect to the input (and the norm weights).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch
import torch.nn.functional as F

from stepcast.profiling.families import dtype_bytes
from stepcast.profiling.model_catalog import ModelConfig
from stepcast.profiling.ops.base import FLOAT_DTYPES, FamilyBench, divisible, tensor


class NormBench(FamilyBench):
    family = "norm"

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """The block's norm over hidden, and the loss over the (vocab-parallel) logits."""
        yield {"op": model.norm, "rows": tokens, "cols": model.hidden}
        if divisible(model.vocab, tp):
            yield {"op": "cross_entropy", "rows": tokens, "cols": model.vocab // tp}

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        return values if values["dtype"] in FLOAT_DTYPES else None

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        elems = values["rows"] * values["cols"]
        size = 2.0 * elems * dtype_bytes(values["dtype"])
        return (5.0 * elems, size) if values["pass"] == "fwd" else (10.0 * elems, 1.5 * size)

    def build(self, values: Mapping[str, Any], device: str) -> Callable[[], Any]:
        rows, cols, op, dtype = values["rows"], values["cols"], values["op"], values["dtype"]
        backward = values["pass"] == "bwd"
        x = tensor((rows, cols), dtype, device, requires_grad=backward)
        inputs: list[torch.Tensor] = [x]
        if op == "layer_norm":
            weight, bias = (tensor((cols,), dtype, device, requires_grad=backward) for _ in range(2))
            inputs += [weight, bias]
            forward = lambda: F.layer_norm(x, (cols,), weight, bias)  # noqa: E731
        elif op == "rms_norm":
            weight = tensor((cols,), dtype, device, requires_grad=backward)
            inputs.append(weight)
            forward = lambda: F.rms_norm(x, (cols,), weight)  # noqa: E731
        elif op == "softmax":
            forward = lambda: torch.softmax(x, dim=-1)  # noqa: E731
        elif op == "log_softmax":
            forward = lambda: torch.log_softmax(x, dim=-1)  # noqa: E731
        elif op == "cross_entropy":
            target = torch.randint(0, cols, (rows,), device=device)
            forward = lambda: F.cross_entropy(x, target)  # noqa: E731
        elif op == "sum":
            forward = lambda: x.sum(dim=-1)  # noqa: E731
        elif op == "mean":
            forward = lambda: x.mean(dim=-1)  # noqa: E731
        else:
            raise ValueError(f"unknown norm op '{op}'")
        if not backward:
            return forward
        out = forward()
        grad = torch.ones_like(out)
        return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)
