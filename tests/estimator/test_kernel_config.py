"""Kernel-configuration features: names of every architecture path read as tile, stages, split-K, cluster and
alignment; the grid and the tile give waves and tile quantisation; unlabelled rows read as missing; and a model
with these features learns what the kernel choice does to time, which one without them cannot see."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from estimator.features import features
from estimator.kernel_config import FEATURES, NAME_FEATURES, PATHS, kernel_config_features, parse_name, \
    shape_alignment_bytes
from estimator.xgb import XGBoostEstimator


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
