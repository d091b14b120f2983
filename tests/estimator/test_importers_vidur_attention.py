"""Vidur's historical A100 FlashAttention table: row counts, mapped shapes, causal FLOPs over a KV cache, bad input."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.data import load_measurements, source_files
from stepcast.estimator.importers import DataImportError, vidur_attention
from stepcast.estimator.workload import causal_fraction, work

COMMIT = "e2d00e9afba96cec9f0e7ea560bbfc4a539fae6a"
RELATIVE = vidur_attention.HISTORY_DIR / COMMIT / "data/profiling/a100/attention.csv"


@pytest.fixture(scope="module")
def attention(shared_data: Path) -> pd.DataFrame:
    return vidur_attention.load(shared_data)


@pytest.fixture(scope="module")
def raw(shared_data: Path) -> pd.DataFrame:
    return pd.read_csv(shared_data / RELATIVE)


def _row(frame: pd.DataFrame, vidur_op: str, **shape) -> pd.Series:
    mask = frame["vidur_op"] == vidur_op
    for column, value in shape.items():
        mask &= frame[column] == value
    rows = frame[mask]
    assert len(rows) == 1, (vidur_op, shape, len(rows))
    return rows.iloc[0]


def test_the_file_is_found_and_every_attention_row_imported(attention, shared_data):
    assert vidur_attention.input_files(shared_data) == [shared_data / RELATIVE]
    assert shared_data / RELATIVE in source_files("vidur", shared_data)  # part of the vidur cache key
    assert attention["vidur_op"].value_counts().to_dict() == {"attn_decode": 10240, "attn_prefill": 4418}
    assert set(attention["family"]) == {"attention"} and set(attention["pass"]) == {"fwd"}
    assert set(attention["hardware"]) == {"a100-sxm-80gb"} and set(attention["dtype"]) == {"fp16"}
    assert set(attention["source"]) == {"vidur"} and set(attention["backend"]) == {"flash"}
    assert set(attention["group"]) == {"meta-llama/Llama-2-70b-hf"} and set(attention["tp"]) == {2}
    assert (attention["heads_q"] == 32).all() and (attention["heads_kv"] == 4).all()
    assert (attention["head_dim"] == 128).all()
    assert (attention["runtime_us"] > 0).all()
    prefill = attention[attention["vidur_op"] == "attn_prefill"]
    decode = attention[attention["vidur_op"] == "attn_decode"]
    assert (prefill["causal"] == True).all() and (prefill["batch"] == 1).all()  # noqa: E712 (object column)
    assert (decode["causal"] == False).all() and (decode["seq_q"] == 1).all()  # noqa: E712
    assert (prefill["seq_kv"] >= prefill["seq_q"]).all() and prefill["seq_kv"].max() == 4096


def test_reference_rows(attention, raw):
    prefill = _row(attention, "attn_prefill", seq_q=512, seq_kv=2048 + 512)
    assert (prefill["batch"], prefill["heads_q"], prefill["heads_kv"], prefill["head_dim"]) == (1, 32, 4, 128)
    assert prefill["causal"] == True and prefill["num_tokens"] == 512  # noqa: E712
    point = raw[raw["is_prefill"] & (raw["prefill_chunk_size"] == 512) & (raw["kv_cache_size"] == 2048)]
    assert prefill["runtime_us"] == pytest.approx(point["time_stats.attn_prefill.median"].iloc[0] * 1000.0)

    decode = _row(attention, "attn_decode", batch=16, seq_kv=2048 + 1)  # 2048 cached keys + the new token's
    assert (decode["seq_q"], decode["heads_q"], decode["heads_kv"], decode["causal"]) == (1, 32, 4, False)
    point = raw[~raw["is_prefill"] & (raw["batch_size"] == 16) & (raw["kv_cache_size"] == 2048)]
    assert decode["runtime_us"] == pytest.approx(point["time_stats.attn_decode.median"].iloc[0] * 1000.0)
    # Decode reads the whole cache: it must stay below the A100-80GB's 2.04 TB/s.
    bytes_per_s = work("attention", decode.to_frame().T).bytes[0] / (decode["runtime_us"] * 1e-6)
    assert 0.2e12 < bytes_per_s < 2.04e12


def test_prefill_flops_over_a_kv_cache_by_hand(attention):
    # A 512-token chunk after 2048 cached tokens: query i sees 2048 + i + 1 keys (bottom-right causal mask).
    row = _row(attention, "attn_prefill", seq_q=512, seq_kv=2560)
    scores = sum(2048 + i + 1 for i in range(512))
    assert scores == 512 * 2048 + 512 * 513 // 2
    expected = 4 * 32 * 128 * scores  # QK^T and PV: 2 FLOPs per multiply-add each, per head, per head_dim
    assert work("attention", row.to_frame().T).flops[0] == pytest.approx(expected, rel=1e-12)
    tflops = expected / (row["runtime_us"] * 1e-6) / 1e12
    assert 20 < tflops < 312  # fp16 tensor-core peak of an A100


@pytest.mark.parametrize("seq_q, seq_kv", [(1, 1), (1, 4096), (64, 64), (512, 2560), (7, 3), (100, 1), (33, 32)])
def test_causal_fraction_counts_a_bottom_right_mask(seq_q, seq_kv):
    query, key = np.arange(seq_q)[:, None], np.arange(seq_kv)[None, :]
    kept = (key <= query + (seq_kv - seq_q)).sum() / (seq_q * seq_kv)
    got = causal_fraction(np.array([seq_q], float), np.array([seq_kv], float), np.array([True]))
    assert got[0] == pytest.approx(kept, rel=1e-12)
    assert causal_fraction(np.array([seq_q], float), np.array([seq_kv], float), np.array([False]))[0] == 1.0


def _small_copy(raw: pd.DataFrame, root: Path) -> Path:
    """A shared-data folder holding the first and last 100 rows of the table (decode and prefill rows)."""
    path = root / RELATIVE
    path.parent.mkdir(parents=True)
    pd.concat([raw.head(100), raw.tail(100)]).to_csv(path, index=False)
    return path


def test_registered_under_vidur_and_cached(raw, tmp_path):
    root = tmp_path / "shared"
    _small_copy(raw, root)
    rows = load_measurements(sources=["vidur"], root=root, cache_dir=tmp_path / "cache")
    assert rows["vidur_op"].value_counts().to_dict() == {"attn_decode": 100, "attn_prefill": 100}
    assert len(list((tmp_path / "cache").glob("vidur-*.parquet"))) == 1


@pytest.mark.parametrize("column, change", [
    ("kv_cache_size", lambda f: f.drop(columns="kv_cache_size")),
    ("time_stats.attn_prefill.median", lambda f: f.drop(columns="time_stats.attn_prefill.median")),
    ("is_prefill", lambda f: f.assign(is_prefill="maybe")),
    ("num_tensor_parallel_workers", lambda f: f.assign(num_tensor_parallel_workers=3)),
    ("attention_backend", lambda f: f.assign(attention_backend="AttentionBackend.FLASHINFER")),
])
def test_bad_input_is_one_line_naming_file_and_column(raw, tmp_path, column, change):
    path = _small_copy(raw, tmp_path)
    change(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(DataImportError) as info:
        vidur_attention.load(tmp_path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and f"column '{column}'" in message
