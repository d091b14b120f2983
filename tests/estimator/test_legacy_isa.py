"""estimator.legacy_isa: kernels built for an older SM generation compute at their generation's tensor rate."""
from __future__ import annotations

import numpy as np
import pytest

from stepcast.estimator.legacy_isa import kernel_generation, tensor_rate, time_factor
from stepcast.profiling.hardware import lookup

FA2_FWD = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
           "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
           "false, true, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)")


def test_flashattention2_kernels_are_ampere_builds_and_native_kernels_name_no_generation():
    assert kernel_generation(FA2_FWD) == (8, 0)
    assert kernel_generation("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<T>(P)") == (8, 0)
    for native in ("void flash::FlashAttnFwdSm90<T>(P)", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma",
                   "triton_tem_fused_flex_attention_0", "nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT", "", None):
        assert kernel_generation(native) is None


def test_hopper_computes_about_twice_amperes_tensor_flops_per_sm_and_clock():
    assert tensor_rate((9, 0), "bf16") / tensor_rate((8, 0), "bf16") == pytest.approx(1.85, abs=0.2)
    assert tensor_rate((1, 0), "bf16") is None                     # a generation the catalog lacks


def test_a_compute_bound_legacy_kernel_takes_the_rate_ratio_longer_and_a_memory_bound_one_about_the_same():
    h100 = lookup("h100-sxm")
    ratio = tensor_rate((9, 0), "bf16") / tensor_rate((8, 0), "bf16")
    flops = np.array([1e15, 1e6])         # long-sequence attention; a decode step's few FLOPs
    moved = np.array([1e9, 1e9])
    factor = time_factor(flops, moved, (8, 0), h100, "bf16")
    assert factor[0] == pytest.approx(ratio, rel=0.01)
    assert factor[1] == pytest.approx(1.0, abs=1e-3)
    assert (time_factor(flops, moved, (8, 0), lookup("a100-sxm-80gb"), "bf16") == 1.0).all()   # Ampere's own
    assert (time_factor(flops, moved, None, h100, "bf16") == 1.0).all()
    assert (time_factor(flops, moved, (10, 0), h100, "bf16") == 1.0).all()   # a newer build than the GPU
    # Blackwell's tcgen05 doubles Hopper's rate again: an Ampere build loses more there
    assert time_factor(flops, moved, (8, 0), lookup("b200"), "bf16")[0] > factor[0] + 0.5
