"""Vidur's FlashAttention timings: ``vidur/_history/<commit>/data/profiling/<gpu>/attention.csv`` (kept from Vidur
commit e2d00e9, May 2024; the current per-model ``attention.csv`` files are not in the shared data).

Each row is one call of sarathi-serve's ``FlashAttentionWrapper.forward`` as profiled by Vidur
(``vidur/profiling/attention/attention_wrapper.py``): fp16, a paged KV cache (``block_size`` tokens per block),
``flash_attn_with_kvcache`` with ``causal=True``, timed with Kineto (``profile_method``). Times are
``time_stats.<op>.{min,max,mean,median,std}`` in **milliseconds**; the model is given by ``n_embd``, ``n_q_head``,
``n_kv_head`` and ``num_tensor_parallel_workers`` (P): each GPU runs n_q_head / P query heads and n_kv_head / P KV
heads of head_dim = n_embd / n_q_head.

``kv_cache_size`` (C) is the number of tokens already in the cache; the new tokens' keys and values are appended to
it and attended to as well, so the kernel sees C + (new tokens) keys:

============  ================  =======================================================================================
Vidur op      rows              attention row
============  ================  =======================================================================================
attn_prefill  ``is_prefill``    batch 1 (``batch_size``, always 1), seq_q = ``prefill_chunk_size`` (Q), seq_kv = C + Q,
              True              causal True: the mask is bottom-right aligned, query i sees C + i + 1 keys
                                (``estimator.workload.causal_fraction``)
attn_decode   ``is_prefill``    batch = ``batch_size`` (B sequences, one new token each), seq_q 1, seq_kv = C + 1
              False             (sarathi passes cache_seqlens = C plus the new key), causal False (one query row sees
                                every key, so the causal flag the kernel gets changes nothing)
============  ================  =======================================================================================

All rows: heads_q = n_q_head / P, heads_kv = n_kv_head / P, head_dim = n_embd / n_q_head, pass fwd, dtype fp16,
``backend`` flash, ``vidur_op`` the Vidur op, ``tp`` = P, ``num_tokens`` the query tokens (Q, or B), ``runtime_us``
the median x 1000; rows without a positive median are dropped. ``attn_input_reshape`` and ``attn_output_reshape``
are skipped: neither is attention. The input reshape is a view (0 ms in every row); the output reshape is the
``copy_`` of the result into the layer's output buffer (1 - 44 us), an elementwise copy of query tokens x heads_q x
head_dim elements whose times at these sizes are mostly launch overhead and the 1 us rounding.

Hardware: the folder names the GPU type only; ``a100`` -> ``a100-sxm-80gb`` as in ``estimator.importers.vidur``.
``group`` (what held-out splits hold out) and ``model`` are the model whose dims the file records. The file does not
name it: (n_embd 8192, n_q_head 64, n_kv_head 8, max_model_len 4096) is ``meta-llama/Llama-2-70b-hf`` (Llama-3-70B has
the same heads but an 8192 context), the group name the mlp.csv rows of that model use. A config this module does not
know gets ``vidur-attention/<gpu>/<n_embd>-<n_q_head>-<n_kv_head>`` and no model. The times are Kineto's, whole
microseconds: short decode kernels (9 - 20 us) carry a +-1 us rounding.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.importers.common import DataImportError, finalize, read_csv

SOURCE = "vidur"
HISTORY_DIR = Path("vidur/_history")
HARDWARE = {"a100": "a100-sxm-80gb"}
BACKENDS = {"AttentionBackend.FLASH_ATTENTION": "flash"}
#: (n_embd, n_q_head, n_kv_head, max_model_len) -> the model those dims belong to
MODELS = {(8192, 64, 8, 4096): "meta-llama/Llama-2-70b-hf"}
OPS = ("attn_prefill", "attn_decode")
SHAPE_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "max_model_len", "batch_size",
                 "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend")
REQUIRED = SHAPE_COLUMNS + tuple(f"time_stats.{op}.median" for op in OPS)


def input_files(root: Path) -> list[Path]:
    return sorted(p for p in (Path(root) / HISTORY_DIR).glob("*/data/profiling/*/attention.csv")
                  if p.parent.name in HARDWARE)


def load(root: Path) -> pd.DataFrame:
    """Every historical attention.csv under ``root`` (the shared data folder) as attention rows."""
    frames = [f for f in (load_file(path) for path in input_files(root)) if len(f)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def _ints(raw: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(raw[column], errors="coerce")
    if values.isna().any() or (values < 0).any() or (values % 1 != 0).any():
        raise DataImportError(f"{path}: column '{column}': expected non-negative integers")
    return values.to_numpy(np.int64)


def load_file(path: Path) -> pd.DataFrame:
    """Rows of one attention.csv (not yet finalised); the GPU comes from its folder."""
    gpu = Path(path).parent.name
    if gpu not in HARDWARE:
        raise DataImportError(f"{path}: GPU folder '{gpu}' is not one of {', '.join(HARDWARE)}")
    raw = read_csv(path, REQUIRED)
    embd, heads_q, heads_kv, tp, max_len, batch, chunk, cache = (
        _ints(raw, c, path) for c in SHAPE_COLUMNS[:8])
    flags = raw["is_prefill"].astype(str).str.lower()
    if not flags.isin(["true", "false"]).all():
        raise DataImportError(f"{path}: column 'is_prefill': expected True or False")
    prefill = flags.eq("true").to_numpy()
    unknown = set(raw["attention_backend"].astype(str)) - set(BACKENDS)
    if unknown:
        raise DataImportError(f"{path}: column 'attention_backend': '{sorted(unknown)[0]}' is not one of "
                              f"{', '.join(BACKENDS)}")
    if np.any(tp == 0) or np.any(heads_q == 0) or np.any(heads_q % tp) or np.any(heads_kv % tp) \
            or np.any(embd % np.maximum(heads_q, 1)):
        raise DataImportError(f"{path}: column 'num_tensor_parallel_workers': does not divide the model's heads/dims")
    if np.any(prefill & (batch != 1)) or np.any(batch == 0):
        raise DataImportError(f"{path}: column 'batch_size': a prefill row is one sequence, a decode row at least one")
    if np.any(prefill == (chunk == 0)):
        raise DataImportError(f"{path}: column 'prefill_chunk_size': positive in prefill rows, 0 in decode rows")

    median = np.where(prefill, pd.to_numeric(raw["time_stats.attn_prefill.median"], errors="coerce"),
                      pd.to_numeric(raw["time_stats.attn_decode.median"], errors="coerce"))
    dims = list(zip(embd.tolist(), heads_q.tolist(), heads_kv.tolist(), max_len.tolist()))
    model = [MODELS.get(d) for d in dims]
    group = [m or f"vidur-attention/{gpu}/{d[0]}-{d[1]}-{d[2]}" for m, d in zip(model, dims)]
    return pd.DataFrame({
        "family": "attention",
        "batch": np.where(prefill, 1, batch),
        "heads_q": heads_q // tp,
        "heads_kv": heads_kv // tp,
        "seq_q": np.where(prefill, chunk, 1),
        "seq_kv": np.where(prefill, cache + chunk, cache + 1),
        "head_dim": embd // heads_q,
        "causal": prefill,
        "pass": "fwd",
        "dtype": "fp16",
        "hardware": HARDWARE[gpu],
        "runtime_us": median * 1000.0,
        "group": group,
        "backend": raw["attention_backend"].astype(str).map(BACKENDS).to_numpy(),
        "tp": tp,
        "num_tokens": np.where(prefill, chunk, batch),
        "model": model,
        "vidur_op": np.where(prefill, "attn_prefill", "attn_decode"),
    })
