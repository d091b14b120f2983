"""Vidur's per-operator LLM-layer timings (``vidur/data/profiling/compute/<gpu>/<org>/<model>/mlp.csv``).

Each row of an ``mlp.csv`` is one (``num_tokens``, ``num_tensor_parallel_workers``) point of one model; columns
``time_stats.<op>.{min,max,mean,median,std}`` are milliseconds. The shapes are not in the file: they follow from
the model dims in the row (``n_head``, ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``use_gated_mlp``) and
Vidur's profiled layer (``vidur/profiling/mlp/mlp_impl.py``: sarathi ``ColumnParallelLinear`` /
``RowParallelLinear``, fp16 weights). With T = num_tokens, P = TP degree, d = n_embd / n_head:

==========================  ========================================================================================
Vidur op                    kernel row
==========================  ========================================================================================
attn_pre_proj (QKV)         gemm m=T, n=(n_head + 2 n_kv_head) d / P, k=n_embd
attn_post_proj (O)          gemm m=T, n=n_embd, k=n_head d / P            (row-parallel: k is split)
mlp_up_proj                 gemm m=T, n=2 n_expanded_embd / P (gated: up and gate fused), else n_expanded_embd / P,
                            k=n_embd
mlp_down_proj               gemm m=T, n=n_embd, k=n_expanded_embd / P
mlp_act                     elementwise ``swiglu`` (gated: SiluAndMul) or ``gelu``; numel = T n_expanded_embd / P
                            (the output; SiluAndMul reads twice that)
attn_rope                   elementwise ``rope``; numel = T (n_head + n_kv_head) d / P (the q and k elements rotated)
input_layernorm,            norm ``rms_norm`` (``layer_norm`` for microsoft/phi-2), rows=T, cols=n_embd, fwd
post_attention_layernorm
add                         elementwise ``add``, numel = T n_embd (residual add; only for models with a
                            post-attention norm: phi-2's timer covers two adds of three tensors and is skipped)
emb                         skipped (a vocab-parallel gather with masking at P > 1: no family describes it)
==========================  ========================================================================================

Reference check: Llama-2-7B QKV at TP1 is m=T, n=12288, k=4096. ``runtime_us`` is the median (ms x 1000).

Hardware: the folder names the GPU type only. ``a100`` -> ``a100-sxm-80gb`` (Vidur's A100 SKU is the 80 GB part;
the form factor is not recorded, SXM is assumed), ``h100`` -> ``h100-sxm``, ``a40`` -> ``a40``. ``group`` is the
model (``meta-llama/Llama-2-7b-hf``), so held-out splits hold out whole model configurations.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.importers.common import DataImportError, finalize, read_csv

SOURCE = "vidur"
COMPUTE_DIR = Path("vidur/data/profiling/compute")
HARDWARE = {"a100": "a100-sxm-80gb", "h100": "h100-sxm", "a40": "a40"}
LAYER_NORM_MODELS = frozenset({"microsoft/phi-2"})
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
                 "num_tensor_parallel_workers")


def input_files(root: Path) -> list[Path]:
    return sorted((Path(root) / COMPUTE_DIR).glob("*/*/*/mlp.csv"))


def load(root: Path) -> pd.DataFrame:
    """Every mlp.csv under ``root`` (the shared data folder) as training rows."""
    frames = [load_file(path, root) for path in input_files(root)]
    frames = [f for f in frames if len(f)]
    return finalize(pd.concat(frames, ignore_index=True), SOURCE) if frames else finalize(pd.DataFrame(), SOURCE)


def load_file(path: Path, root: Path) -> pd.DataFrame:
    """Rows of one mlp.csv; the GPU and the model come from its folder path."""
    relative = Path(path).relative_to(Path(root) / COMPUTE_DIR)
    gpu, org, model = relative.parts[0], relative.parts[1], relative.parts[2]
    if gpu not in HARDWARE:
        raise DataImportError(f"{path}: GPU folder '{gpu}' is not one of {', '.join(HARDWARE)}")
    model_name = f"{org}/{model}"
    raw = read_csv(path, SHAPE_COLUMNS)
    T = raw["num_tokens"].to_numpy(np.int64)
    P = raw["num_tensor_parallel_workers"].to_numpy(np.int64)
    heads_q, heads_kv = raw["n_head"].to_numpy(np.int64), raw["n_kv_head"].to_numpy(np.int64)
    embd, ffn = raw["n_embd"].to_numpy(np.int64), raw["n_expanded_embd"].to_numpy(np.int64)
    gated = raw["use_gated_mlp"].astype(str).str.lower().eq("true").to_numpy()
    if np.any(embd % heads_q) or np.any(heads_q % P) or np.any(heads_kv % P) or np.any(ffn % P):
        raise DataImportError(f"{path}: column 'num_tensor_parallel_workers': does not divide the model's heads/dims")
    head_dim = embd // heads_q
    norm_op = "layer_norm" if model_name in LAYER_NORM_MODELS else "rms_norm"

    specs: list[tuple[str, dict]] = [
        ("attn_pre_proj", {"family": "gemm", "m": T, "n": (heads_q + 2 * heads_kv) * head_dim // P, "k": embd}),
        ("attn_post_proj", {"family": "gemm", "m": T, "n": embd, "k": heads_q * head_dim // P}),
        ("mlp_up_proj", {"family": "gemm", "m": T, "n": np.where(gated, 2, 1) * ffn // P, "k": embd}),
        ("mlp_down_proj", {"family": "gemm", "m": T, "n": embd, "k": ffn // P}),
        ("mlp_act", {"family": "elementwise", "op": np.where(gated, "swiglu", "gelu"), "numel": T * ffn // P}),
        ("attn_rope", {"family": "elementwise", "op": "rope", "numel": T * (heads_q + heads_kv) * head_dim // P}),
        ("input_layernorm", {"family": "norm", "op": norm_op, "rows": T, "cols": embd, "pass": "fwd"}),
        ("post_attention_layernorm", {"family": "norm", "op": norm_op, "rows": T, "cols": embd, "pass": "fwd"}),
    ]
    if model_name not in LAYER_NORM_MODELS:
        specs.append(("add", {"family": "elementwise", "op": "add", "numel": T * embd}))

    frames = []
    for vidur_op, columns in specs:
        median = f"time_stats.{vidur_op}.median"
        if median not in raw.columns:  # e.g. phi-2 has no post-attention norm, so no timer
            continue
        rows = pd.DataFrame({"vidur_op": vidur_op, **columns}, index=raw.index)
        if columns["family"] == "gemm":
            rows["batch"] = 1
            rows["gemm_op"] = "linear"
        rows["runtime_us"] = pd.to_numeric(raw[median], errors="coerce") * 1000.0
        frames.append(rows)
    if not frames:
        raise DataImportError(f"{path}: no 'time_stats.<op>.median' column of a known op")
    rows = pd.concat(frames)
    rows["hardware"] = HARDWARE[gpu]
    rows["dtype"] = "fp16"
    rows["group"] = model_name
    rows["model"] = model_name
    rows["tp"] = np.tile(P, len(frames))
    rows["num_tokens"] = np.tile(T, len(frames))
    return rows.reset_index(drop=True)
