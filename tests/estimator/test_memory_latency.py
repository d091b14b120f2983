"""estimator.memory_latency: a PyTorch reduction launched with too few threads to cover the DRAM latency moves its
bytes no faster than its threads' accesses in flight allow (Little's law)."""
from __future__ import annotations

import numpy as np
import pytest

from stepcast.estimator.memory_latency import (
    DRAM_LATENCY_S,
    VECTOR_BYTES,
    accesses_in_flight,
    latency_bound_us,
)
from stepcast.profiling.hardware import lookup

LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, "
              "float const*, float const*, float const*, float*, float*, float*)")
REDUCE_STRIDED = ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::MaxOps<float>, "
                  "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, "
                  "float, 4, 4>)")
REDUCE_CONTIGUOUS = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
                     "float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
                     "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)")


def test_known_reductions_keep_one_access_a_thread_in_flight_or_their_unrolled_loads():
    assert accesses_in_flight(LAYER_NORM) == 1
    assert accesses_in_flight(REDUCE_CONTIGUOUS) == 1
    assert accesses_in_flight(REDUCE_STRIDED) == 4     # vt0 unrolled loads of 4-output vectors
    assert accesses_in_flight("void at::native::batch_norm_collect_statistics_kernel<at::native::Var, float>()") == 1
    # code the bound does not know, or whose row is not its own bytes: no bound
    for other in ("triton_red_fused_native_layer_norm_0", "nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT",
                  "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
                  "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float>()", "", None):
        assert accesses_in_flight(other) == 0


def test_a_layer_norm_over_sixteen_long_rows_takes_the_same_latency_bound_time_on_every_gpu():
    moved = np.array([16 * 4 * 2**20 * 4 * 2.0])       # 16 rows of 4 Mi fp32 elements, read and written
    threads = np.array([16 * 128.0])                    # one block of 128 threads a row
    expected_us = moved[0] * DRAM_LATENCY_S / (threads[0] * VECTOR_BYTES) * 1e6
    for gpu in ("t4", "a10g", "h100-sxm", "b200"):
        hw = lookup(gpu)
        bound = latency_bound_us(moved, threads, np.array([1.0]), hw)[0]
        assert bound == pytest.approx(expected_us)
        assert bound > 3 * moved[0] / hw.memory_bandwidth * 1e6    # far above what the bandwidth allows


def test_a_launch_that_fills_the_gpu_is_bounded_below_its_bandwidth_time():
    for gpu in ("t4", "h100-sxm", "b200"):
        hw = lookup(gpu)
        moved = np.array([1e9])
        full = np.array([float(hw.sm_count * hw.max_threads_per_sm * 4)])   # more threads than the SMs hold
        bound = latency_bound_us(moved, full, np.array([1.0]), hw)[0]
        assert 0 < bound <= 1.01 * moved[0] / hw.memory_bandwidth * 1e6


def test_unknown_launches_and_tensors_the_l2_holds_are_not_bounded():
    hw = lookup("h100-sxm")
    l2 = hw.l2_cache_mib * 2**20
    got = latency_bound_us(np.array([1e9, 1e9, 0.9 * l2]), np.array([0.0, 128.0, 128.0]), np.array([1.0, 0.0, 1.0]),
                           hw)
    assert got.tolist() == [0.0, 0.0, 0.0]
