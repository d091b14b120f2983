"""estimator.legacy_isa: kernels built for an older SM generation pay their generation's tensor-core rate."""
from __future__ import annotations

import numpy as np
import pytest

from estimator.legacy_isa import extra_us, kernel_generation, tensor_rate
from profiling.hardware import lookup

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


def test_a_legacy_kernel_adds_its_flops_at_the_rate_difference_and_nothing_on_its_own_generation():
    flops = np.array([1e12, 0.0])
    h100 = lookup("h100-sxm")
    added = extra_us(flops, (8, 0), h100, "bf16")
    native_us = 1e12 / h100.peak_flops("bf16") * 1e6
    # the FLOPs at the Ampere rate take rate(H100)/rate(A100) times the native tensor time
    assert added[0] == pytest.approx(native_us * (tensor_rate((9, 0), "bf16") / tensor_rate((8, 0), "bf16") - 1),
                                     rel=1e-6)
    assert added[1] == 0.0
    assert not extra_us(flops, (8, 0), lookup("a100-sxm-80gb"), "bf16").any()
    assert not extra_us(flops, None, h100, "bf16").any()
    assert not extra_us(flops, (10, 0), h100, "bf16").any()         # a newer build than the GPU: nothing to add
    # Blackwell's tcgen05 doubles Hopper's rate again: an Ampere build loses more there
    b200 = lookup("b200")
    assert extra_us(flops, (8, 0), b200, "bf16")[0] / (1e12 / b200.peak_flops("bf16") * 1e6) > \
        added[0] / native_us
