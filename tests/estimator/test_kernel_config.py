"""Kernel-configuration features: names of every architecture path read as tile, stages, split-K, cluster and
alignment; the grid and the tile give waves and tile quantisation; unlabelled rows read as missing; and a model
with these features learns what the kernel choice does to time, which one without them cannot see."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.features import features
from stepcast.estimator.kernel_config import FEATURES, NAME_FEATURES, PATHS, kernel_config_features, parse_name, \
    shape_alignment_bytes
from stepcast.estimator.xgb import XGBoostEstimator


def named(name: str) -> dict[str, float]:
    return dict(zip(NAME_FEATURES, parse_name(name)))


@pytest.mark.parametrize("name, want", [
    ("nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT",
     {"kc_path": "nvjet", "kc_sm": 90, "kc_tile_m": 256, "kc_tile_n": 128, "kc_tile_k": 64, "kc_stages": 4,
      "kc_cluster": 8, "kc_split_k_named": 0, "kc_tensor": 1}),
    ("nvjet_sm100_tst_64x8_64x16_2x1_v_bz_splitK_TNT",
     {"kc_path": "nvjet", "kc_sm": 100, "kc_tile_n": 8, "kc_stages": 16, "kc_cluster": 2, "kc_split_k_named": 1}),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize160x128x32_stage4_warpsize2x2x1_tensor16x8x16_execute_"
     "segment_k_off_kernel__5x_cublas",
     {"kc_path": "xmma", "kc_sm": 80, "kc_tile_m": 160, "kc_tile_n": 128, "kc_tile_k": 32, "kc_stages": 4,
      "kc_split_k_named": 0}),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_on_kernel__5x_"
     "cublas",  # cuBLAS 12.1 on Hopper (what Vidur ran): no stage count in the name, split-K named
     {"kc_path": "xmma", "kc_sm": 90, "kc_tile_m": 128, "kc_tile_n": 256, "kc_tile_k": 64, "kc_split_k_named": 1,
      "kc_tensor": 1}),
    ("_ZN7cutlass7Kernel2I57cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_32x2_tn_align1EEvNT_6ParamsE",
     {"kc_path": "cutlass", "kc_sm": 75, "kc_tile_m": 128, "kc_tile_k": 32, "kc_stages": 2, "kc_align": 1}),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(cutlass_80_tensorop_s1688gemm_"
     "64x64_32x6_tn_align4::Params)",
     {"kc_path": "cutlass", "kc_sm": 80, "kc_tile_m": 64, "kc_stages": 6, "kc_align": 4}),
    ("cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_128x64x16_1x1x1_3_nnn_align1_bias_f32_relu",  # B200 fp32
     {"kc_path": "cutlass", "kc_sm": 100, "kc_tile_m": 128, "kc_tile_n": 64, "kc_tile_k": 16, "kc_stages": 3,
      "kc_cluster": 1, "kc_align": 1, "kc_tensor": 0}),
    ("cutlass3x_sm100_tensorop_s256x128x8tf32implicit_gemm_strided_dgrad_f32_f32_f32_void_f32_f32_256x128x32_"
     "16w16h1d1n_dyn_cga_ndhwc_ndhwc_ndhwc_align4_2sm",  # dynamic cluster: no cluster or stages in the name
     {"kc_path": "cutlass", "kc_sm": 100, "kc_tile_m": 256, "kc_tile_n": 128, "kc_tile_k": 32, "kc_cluster": 1,
      "kc_tensor": 1}),
    ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn",
     {"kc_path": "prebuilt", "kc_sm": 80, "kc_tile_k": 64, "kc_stages": 5, "kc_slices": 2, "kc_tensor": 1}),
    ("volta_sgemm_32x32_sliced1x4_tn", {"kc_path": "prebuilt", "kc_sm": 70, "kc_slices": 4, "kc_tensor": 0}),
    ("maxwell_sgemm_128x64_nn", {"kc_path": "prebuilt", "kc_sm": 50, "kc_tile_m": 128, "kc_tile_n": 64}),
    ("gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false>", {"kc_path": "gemv"}),
    ("sgemm_32x32x32_NN_vec", {"kc_path": "small", "kc_tile_k": 32}),
])
def test_every_architecture_path_reads_its_tile_stages_cluster_and_split(name, want):
    got = named(name)
    for key, value in want.items():
        expected = float(PATHS.index(value)) if key == "kc_path" else float(value)
        assert got[key] == expected, (key, got)


NAN = float("nan")


# One case per naming scheme a CUDA / library version launches (issue 32): every field of the name, checked.
@pytest.mark.parametrize("name, want", [
    # cuBLAS 13.x: nvjet tagged with the SM it was generated for; splitK named
    ("nvjet_sm90_tst_128x152_64x6_4x1_v_bz_splitK_TNT",
     {"kc_path": "nvjet", "kc_sm": 90, "kc_tensor": 1, "kc_tile_m": 128, "kc_tile_n": 152, "kc_tile_k": 64,
      "kc_stages": 6, "kc_cluster": 4, "kc_split_k_named": 1}),
    # cuBLAS 12.8: no SM tag (the device's, see kernel_config_features), any operand-type tag
    ("nvjet_tst_256x128_64x4_2x4_v_bz_coopA_NNT",
     {"kc_path": "nvjet", "kc_sm": NAN, "kc_tensor": 1, "kc_tile_m": 256, "kc_tile_n": 128, "kc_tile_k": 64,
      "kc_stages": 4, "kc_cluster": 8, "kc_split_k_named": 0}),
    ("nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT",
     {"kc_path": "nvjet", "kc_sm": NAN, "kc_tile_m": 64, "kc_tile_n": 8, "kc_tile_k": 64, "kc_stages": 16,
      "kc_cluster": 2, "kc_split_k_named": 1}),
    # Blackwell's CTA-pair kernels: the cluster is still the name's M x N
    ("nvjet_tst_64x32_64x16_2x2_2cta_h_bz_splitK_TNT",
     {"kc_path": "nvjet", "kc_tile_m": 64, "kc_tile_n": 32, "kc_stages": 16, "kc_cluster": 4, "kc_split_k_named": 1}),
    ("nvjet_sm100_tst_256x128_64x5_2x4_2cta_h_bz_TNT",
     {"kc_path": "nvjet", "kc_sm": 100, "kc_tile_m": 256, "kc_tile_n": 128, "kc_tile_k": 64, "kc_stages": 5,
      "kc_cluster": 8, "kc_split_k_named": 0}),
    ("nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT",  # fp8 e4m3: a K tile of 128
     {"kc_path": "nvjet", "kc_sm": 90, "kc_tile_k": 128, "kc_stages": 6, "kc_cluster": 2}),
    # cuDNN's implicit-GEMM convolutions: the GEMM they run
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn",
     {"kc_path": "xmma", "kc_sm": 90, "kc_tensor": 1, "kc_tile_m": 128, "kc_tile_n": 128, "kc_tile_k": 64,
      "kc_stages": NAN, "kc_split_k_named": 0}),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize"
     "2x2x1_g1_tensor16x8x8_execute_kernel_cudnn",
     {"kc_path": "xmma", "kc_sm": 80, "kc_tile_m": 128, "kc_tile_n": 128, "kc_tile_k": 16, "kc_stages": 4,
      "kc_split_k_named": 0}),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x256x32_warpgroupsize1x1x1_g1_"
     "execute_split_k_kernel__5x_cudnn", {"kc_path": "xmma", "kc_sm": 90, "kc_tile_m": 64, "kc_tile_n": 256,
                                          "kc_split_k_named": 1}),
    # cuBLAS 13's fp32 path on Hopper: an sm80 xmma kernel on the CUDA cores (ffma), A aligned to 4 elements
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize256x64x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
     "split_k_kernel__5x_cublas",
     {"kc_path": "xmma", "kc_sm": 80, "kc_tensor": 0, "kc_tile_m": 256, "kc_tile_n": 64, "kc_tile_k": 8,
      "kc_stages": 3, "kc_split_k_named": 1, "kc_align": 4}),
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4>("
     "cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4::Params)",  # CUTLASS 2 in cuDNN: no SM
     {"kc_path": "cutlass", "kc_sm": NAN, "kc_tensor": 1, "kc_tile_m": 64, "kc_tile_n": 64, "kc_tile_k": 16,
      "kc_stages": 10, "kc_align": 4}),
    # cuBLAS's CUTLASS 2 kernels, WMMA and mma.sync
    ("cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_64x2_nn_align2",
     {"kc_path": "cutlass", "kc_sm": 80, "kc_tensor": 1, "kc_tile_m": 32, "kc_tile_n": 32, "kc_tile_k": 64,
      "kc_stages": 2, "kc_align": 2}),
    ("cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2",
     {"kc_path": "cutlass", "kc_sm": 80, "kc_tensor": 1, "kc_tile_m": 256, "kc_tile_n": 128, "kc_tile_k": 64,
      "kc_stages": 3, "kc_align": 2}),
    # CUTLASS 3: stage count 0 is the builder's choice, not zero stages
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_2x1x1_0_tnt_align8_warpspecialized_"
     "cooperative_epi_tma",
     {"kc_path": "cutlass", "kc_sm": 90, "kc_tensor": 1, "kc_tile_m": 128, "kc_tile_n": 128, "kc_tile_k": 64,
      "kc_stages": NAN, "kc_cluster": 2, "kc_align": 8}),
    # prebuilt kernels of every generation; h884 / h1688 / s1688 name a tensor-core instruction
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn",
     {"kc_path": "prebuilt", "kc_sm": 80, "kc_tensor": 1, "kc_tile_m": 128, "kc_tile_n": 256, "kc_tile_k": 64,
      "kc_stages": 3}),
    ("volta_h884gemm_64x128_ldg8_nn", {"kc_path": "prebuilt", "kc_sm": 70, "kc_tensor": 1, "kc_tile_m": 64,
                                       "kc_tile_n": 128, "kc_tile_k": NAN}),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", {"kc_path": "prebuilt", "kc_sm": 75, "kc_tensor": 1,
                                                        "kc_tile_m": 256, "kc_tile_n": 128}),
    ("volta_sgemm_128x64_nn", {"kc_path": "prebuilt", "kc_sm": 70, "kc_tensor": 0, "kc_tile_m": 128,
                               "kc_tile_n": 64}),
    ("void gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false, cublasGemvParams<"
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float> >", {"kc_path": "gemv", "kc_sm": NAN, "kc_tile_m": NAN}),
    # cuBLASLt's split-K reduction follows the GEMM; it is not the GEMM
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>",
     {"kc_path": "other", "kc_tile_m": NAN}),
])
def test_each_libraries_naming_scheme_reads_as_its_tile_stages_cluster_and_split(name, want):
    got = named(name)
    for key, value in want.items():
        expected = float(PATHS.index(value)) if key == "kc_path" else float(value)
        assert got[key] == expected or (np.isnan(expected) and np.isnan(got[key])), (key, got)


@pytest.mark.parametrize("name", [
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
    "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
    "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<80>, cute::C<256> > > > >",
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::"
    "nchw2nhwc_params_t<float>, float const*, float*)",
    "triton_tem_fused_mm_0",
])
def test_kernels_that_are_no_library_gemm_have_no_path_or_tile(name):
    # attention (whose names carry CUTLASS, tiles and SMs too), layout transforms, and Inductor's templates, whose
    # autotuned tile is not in their name: path "other", so the emulator records no GEMM launch of them
    got = named(name)
    assert got["kc_path"] == PATHS.index("other") and np.isnan(got["kc_tile_m"]) and np.isnan(got["kc_sm"])


@pytest.mark.parametrize("cublas_13, cublas_12_8", [
    ("nvjet_sm90_hss_64x8_64x16_1x1_h_bz_splitK_NNT", "nvjet_hss_64x8_64x16_1x1_v_bz_splitK_NNT"),
    ("nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_NNT", "nvjet_tst_256x128_64x4_2x4_v_bz_coopA_NNT"),
])
def test_an_untagged_nvjet_kernel_runs_on_the_rows_device_so_both_cublas_versions_read_alike(cublas_13, cublas_12_8):
    frame = pd.DataFrame({"kernel_name": [cublas_13, cublas_12_8, cublas_12_8], "grid": ["1,132,1"] * 3})
    m, n, k, b = (np.full(3, v) for v in (4096.0, 4096.0, 8648.0, 1.0))
    sms, elem = np.full(3, 132.0), np.full(3, 2.0)
    on_h100 = kernel_config_features(frame, m, n, k, b, sms, elem, np.array([90.0, 90.0, np.nan]))
    assert on_h100["kc_sm"][1] == 90 and np.isnan(on_h100["kc_sm"][2])  # a device of unknown SM: unknown
    for feature in FEATURES:
        np.testing.assert_equal(on_h100[feature][0], on_h100[feature][1], err_msg=feature)  # NaN equals NaN
    without_device = kernel_config_features(frame, m, n, k, b, sms, elem)
    assert without_device["kc_sm"][0] == 90 and np.isnan(without_device["kc_sm"][1])


def test_a_tagged_or_prebuilt_kernel_keeps_the_sm_its_name_gives_on_any_device():
    # cuBLAS runs Ampere's prebuilt kernels on Hopper: the SM a kernel was built for is its name's, not the device's
    frame = pd.DataFrame({"kernel_name": ["ampere_sgemm_128x64_tn", "nvjet_sm100_tst_64x8_64x16_2x1_v_bz_splitK_TNT"],
                          "grid": ["8,4,1", "1,64,1"]})
    m, n, k, b = (np.full(2, v) for v in (512.0, 1024.0, 1024.0, 1.0))
    f = kernel_config_features(frame, m, n, k, b, np.full(2, 132.0), np.full(2, 4.0), np.full(2, 90.0))
    assert f["kc_sm"].tolist() == [80.0, 100.0]


def test_features_read_the_sm_of_an_untagged_nvjet_kernel_from_the_rows_device():
    frame = pd.DataFrame({"family": "gemm", "hardware": ["h100-sxm", "a100-sxm-80gb"], "dtype": "bf16", "m": [64.0] * 2,
                          "n": [4096.0] * 2, "k": [4096.0] * 2, "batch": [1.0] * 2,
                          "kernel_name": ["nvjet_tst_64x8_64x16_4x1_v_bz_TNT"] * 2, "grid": ["1,64,1"] * 2})
    assert features("gemm", frame, kernel_config=True).column("kc_sm").tolist() == [90.0, 80.0]


def test_an_unknown_name_says_so_and_leaves_the_tile_missing():
    got = named("my_custom_kernel")
    assert got["kc_path"] == PATHS.index("other") and np.isnan(got["kc_tile_m"])


def test_grid_and_tile_give_waves_split_k_and_tile_quantisation():
    frame = pd.DataFrame({"kernel_name": ["cutlass_80_tensorop_s16816gemm_bf16_128x128_32x4_tn_align8", None],
                          "grid": ["8,4,3", None]})
    m, n, k, b = (np.array([500.0, 500.0]), np.array([1000.0, 1000.0]), np.array([4096.0] * 2), np.ones(2))
    f = kernel_config_features(frame, m, n, k, b, np.array([132.0] * 2), np.array([2.0] * 2))
    assert list(f) == list(FEATURES)
    assert f["kc_split_k"][0] == 3  # grid z beyond a batch of one: three K slices
    assert f["kc_log2_ctas"][0] == np.log2(96)
    assert f["kc_grid_waves"][0] == 1 and f["kc_grid_last_wave"][0] == pytest.approx(96 / 132)
    # cuBLAS M is the row's n: ceil(1000/128) x ceil(500/128) = 8 x 4 tiles of 128 x 128 over 1000 x 500
    assert f["kc_log2_tile_overhead"][0] == pytest.approx(np.log2(32 * 128 * 128 / 500_000))
    assert f["kc_log2_k_iters"][0] == np.log2(np.ceil(4096 / (32 * 3)))
    assert f["kc_labelled"].tolist() == [1.0, 0.0]
    assert all(np.isnan(f[name][1]) for name in FEATURES if name not in ("kc_labelled", "kc_shape_align_bytes"))


def test_shape_alignment_is_the_largest_power_of_two_up_to_16_bytes():
    got = shape_alignment_bytes(np.array([4096, 4095, 4096, 100]), np.array([4096, 4096, 4097, 96]),
                                np.array([2.0, 2.0, 2.0, 4.0]))
    assert got.tolist() == [16.0, 2.0, 2.0, 16.0]


def test_features_add_the_configuration_only_when_asked():
    frame = pd.DataFrame({"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": [64.0], "n": [4096.0],
                          "k": [4096.0], "batch": [1.0], "kernel_name": ["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"],
                          "grid": ["1,64,1"]})
    plain, with_config = features("gemm", frame), features("gemm", frame, kernel_config=True)
    assert not set(FEATURES) & set(plain.names)
    assert set(FEATURES) <= set(with_config.names) and set(plain.names) <= set(with_config.names)
    assert with_config.column("kc_tile_m")[0] == 64


def _two_kernel_world(n: int, seed: int) -> pd.DataFrame:
    """GEMMs whose time depends on which of two kernels ran (recorded), not on anything the shape says."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16",
                          "m": rng.integers(256, 4096, n).astype(float), "n": rng.integers(256, 4096, n).astype(float),
                          "k": rng.integers(256, 4096, n).astype(float), "batch": 1.0})
    slow = rng.random(n) < 0.5
    frame["kernel_name"] = np.where(slow, "_ZN7cutlass7Kernel2I57cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_32x2"
                                          "_tn_align1EE", "nvjet_sm90_tst_128x256_64x4_2x1_h_bz_coopA_TNT")
    flops = 2 * frame["m"] * frame["n"] * frame["k"]
    frame["runtime_us"] = flops / np.where(slow, 150e12, 600e12) * 1e6 + 5.0
    return frame


def test_a_model_with_the_kernel_configuration_sees_what_the_choice_costs():
    train, test = _two_kernel_world(2000, 0), _two_kernel_world(500, 1)
    errors = {}
    for config in (False, True):
        model = XGBoostEstimator(kernel_config=config).fit(train, train["runtime_us"].to_numpy())
        errors[config] = np.mean(np.abs(model.predict(test) / test["runtime_us"].to_numpy() - 1))
    assert errors[True] < 0.1 < errors[False]


def test_a_persistent_kernels_grid_waves_are_its_tiles_over_its_ctas():
    # Hopper's sm90 xmma kernels launch one CTA per SM at most and loop: 128 CTAs for 32 x 64 tiles of 128 x 128
    frame = pd.DataFrame({"kernel_name": ["sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
                                          "_execute_segment_k_off_kernel__5x_cublas"] * 2,
                          "grid": ["64,2,1", "4,2,1"]})
    m, n, k, b = np.array([4096.0, 256.0]), np.array([8192.0, 512.0]), np.array([8192.0] * 2), np.ones(2)
    f = kernel_config_features(frame, m, n, k, b, np.array([132.0] * 2), np.array([2.0] * 2))
    assert f["kc_grid_waves"][0] == 2048 / 128 and f["kc_grid_last_wave"][0] == pytest.approx(2048 / (16 * 132))
    # a grid that covers its tiles (4 x 2) runs one wave, as any other kernel's
    assert f["kc_grid_waves"][1] == 1 and f["kc_grid_last_wave"][1] == pytest.approx(8 / 132)


def test_a_named_split_k_kernel_without_slices_along_z_runs_its_surplus_ctas_on_k():
    # cuBLAS's nvjet split-K on an H100: 128 CTAs along x and y for the 4 x 2 tiles of 128 x 80 over n = 512, m = 160
    frame = pd.DataFrame({"kernel_name": ["nvjet_sm90_tst_128x80_64x8_4x2_h_bz_splitK_TNT",
                                          "nvjet_sm90_tst_128x80_64x8_4x2_h_bz_TNT"], "grid": ["8,16,1", "8,1,1"]})
    m, n, k, b = np.array([160.0] * 2), np.array([512.0] * 2), np.array([65536.0] * 2), np.ones(2)
    f = kernel_config_features(frame, m, n, k, b, np.array([132.0] * 2), np.array([2.0] * 2))
    assert f["kc_split_k"].tolist() == [16.0, 1.0]
    assert f["kc_log2_k_iters"][0] == np.log2(65536 / (64 * 16))
    assert f["kc_grid_waves"].tolist() == [1.0, 1.0]
