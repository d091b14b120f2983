"""Kernels built for an older SM generation than the GPU they run on: how much longer their matrix products take.

A kernel's tensor-core instructions are those of the generation it was written for. FlashAttention-2 (the kernels
behind PyTorch's SDPA flash backend: ``pytorch_flash::flash_fwd_kernel``, ``flash_bwd_dq_dk_dv_loop_*``) issues
Ampere's warp-level ``mma.sync``; on Hopper the full tensor-core rate is reachable only through ``wgmma`` and on
Blackwell only through ``tcgen05``, so such a kernel computes at most at its generation's rate per SM and clock.
The attention estimators learn each GPU from the kernels measured on it, which are that GPU's own generation
(FlashAttention-3 on Hopper, FlashInfer on Blackwell, FlashAttention-2 on Ampere: the ``backend`` of the rows), so
a legacy kernel's prediction is a native kernel's time.

The model: a legacy kernel reaches the same fraction of its instructions' peak as the native kernel reaches of the
native peak, on the compute-bound share of its time (its memory traffic is the same either way)::

    time = predicted x (1 + (r - 1) x c),   r = rate(target) / rate(kernel generation),
    c = (FLOPs / peak) / (FLOPs / peak + bytes / bandwidth)      (the roofline's compute share)

with ``rate`` the dense tensor FLOPs per SM and clock of a generation, from the hardware catalog (the largest over
its devices of that compute capability; H100 over A100: 1.85). The published figures agree: FlashAttention-2 reaches
50-73 % of an A100's peak (its paper) and 35 % of an H100's (FlashAttention-3's paper), where FlashAttention-3
reaches 60-75 % of the H100's: 0.65 / 1.85 = 35 %. A kernel of the target's own generation, or of a generation the
catalog does not hold, is unchanged.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from stepcast.profiling.hardware import HardwareSpec, load_catalog

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


def time_factor(flops: np.ndarray, moved: np.ndarray, kernel_cc: tuple[int, int] | None, target: HardwareSpec,
                dtype: str) -> np.ndarray:
    """Per row, the factor a kernel of generation ``kernel_cc`` takes over a native one's predicted time on
    ``target`` (module docstring); ones where it is native."""
    flops, moved = np.asarray(flops, dtype=np.float64), np.asarray(moved, dtype=np.float64)
    ones = np.ones_like(flops)
    if kernel_cc is None or target.compute_capability is None or tuple(target.compute_capability) <= kernel_cc:
        return ones
    own = target.peak_flops(dtype) / (target.sm_count * target.max_clock_mhz * 1e6)
    legacy = tensor_rate(kernel_cc, dtype)
    if legacy is None or legacy <= 0 or own <= legacy:
        return ones
    compute = flops / target.peak_flops(dtype)
    memory = moved / (target.memory_bandwidth_gbps * 1e9)
    share = np.divide(compute, compute + memory, out=np.zeros_like(compute), where=(compute + memory) > 0)
    return 1.0 + (own / legacy - 1.0) * share
