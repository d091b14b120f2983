"""aiconfigurator's GEMM, attention and NCCL tables become training rows with the right units, shapes and devices."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stepcast.estimator.data import load_measurements
from stepcast.estimator.importers import aiconfigurator_attention, aiconfigurator_gemm, aiconfigurator_nccl
from stepcast.estimator.importers.aiconfigurator import DATA_DIR
from stepcast.estimator.importers.common import DataImportError
from stepcast.profiling.hardware import lookup


def write(root: Path, relative: str, rows: list[dict]) -> Path:
    path = root / DATA_DIR / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def gemm(device: str, dtype: str, m: int, n: int, k: int, latency_ms: float, source: str = "torch_flow") -> dict:
    return {"framework": "X", "version": "1", "device": device, "op_name": "gemm", "kernel_source": source,
            "gemm_dtype": dtype, "m": m, "n": n, "k": k, "latency": latency_ms}


H100 = "NVIDIA H100 80GB HBM3"


def test_bf16_linear_gemms_are_merged_over_releases_in_microseconds(tmp_path):
    write(tmp_path, "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", [
        gemm(H100, "bfloat16", 64, 4096, 1024, 0.010), gemm(H100, "fp8", 64, 4096, 1024, 0.004),
        gemm(H100, "bfloat16", 0, 4096, 1024, 0.0005)])
    write(tmp_path, "h100_sxm/gemm/sglang/0.5.9/gemm_perf.parquet", [gemm(H100, "bfloat16", 64, 4096, 1024, 0.012)])
    write(tmp_path, "h100_sxm/gemm/trtllm/1.0/gemm_perf.parquet", [gemm(H100, "bfloat16", 64, 4096, 1024, 0.030)])
    write(tmp_path, "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", [gemm("NVIDIA H200", "bfloat16", 8, 4096, 1024,
                                                                         0.009)])
    write(tmp_path, "gb300/gemm/trtllm/1.3/gemm_perf.parquet", [gemm("NVIDIA GB300", "bfloat16", 8, 64, 64, 0.002)])
    write(tmp_path, "rtx_pro_6000_server/gemm/trtllm/1.3/gemm_perf.parquet", [
        gemm("NVIDIA RTX PRO 6000 Blackwell Server Edition", "bfloat16", 8, 64, 64, 0.003)])
    rows = aiconfigurator_gemm.load(tmp_path).sort_values("hardware").reset_index(drop=True)
    # fp8 (a CUTLASS kernel), the empty m=0 GEMM and the uncatalogued RTX PRO 6000 are left out; the GB300's vendor
    # name is an alias of a catalog entry; three releases -> median
    assert rows[["hardware", "m", "n", "k", "batch", "dtype"]].values.tolist() == [
        ["gb300-nvl72", 8.0, 64.0, 64.0, 1.0, "bf16"], ["h100-sxm", 64.0, 4096.0, 1024.0, 1.0, "bf16"],
        ["h200", 8.0, 4096.0, 1024.0, 1.0, "bf16"]]
    assert rows["runtime_us"].tolist() == pytest.approx([2.0, 12.0, 9.0])
    # one (n, k) pair is one held-out group on every device
    pair = rows[rows["n"] == 4096]
    assert len(pair) == 2 and pair["group"].nunique() == 1 and pair["group"].iat[0].startswith("aiconfigurator-gemm/nk")
    assert set(rows["source"]) == {"aiconfigurator"}


def test_per_tensor_fp8_gemms_are_read_only_when_asked_for(tmp_path):
    write(tmp_path, "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", [
        gemm(H100, "bfloat16", 64, 4096, 1024, 0.010), gemm(H100, "fp8", 64, 4096, 1024, 0.004),
        gemm(H100, "fp8_block", 64, 4096, 1024, 0.005)])
    write(tmp_path, "h100_sxm/gemm/sglang/0.5.9/gemm_perf.parquet", [gemm(H100, "fp8", 64, 4096, 1024, 0.006)])
    rows = aiconfigurator_gemm.load(tmp_path, "fp8")
    assert rows[["hardware", "dtype"]].values.tolist() == [["h100-sxm", "fp8_e4m3"]]
    assert rows["runtime_us"].tolist() == pytest.approx([5.0])   # the per-tensor rows' median, not fp8_block's
    with pytest.raises(ValueError, match="gemm_dtype 'int4'"):
        aiconfigurator_gemm.load(tmp_path, "int4")


def attention(kind: str, source: str, isl: int, step: int, latency_ms: float, **overrides) -> dict:
    row = {"framework": "X", "version": "1", "device": H100, "op_name": kind, "kernel_source": source,
           "batch_size": 4, "isl": isl, "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "beam_width": 1,
           "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "step": step, "window_size": 0,
           "latency": latency_ms}
    return row | overrides


def test_prefill_and_decode_map_onto_the_attention_columns_one_library_per_device(tmp_path):
    write(tmp_path, "h100_sxm/attention/vllm/0.24.0/context_attention_perf.parquet", [
        attention("context", "vllm_flash_attn_fa3", 1024, 0, 0.2),
        attention("context", "vllm_flash_attn_fa3", 1024, 0, 0.1, window_size=128),
        attention("context", "vllm_flash_attn_fa3", 1024, 0, 0.1, kv_cache_dtype="fp8")])
    write(tmp_path, "h100_sxm/attention/trtllm/1.3/context_attention_perf.parquet", [
        attention("context", "torch_flow", 1024, 0, 0.15)])
    write(tmp_path, "h100_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet", [
        attention("generation", "vllm_flash_attn_fa3", 1, 4095, 0.03)])
    rows = aiconfigurator_attention.load(tmp_path).sort_values("seq_q").reset_index(drop=True)
    cols = ["batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "pass", "backend"]
    assert rows[cols].values.tolist() == [[4.0, 32.0, 8.0, 1.0, 4096.0, 128.0, False, "fwd", "fa3"],
                                          [4.0, 32.0, 8.0, 1024.0, 1024.0, 128.0, True, "fwd", "fa3"]]
    assert rows["runtime_us"].tolist() == pytest.approx([30.0, 200.0])


def nccl(op: str, dtype: str, gpus: int, elements: int, latency_ms: float, device: str | None = H100) -> dict:
    row = {"op_name": op, "kernel_source": "NCCL", "nccl_dtype": dtype, "num_gpus": gpus, "message_size": elements,
           "latency": latency_ms}
    return row | ({"framework": "TRTLLM", "version": "2.29", "device": device} if device else {})


def test_nccl_message_size_is_elements_and_becomes_bytes_per_rank(tmp_path):
    write(tmp_path, "h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet", [
        nccl("all_reduce", "half", 8, 1024, 0.02), nccl("alltoall", "int8", 4, 1024, 0.01)])
    write(tmp_path, "h200_sxm/comm/nccl/2.23/nccl_perf.parquet", [nccl("all_gather", "half", 2, 512, 0.005, None)])
    write(tmp_path, "h100_sxm/comm/vllm/0.14.0/custom_allreduce_perf.parquet", [nccl("all_reduce", "half", 8, 1, 1.0)])
    rows = aiconfigurator_nccl.load(tmp_path).sort_values(["ranks"]).reset_index(drop=True)
    assert rows[["hardware", "op", "dtype", "bytes", "ranks", "ranks_per_node"]].values.tolist() == [
        ["h200", "all_gather", "fp16", 1024.0, 2.0, 2.0],  # no device column: the folder names the GPU
        ["h100-sxm", "all_to_all", "int8", 1024.0, 4.0, 4.0],
        ["h100-sxm", "all_reduce", "fp16", 2048.0, 8.0, 8.0]]
    assert rows["runtime_us"].tolist() == pytest.approx([5.0, 10.0, 20.0])
    assert rows["group"].tolist() == [f"aiconfigurator-nccl/{n}gpu" for n in (2, 4, 8)]


def test_an_unknown_collective_is_one_line_naming_file_and_column(tmp_path):
    path = write(tmp_path, "h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet", [nccl("allreduce2", "half", 8, 8, 0.1)])
    with pytest.raises(DataImportError, match=f"{path}: column 'op_name'"):
        aiconfigurator_nccl.load(tmp_path)


def test_the_source_is_registered_with_load_measurements(tmp_path):
    write(tmp_path, "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", [gemm(H100, "bfloat16", 64, 4096, 1024, 0.01)])
    write(tmp_path, "h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet", [nccl("all_reduce", "half", 8, 1024, 0.02)])
    rows = load_measurements(sources=["aiconfigurator"], root=tmp_path, cache_dir=tmp_path / "cache")
    assert sorted(rows["family"]) == ["collective", "gemm"] and set(rows["source"]) == {"aiconfigurator"}


@pytest.mark.shared_data
def test_the_real_tables_give_every_catalog_gpu_they_measured_below_peak(shared_data):
    gemms = aiconfigurator_gemm.load(shared_data)
    # the L40S, B300, GB200 and GB300 have the newest TensorRT-LLM GEMM and NCCL tables only (the GB300 no NCCL):
    # GEMMs and collectives, no attention
    assert set(gemms["hardware"]) == {"h100-sxm", "h200", "b200", "a100-sxm-80gb", "l40s", "b300", "gb200-nvl72",
                                      "gb300-nvl72"} and (gemms["m"] >= 1).all()
    assert gemms.duplicated(["hardware", "m", "n", "k"]).sum() == 0  # one row per shape after merging releases
    big = gemms[(gemms["hardware"] == "h100-sxm") & (gemms["m"] == 8192) & (gemms["n"] == 8192)
                & (gemms["k"] == 8192)]
    tflops = 2 * 8192 ** 3 / (big["runtime_us"].iat[0] * 1e-6) / 1e12
    assert 500 < tflops < 989.4  # a large bf16 GEMM runs near, and below, the H100's dense peak
    # no GEMM of any device beats its catalog's dense bf16 peak (a sparse figure taken for a dense one would hide
    # here; one halved twice would not)
    achieved = 2 * gemms["m"] * gemms["n"] * gemms["k"] / (gemms["runtime_us"] * 1e-6) / 1e12
    best = achieved.groupby(gemms["hardware"]).max()
    assert all(0.5 * lookup(h).peak_tflops["bf16"] < tf < lookup(h).peak_tflops["bf16"] for h, tf in best.items())
    attention = aiconfigurator_attention.load(shared_data)
    assert dict(attention.groupby("hardware")["backend"].first()) == {
        "h100-sxm": "fa3", "h200": "fa3", "a100-sxm-80gb": "fa2", "b200": "flashinfer"}
    collectives = aiconfigurator_nccl.load(shared_data)
    assert set(collectives["ranks"]) == {2.0, 4.0, 8.0} and collectives["bytes"].max() == 2.0 ** 29  # 256M halves
    assert set(collectives["hardware"]) == set(gemms["hardware"]) - {"gb300-nvl72"}


def test_cublaslt_fp8_rows_lose_the_quantisation_their_narrowest_gemm_shows(tmp_path):
    from stepcast.estimator.importers import aiconfigurator_gemm

    # at (m, k) = (4096, 4096): the n = 32 fp8 row is 0.20 ms where bf16's is 0.05, so quantising the input costs
    # 0.20 - 0.05 / 2 = 0.175 ms, taken off every n there; other kernel sources and dtypes are not read
    rows = [("torch_flow", "fp8", 32, 0.20), ("torch_flow", "bfloat16", 32, 0.05), ("torch_flow", "fp8", 4096, 0.375),
            ("torch_flow", "bfloat16", 4096, 0.45), ("CutlassFP8ScaledMMLinearKernel", "fp8", 4096, 0.30)]
    write(tmp_path, "h100_sxm/gemm/trtllm/1.0/gemm_perf.parquet",
          [gemm(H100, dt, 4096, n, 4096, ms, source=src) for src, dt, n, ms in rows])
    out = aiconfigurator_gemm.cublaslt_fp8(tmp_path).set_index("n")
    assert set(out["dtype"]) == {"fp8_e4m3"} and set(out["hardware"]) == {"h100-sxm"}
    assert out.loc[4096, "runtime_us"] == pytest.approx(200.0) and out.loc[4096, "quantize_us"] == pytest.approx(175.0)
    assert out.loc[32, "runtime_us"] == pytest.approx(25.0)   # the fp8 read of its input: half bf16's


def releases(tmp_path: Path, factors: dict[str, float], shapes: int = 60) -> None:
    """One H100 bf16 GEMM table per release (folder name -> factor on a common timing), ``shapes`` shapes each."""
    for release, factor in factors.items():
        write(tmp_path, f"h100_sxm/gemm/{release}/gemm_perf.parquet",
              [gemm(H100, "bfloat16", 64, 128 * (i + 1), 1024, 0.010 * (1 + i / 100) * factor) for i in range(shapes)])


def test_a_release_timed_tenfold_its_siblings_is_left_out_with_a_warning_naming_it(tmp_path, caplog):
    releases(tmp_path, {"vllm/1": 1.0, "vllm/2": 1.1, "sglang/1": 0.9, "sglang/2": 10.0})
    with caplog.at_level("WARNING"):
        rows = aiconfigurator_gemm.load(tmp_path)
    assert rows["runtime_us"].iloc[0] == pytest.approx(10.0)  # the median of 9, 10, 11: the slip is gone
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "sglang/2/gemm_perf.parquet: timings 9.52x" in message and "left out" in message  # 10 / median(.9, 1, 1.1, 10)


def test_releases_within_the_outlier_factor_are_all_merged(tmp_path, caplog):
    releases(tmp_path, {"vllm/1": 1.0, "vllm/2": 1.0, "sglang/1": 3.0, "sglang/2": 3.0})
    with caplog.at_level("WARNING"):
        rows = aiconfigurator_gemm.load(tmp_path)
    assert rows["runtime_us"].iloc[0] == pytest.approx(20.0) and not caplog.records  # the median of all four


def test_releases_that_disagree_without_a_majority_are_all_kept(tmp_path, caplog):
    releases(tmp_path, {"vllm/1": 1.0, "sglang/1": 10.0})
    assert aiconfigurator_gemm.load(tmp_path)["runtime_us"].iloc[0] == pytest.approx(55.0)
    releases(tmp_path, {"vllm/1": 1.0, "vllm/2": 1.0, "sglang/1": 10.0, "sglang/2": 10.0})
    with caplog.at_level("WARNING"):
        assert aiconfigurator_gemm.load(tmp_path)["runtime_us"].iloc[0] == pytest.approx(55.0)
    assert "h100-sxm: 2 of 4 releases' tables differ by more than 4x" in caplog.text


def test_a_release_sharing_few_kernels_with_its_siblings_is_not_judged(tmp_path):
    releases(tmp_path, {"vllm/1": 1.0, "vllm/2": 1.0, "sglang/1": 10.0, "sglang/2": 10.0}, shapes=10)
    assert aiconfigurator_gemm.load(tmp_path)["runtime_us"].iloc[0] == pytest.approx(55.0)  # all four merged
