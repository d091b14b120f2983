"""aiconfigurator's fused-MoE tables become one row per (device, kernel, dtype, shape, routing), in microseconds."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stepcast.estimator.importers import aiconfigurator_moe
from stepcast.estimator.importers.aiconfigurator import DATA_DIR
from stepcast.estimator.importers.common import DataImportError

H100 = "NVIDIA H100 80GB HBM3"


def write(root: Path, relative: str, rows: list[dict]) -> Path:
    path = root / DATA_DIR / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def moe(latency_ms: float, dtype: str = "bfloat16", distribution: str = "balanced", tokens: int = 64,
        source: str = "moe_torch_flow_cutlass", device: str = H100, inter: int = 1536) -> dict:
    return {"framework": "X", "version": "1", "device": device, "op_name": "moe", "kernel_source": source,
            "moe_dtype": dtype, "num_tokens": tokens, "hidden_size": 4096, "inter_size": inter, "topk": 8,
            "num_experts": 128, "moe_tp_size": 1, "moe_ep_size": 4, "distribution": distribution,
            "latency": latency_ms}


def test_releases_are_merged_to_their_median_in_microseconds(tmp_path):
    write(tmp_path, "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet", [moe(0.100), moe(0.050, dtype="fp8")])
    write(tmp_path, "h100_sxm/moe/sglang/0.5.9/moe_perf.parquet", [moe(0.120)])
    write(tmp_path, "h100_sxm/moe/trtllm/1.0/moe_perf.parquet", [moe(0.300)])
    rows = aiconfigurator_moe.load(tmp_path)
    bf16 = rows[rows["dtype"] == "bf16"]
    assert len(bf16) == 1 and bf16["runtime_us"].iat[0] == pytest.approx(120.0)
    assert set(rows["dtype"]) == {"bf16", "fp8_e4m3"}
    assert set(rows["hardware"]) == {"h100-sxm"}


def test_other_dtypes_wide_ep_tables_and_unknown_devices_are_left_out(tmp_path):
    write(tmp_path, "h100_sxm/moe/vllm/1/moe_perf.parquet", [moe(0.1, dtype="nvfp4"), moe(0.1, dtype="int4_wo")])
    write(tmp_path, "h100_sxm/moe/sglang/1/wideep_moe_perf.parquet", [moe(0.1)])
    write(tmp_path, "rtx_pro_6000_server/moe/vllm/1/moe_perf.parquet",
          [moe(0.1, device="NVIDIA RTX PRO 6000 Blackwell Server Edition")])
    assert aiconfigurator_moe.load(tmp_path).empty


def test_power_law_routings_keep_their_exponent_and_balanced_is_zero(tmp_path):
    write(tmp_path, "h100_sxm/moe/vllm/1/moe_perf.parquet",
          [moe(0.1), moe(0.2, distribution="power_law_1.2"), moe(0.15, distribution="power_law_1.01")])
    rows = aiconfigurator_moe.load(tmp_path).sort_values("skew")
    assert rows["skew"].tolist() == [0.0, 1.01, 1.2]
    assert rows["runtime_us"].tolist() == pytest.approx([100.0, 150.0, 200.0])


def test_a_model_shape_timed_by_a_nongated_kernel_is_plain_on_every_backend(tmp_path):
    write(tmp_path, "h100_sxm/moe/trtllm/1/moe_perf.parquet",
          [moe(0.1, source="moe_torch_flow_nongated", inter=1856), moe(0.1, inter=1856), moe(0.1)])
    rows = aiconfigurator_moe.load(tmp_path)
    assert rows.loc[rows["inter"] == 1856, "gated"].tolist() == [False, False]
    assert rows.loc[rows["inter"] == 1536, "gated"].tolist() == [True]


def test_a_shape_has_one_held_out_set_on_every_device(tmp_path):
    write(tmp_path, "h100_sxm/moe/vllm/1/moe_perf.parquet", [moe(0.1), moe(0.2, tokens=128)])
    write(tmp_path, "h200_sxm/moe/vllm/1/moe_perf.parquet", [moe(0.1, device="NVIDIA H200")])
    rows = aiconfigurator_moe.load(tmp_path)
    assert rows["group"].nunique() == 1 and rows["group"].iat[0].startswith("aiconfigurator-moe/s")


def test_an_unknown_distribution_is_a_one_line_error_naming_the_column(tmp_path):
    write(tmp_path, "h100_sxm/moe/vllm/1/moe_perf.parquet", [moe(0.1, distribution="zipf")])
    with pytest.raises(DataImportError, match=r"column 'distribution': unexpected 'zipf'"):
        aiconfigurator_moe.load(tmp_path)


def test_a_missing_column_is_a_one_line_error_naming_file_and_column(tmp_path):
    path = write(tmp_path, "h100_sxm/moe/vllm/1/moe_perf.parquet", [{k: v for k, v in moe(0.1).items()
                                                                      if k != "topk"}])
    with pytest.raises(DataImportError, match=f"{path}: column 'topk' is missing"):
        aiconfigurator_moe.load(tmp_path)


def test_each_release_is_scored_against_the_median_of_the_others_timing_the_same_layer(tmp_path):
    """Three releases time one layer at 100, 120 and 150 us: 100 against median(120, 150) = 135 is 25.9 % off, 120
    against 125 is 4 %, 150 against 110 is 36.4 %; a layer only one release timed is no evidence and counts not."""
    write(tmp_path, "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet", [moe(0.100), moe(0.200, tokens=8)])
    write(tmp_path, "h100_sxm/moe/vllm/0.19.0/moe_perf.parquet", [moe(0.120)])
    write(tmp_path, "h100_sxm/moe/sglang/0.5.9/moe_perf.parquet", [moe(0.150)])
    spread = aiconfigurator_moe.release_spread(aiconfigurator_moe.measurements(tmp_path))
    assert spread[["hardware", "dtype", "measurements"]].values.tolist() == [["h100-sxm", "bf16", 3]]
    expected = [100 * (35 / 135), 100 * (5 / 125), 100 * (40 / 110)]
    assert spread["mean_ape"].iat[0] == pytest.approx(sum(expected) / 3)
    assert spread["median_ape"].iat[0] == pytest.approx(sorted(expected)[1])


def test_two_releases_agreeing_exactly_disagree_by_nothing(tmp_path):
    write(tmp_path, "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet", [moe(0.1), moe(0.05, dtype="fp8")])
    write(tmp_path, "h100_sxm/moe/vllm/0.19.0/moe_perf.parquet", [moe(0.1), moe(0.1, dtype="fp8")])
    spread = aiconfigurator_moe.release_spread(aiconfigurator_moe.measurements(tmp_path)).set_index("dtype")
    assert spread.loc["bf16", "mean_ape"] == 0.0
    assert spread.loc["fp8_e4m3", "mean_ape"] == pytest.approx((50.0 + 100.0) / 2)   # 0.05 vs 0.1, 0.1 vs 0.05
