"""What every family module provides to the runner, and the helpers they share (dtypes, fp32 precision)."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterable, Mapping

import torch

from stepcast.profiling.model_catalog import ModelConfig

TORCH_DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
    "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
    "int8": torch.int8, "int64": torch.int64, "bool": torch.bool,
}
FLOAT_DTYPES = frozenset({"fp64", "fp32", "tf32", "fp16", "bf16"})
FP8_DTYPES = frozenset({"fp8_e4m3", "fp8_e5m2"})


class FamilyBench:
    """One kernel family. Subclasses set ``family`` and implement the hooks below."""

    family: str = ""

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """Key columns that ``model`` produces with tensor parallelism ``tp`` on ``tokens`` tokens per rank."""
        return ()

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        """Fill derived columns and return the point, or None when the combination is meaningless (dropped)."""
        return values

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        """(FLOPs, bytes moved) of one call: sweeps use it to keep points under ``limits``."""
        raise NotImplementedError

    def context(self, values: Mapping[str, Any], device: str) -> ContextManager:
        """Settings active while the point is built and timed (fp32 precision, attention backend)."""
        return fp32_precision(values["dtype"], device)

    def build(self, values: Mapping[str, Any], device: str) -> Callable[[], Any]:
        """Allocate the inputs and return a closure that runs the op once."""
        raise NotImplementedError


@contextlib.contextmanager
def fp32_precision(dtype: str, device: str):
    """On GPU, ``fp32`` means IEEE fp32 (TF32 off) and ``tf32`` lets matmuls and convolutions use TF32.
    A CPU has no TF32 mode: a tf32 point there fails (and is recorded so) rather than measuring fp32 under its name."""
    if dtype == "tf32" and device != "cuda":
        raise ValueError("tf32 is a CUDA math mode; this device has none")
    if device != "cuda" or dtype not in ("fp32", "tf32"):
        yield
        return
    mode = "tf32" if dtype == "tf32" else "ieee"
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.fp32_precision, cudnn.fp32_precision)
    matmul.fp32_precision, cudnn.fp32_precision = mode, mode
    try:
        yield
    finally:
        matmul.fp32_precision, cudnn.fp32_precision = saved


def tensor(shape: tuple[int, ...] | list[int], dtype: str, device: str, requires_grad: bool = False) -> torch.Tensor:
    """Random data of a family dtype (fp8 is drawn in bf16 and cast; integers and bools uniformly)."""
    torch_dtype = TORCH_DTYPES[dtype]
    if dtype in FP8_DTYPES:
        return torch.randn(shape, device=device, dtype=torch.bfloat16).to(torch_dtype)
    if dtype == "bool":
        return torch.rand(shape, device=device) > 0.5
    if dtype in ("int8", "int64"):
        return torch.randint(-100, 100, shape, device=device, dtype=torch_dtype)
    return torch.randn(shape, device=device, dtype=torch_dtype, requires_grad=requires_grad)


def divisible(a: int, b: int) -> bool:
    return b > 0 and a % b == 0


def describe_failure(exc: BaseException) -> str:
    """The one line a failed point records: exception type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
