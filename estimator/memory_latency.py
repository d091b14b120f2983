"""Memory-bound kernels launched with too few threads to cover the DRAM latency: Little's law.

The estimators learn memory-bound kernels (elementwise, norm) from launches that fill the GPU, where the
bytes move at a share of the memory bandwidth. A launch of few threads cannot: a thread that streams through memory
keeps about one vector access (16 bytes, ``ld.global.v4``) in flight, each waiting a DRAM round trip, so the whole
kernel moves at most::

    resident threads x 16 B / latency,     resident threads = min(grid x block, SMs x threads an SM holds)

and its time is at least ``bytes x latency / (resident threads x 16 B)``. aten's layer norm over a few long rows
(one block of 128 threads a row: 16 rows of 4 Mi elements are 2,048 threads) moves 0.5 GB at about 55 GB/s by this
bound, 9.8 ms on any GPU, where the bandwidth alone says 0.1-1.7 ms; KernelBench times it at 6-15 ms on six GPUs from
a T4 to a B200. A launch that fills the GPU holds enough threads on every GPU of the catalog (a B200's 8 TB/s needs
4.8 MB in flight: 148 SMs x 2,048 threads x 16 B), so the bound leaves it as predicted.

What a thread keeps in flight is the kernel's own code, and the row's bytes must be the kernel's own (an op's row
given to the first of its kernels covers the others'), so the bound applies to the kernels listed in
:data:`KERNELS`, PyTorch's own reductions over long rows: one 16-byte access a thread (a loop that loads, then reduces
or normalises what it loaded), or where the template unrolls independent loads, as many (``reduce_kernel`` over a
non-contiguous dimension loads ``vt0`` vectors of outputs before it reduces any). Other kernels are left as predicted:
Inductor's Triton kernels load a whole tile at once, elementwise kernels fill the GPU, and a library's code is not
known. It bounds a kernel only when its bytes overflow the target's L2: a smaller tensor, just written by the kernel
before, is read at the L2's latency, a few microseconds in all.

The latency is one figure for every GPU: pointer-chasing benchmarks put NVIDIA's DRAM round trip at 450-700 ns from
Volta to Blackwell, GDDR and HBM alike (Chips and Cheese's GPU memory latency series; Jia et al.'s dissections of
Volta and Turing); 600 ns, the middle of that range.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from stepcast.profiling.hardware import HardwareSpec

VECTOR_BYTES = 16            # one thread's access in flight: a 128-bit vector load
DRAM_LATENCY_S = 600e-9      # the DRAM round trip (module docstring)
#: the families of the rows :data:`KERNELS` are given (their bytes: :mod:`estimator.workload`)
MEMORY_FAMILIES = frozenset({"elementwise", "norm"})
#: PyTorch kernels that stream rows whose row of the estimators is their own bytes -> 16-byte accesses a thread keeps
#: in flight, an int or the name's match group holding it (module docstring): ``reduce_kernel<threads,
#: output_vec_size, ReduceOp<..., vt0, input_vec_size>>`` with output_vec_size > 1 reduces a non-contiguous dimension,
#: ``vt0`` unrolled loads of output vectors (ATen's Reduce.cuh); with 1, one input vector a loop iteration
KERNELS: tuple[tuple[re.Pattern[str], int | str], ...] = (
    (re.compile(r"at::native::reduce_kernel<\d+, (?:[2-9]|\d\d+), at::native::ReduceOp<.*?, (?P<vt0>\d+), \d+> >"),
     "vt0"),
    (re.compile(r"at::native::reduce_kernel<"), 1),
    (re.compile(r"at::native::.*\bvectorized_layer_norm_kernel<"), 1),
    (re.compile(r"at::native::.*\bRowwiseMomentsCUDAKernel<"), 1),
    (re.compile(r"at::native::batch_norm_collect_statistics\w*kernel<"), 1),
)


@lru_cache(maxsize=4096)
def accesses_in_flight(name: str | None) -> int:
    """16-byte accesses a thread of kernel ``name`` keeps in flight; 0 for a kernel :data:`KERNELS` does not list
    (no bound)."""
    for pattern, accesses in KERNELS:
        match = pattern.search(name or "")
        if match:
            return max(int(match[accesses]), 1) if isinstance(accesses, str) else accesses
    return 0


def resident_threads(threads: np.ndarray, target: HardwareSpec) -> np.ndarray:
    """Threads of a launch that can be on the GPU at once: all of them, or as many as its SMs hold."""
    return np.minimum(np.asarray(threads, dtype=np.float64), float(target.sm_count * target.max_threads_per_sm))


def latency_bound_us(moved: np.ndarray, threads: np.ndarray, accesses: np.ndarray,
                     target: HardwareSpec) -> np.ndarray:
    """Per kernel, the least time (us) to move ``moved`` bytes with a launch of ``threads`` threads, each keeping
    ``accesses`` 16-byte accesses in flight, on ``target`` (module docstring); 0 where either is 0 (not known) and
    where the bytes fit in the target's L2."""
    moved = np.asarray(moved, dtype=np.float64)
    in_flight = resident_threads(threads, target) * np.asarray(accesses, dtype=np.float64) * VECTOR_BYTES
    seconds = np.divide(moved * DRAM_LATENCY_S, in_flight, out=np.zeros_like(in_flight),
                        where=(in_flight > 0) & (moved > target.l2_cache_mib * 2**20))
    return seconds * 1e6
