"""Kernels built for an older SM generation than the GPU they run on: the tensor-core time they add.

A kernel's tensor-core instructions are those of the generation it was written for. FlashAttention-2 (the kernels
behind PyTorch's SDPA flash backend: ``pytorch_flash::flash_fwd_kernel``, ``flash_bwd_dq_dk_dv_loop_*``) issues
Ampere's warp-level ``mma.sync``; on Hopper the full tensor-core rate is reachable only through ``wgmma`` and on
Blackwell only through ``tcgen05``, so such a kernel computes at most at its generation's rate per SM and clock
(FlashAttention-3's paper: FlashAttention-2 reaches 35 % of an H100's peak where it reaches 50-73 % of an A100's).
The attention estimators learn each GPU from the kernels measured on it, which are that GPU's own generation
(FlashAttention-3 / cuDNN on Hopper, FlashInfer on Blackwell, FlashAttention-2 on Ampere: the ``backend`` of the
rows), so a legacy kernel's prediction lacks the difference. It is added here as the extra tensor-core time of the
row's FLOPs::

    extra = FLOPs / peak(target) x (rate(target) / rate(kernel generation) - 1)

with ``rate`` the dense tensor FLOPs per SM and clock of a generation, from the hardware catalog (the largest over
its devices of that compute capability): the kernel's memory traffic, softmax and synchronisation are as the
estimator predicted them, its matrix products take the older rate. A kernel of the target's own generation, or of
a generation the catalog does not hold, adds nothing.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from profiling.hardware import HardwareSpec, load_catalog

#: kernel names of a known older build generation -> that compute capability (major, minor)
LEGACY_KERNELS: tuple[tuple[re.Pattern[str], tuple[int, int]], ...] = (
    # FlashAttention-2 (PyTorch's vendored copy and the flash-attn package): written for sm80's mma.sync
    (re.compile(r"(^|[\s:])(pytorch_flash::)?flash_(fwd|bwd)\w*_kernel|flash_bwd_dq_dk_dv_loop"), (8, 0)),
)


def kernel_generation(name: str | None) -> tuple[int, int] | None:
    """The compute capability a kernel was built for, when its name says it is a known legacy build; else None."""
    if not name:
        return None
    for pattern, cc in LEGACY_KERNELS:
        if pattern.search(name):
            return cc
    return None


@lru_cache(maxsize=None)
def tensor_rate(cc: tuple[int, int], dtype: str) -> float | None:
    """Dense tensor FLOPs per SM per clock of a generation (the catalog's largest over its devices), or None."""
    rates = [spec.peak_flops(dtype) / (spec.sm_count * spec.max_clock_mhz * 1e6)
             for spec in load_catalog().values()
             if spec.kind == "gpu" and spec.compute_capability is not None and tuple(spec.compute_capability) == cc]
    return max(rates) if rates else None


def extra_us(flops: np.ndarray, kernel_cc: tuple[int, int] | None, target: HardwareSpec, dtype: str) -> np.ndarray:
    """The tensor-core time (us) a kernel of generation ``kernel_cc`` adds over a native one on ``target`` (module
    docstring); zeros where it adds nothing."""
    flops = np.asarray(flops, dtype=np.float64)
    if kernel_cc is None or target.compute_capability is None or tuple(target.compute_capability) <= kernel_cc:
        return np.zeros_like(flops)
    own = target.peak_flops(dtype) / (target.sm_count * target.max_clock_mhz * 1e6)
    legacy = tensor_rate(kernel_cc, dtype)
    if legacy is None or legacy <= 0 or own <= legacy:
        return np.zeros_like(flops)
    return flops / target.peak_flops(dtype) * (own / legacy - 1.0) * 1e6
