"""Vidur importers on the real files: GEMM shapes derived from model dims, units, hardware, network rows."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.importers import vidur, vidur_network
from stepcast.profiling.hardware import load_catalog


@pytest.fixture(scope="module")
def compute(shared_data: Path) -> pd.DataFrame:
    return vidur.load(shared_data)


@pytest.fixture(scope="module")
def network(shared_data: Path) -> pd.DataFrame:
    return vidur_network.load(shared_data)


def _op(frame: pd.DataFrame, model: str, gpu: str, tp: int, tokens: int, vidur_op: str) -> pd.Series:
    rows = frame[(frame["model"] == model) & (frame["hardware"] == gpu) & (frame["tp"] == tp)
                 & (frame["num_tokens"] == tokens) & (frame["vidur_op"] == vidur_op)]
    assert len(rows) >= 1, (model, gpu, tp, tokens, vidur_op)
    return rows.iloc[0]


def test_every_file_gives_rows_with_clean_values(compute, shared_data):
    assert len(vidur.input_files(shared_data)) == 18
    assert set(compute["family"]) == {"gemm", "elementwise", "norm"}
    assert set(compute["hardware"]) == {"a100-sxm-80gb", "a40", "h100-sxm"}
    assert set(compute["hardware"]) <= set(load_catalog())
    assert compute["runtime_us"].notna().all() and (compute["runtime_us"] > 0).all()
    assert (compute["dtype"] == "fp16").all() and (compute["source"] == "vidur").all()
    assert compute["group"].str.contains("/").all()  # org/model
    assert len(compute) > 150_000


def test_llama2_7b_gemm_shapes(compute):
    model = "meta-llama/Llama-2-7b-hf"
    qkv = _op(compute, model, "a100-sxm-80gb", 1, 4096, "attn_pre_proj")
    assert (qkv["m"], qkv["n"], qkv["k"], qkv["batch"]) == (4096, 12288, 4096, 1)
    assert _op(compute, model, "a100-sxm-80gb", 2, 4096, "attn_pre_proj")["n"] == 6144
    up = _op(compute, model, "h100-sxm", 4, 1024, "mlp_up_proj")  # gated: up and gate in one GEMM
    assert (up["m"], up["n"], up["k"]) == (1024, 2 * 11008 / 4, 4096)
    down = _op(compute, model, "h100-sxm", 4, 1024, "mlp_down_proj")
    assert (down["n"], down["k"]) == (4096, 11008 / 4)
    o = _op(compute, model, "a40", 8, 512, "attn_post_proj")
    assert (o["m"], o["n"], o["k"]) == (512, 4096, 4096 / 8)


def test_gqa_model_shapes(compute):
    # Llama-2-70B: 64 query heads, 8 KV heads, head_dim 128.
    qkv = _op(compute, "meta-llama/Llama-2-70b-hf", "a100-sxm-80gb", 8, 2048, "attn_pre_proj")
    assert (qkv["n"], qkv["k"]) == ((64 + 2 * 8) * 128 / 8, 8192)
    rope = _op(compute, "meta-llama/Llama-2-70b-hf", "a100-sxm-80gb", 8, 2048, "attn_rope")
    assert rope["numel"] == 2048 * (64 + 8) * 128 / 8


def test_times_are_the_median_in_microseconds(compute, shared_data):
    path = shared_data / vidur.COMPUTE_DIR / "a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    raw = pd.read_csv(path)
    point = raw[(raw["num_tokens"] == 4096) & (raw["num_tensor_parallel_workers"] == 1)].iloc[0]
    row = _op(compute, "meta-llama/Llama-2-7b-hf", "a100-sxm-80gb", 1, 4096, "attn_pre_proj")
    assert row["runtime_us"] == pytest.approx(point["time_stats.attn_pre_proj.median"] * 1000.0)
    # An fp16 4096x12288x4096 GEMM on an A100 must land between 100 and 312 TFLOP/s.
    tflops = 2 * 4096 * 12288 * 4096 / (row["runtime_us"] * 1e-6) / 1e12
    assert 100 < tflops < 312


def test_norm_activation_and_add(compute):
    llama = compute[compute["model"] == "meta-llama/Llama-2-7b-hf"]
    phi = compute[compute["model"] == "microsoft/phi-2"]
    assert set(llama.loc[llama["family"] == "norm", "op"]) == {"rms_norm"}
    assert set(phi.loc[phi["family"] == "norm", "op"]) == {"layer_norm"}
    assert set(llama.loc[llama["vidur_op"] == "mlp_act", "op"]) == {"swiglu"}
    assert set(phi.loc[phi["vidur_op"] == "mlp_act", "op"]) == {"gelu"}
    assert "add" in set(llama["vidur_op"]) and "add" not in set(phi["vidur_op"])
    norm = _op(compute, "meta-llama/Llama-2-7b-hf", "a40", 1, 128, "input_layernorm")
    assert (norm["rows"], norm["cols"], norm["pass"]) == (128, 4096, "fwd")


def test_network_rows(network, shared_data):
    assert set(network["family"]) == {"collective"}
    assert set(network["op"]) == {"all_reduce", "send_recv"}
    assert set(network["hardware"]) == {"a100-sxm-80gb", "h100-sxm", "a100-pcie-80gb", "h100-pcie", "a40"}
    assert network["runtime_us"].notna().all() and (network["bytes"] > 0).all()
    dgx = network[network["group"] == "vidur-network/a100_dgx"]
    two_nodes = dgx[(dgx["ranks"] == 16)]
    assert len(two_nodes) > 0 and (two_nodes["ranks_per_node"] == 8).all()
    raw = pd.read_csv(shared_data / vidur_network.NETWORK_DIR / "h100_dgx/all_reduce.csv", index_col=0)
    first = raw.iloc[0]
    match = network[(network["group"] == "vidur-network/h100_dgx") & (network["op"] == "all_reduce")
                    & (network["bytes"] == first["size"]) & (network["ranks"] == first["num_workers"])
                    & (network["ranks_per_node"] == first["devices_per_node"])]
    assert match["runtime_us"].iloc[0] == pytest.approx(first["time_stats.all_reduce.median"] * 1000.0)


def test_history_table_is_an_all_reduce_consistent_with_the_dgx_table(network):
    history = network[(network["group"] == "vidur-history/a100") & (network["ranks"] == 8)]
    assert len(history) > 0 and (history["op"] == "all_reduce").all()
    row = history[history["num_tokens"] == history["num_tokens"].max()].iloc[0]
    assert row["bytes"] % (2 * row["num_tokens"]) == 0
    dgx = network[(network["group"] == "vidur-network/a100_dgx") & (network["op"] == "all_reduce")
                  & (network["ranks"] == 8) & (network["ranks_per_node"] == 8)]
    # Around 10 MB, launch overheads are small next to the transfer: both tables must agree within 25%.
    near = lambda f: f.iloc[np.argsort(np.abs(f["bytes"].to_numpy() - 1e7))[:5]]["runtime_us"].median()
    assert near(history) == pytest.approx(near(dgx), rel=0.25)
