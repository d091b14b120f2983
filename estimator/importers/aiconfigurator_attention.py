"""aiconfigurator's attention kernels: ``<gpu>/attention/<framework>/<version>/{context,generation}_attention_perf
.parquet`` (NVIDIA, Apache-2.0): the serving frameworks' paged-KV attention, forward only, **latency in ms**.

Columns ``batch_size, isl, num_heads, num_key_value_heads, head_dim, window_size, beam_width, attn_dtype,
kv_cache_dtype, step, kernel_source, latency`` (``window_size`` is absent from some tables: full attention).
Imported: bf16 queries over a bf16 KV cache, full attention (window 0), beam 1, mapped onto the attention family:

===========  =========================================================================================================
table        attention row
===========  =========================================================================================================
context      prefill: batch = batch_size, seq_q = seq_kv = isl, causal True
generation   decode: batch = batch_size, seq_q 1, seq_kv = isl + step (the cached tokens plus the new one), causal
             False (one query row sees every key, as ``estimator.importers.vidur_attention`` maps decode)
===========  =========================================================================================================

Both: heads_q = num_heads, heads_kv = num_key_value_heads, head_dim, pass ``fwd``, dtype ``bf16``.

``backend`` from ``kernel_source`` and the GPU's architecture: vLLM's ``vllm_flash_attn`` / ``_fa3`` and SGLang's
``flash_attention`` / ``fa3`` are FlashAttention-3 on Hopper and FlashAttention-2 on Ampere (``fa3`` / ``fa2``);
``flashinfer``, ``vllm_flashinfer`` and ``torch_flow_flashinfer`` are FlashInfer. The attention family has no backend
column, so rows of two libraries at one shape would be two answers to one question: each device keeps the first of
fa3, fa2, flashinfer that it has (Hopper: FA3; A100: FA2; B200: FlashInfer). TensorRT-LLM's FMHA (``torch_flow``,
``trtllm_mha``, ``vllm_flashinfer_trtllm*``), FlashAttention-4 and Triton rows are not imported. Caveat for training
steps: torch's own SDPA flash backend is FlashAttention-2 on every GPU, so on Hopper these FA3 rows are the time of a
script that calls ``flash_attn_interface`` (FA3), faster than stock SDPA; forward only, no backward rows.

``runtime_us``: the median over framework releases of one (device, backend, shape) (the same library kernel, re-timed
by each release). ``group``: ``aiconfigurator-attention/heads<i>``, the (heads_q, heads_kv, head_dim) configuration's
fixed set among five, so held-out splits hold out whole head configurations. Timed under CUDA graphs like the GEMMs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.importers.aiconfigurator import (SOURCE, catalog_tables, median_rows, shape_set,
                                                tables)
from stepcast.estimator.importers.common import finalize
from stepcast.profiling.hardware import lookup

REQUIRED = ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
            "kv_cache_dtype", "step", "latency")
FLASH_SOURCES = frozenset({"vllm_flash_attn", "vllm_flash_attn_fa3", "flash_attention", "fa3"})
FLASHINFER_SOURCES = frozenset({"flashinfer", "vllm_flashinfer", "torch_flow_flashinfer"})
#: per device, the first of these backends it has is kept
PREFERENCE = ("fa3", "fa2", "flashinfer")
SHAPE = ["batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal"]


def input_files(root: Path) -> list[Path]:
    return tables(root, "attention", "context_attention_perf.parquet") + \
        tables(root, "attention", "generation_attention_perf.parquet")


def backend_of(kernel_source: pd.Series, architecture: str) -> pd.Series:
    """fa3 / fa2 / flashinfer, or None for a library this importer leaves out."""
    source = kernel_source.astype(str)
    flash = "fa3" if architecture in {"hopper", "blackwell"} else "fa2"
    return pd.Series(np.where(source.isin(FLASH_SOURCES), flash,
                              np.where(source.isin(FLASHINFER_SOURCES), "flashinfer", None)), index=source.index)


def load(root: Path) -> pd.DataFrame:
    parts = []
    for path, raw, hardware in catalog_tables(input_files(root), root, REQUIRED):
        window = raw["window_size"] if "window_size" in raw.columns else 0
        beam = raw["beam_width"] if "beam_width" in raw.columns else 1
        keep = ((raw["attn_dtype"].astype(str) == "bfloat16") & (raw["kv_cache_dtype"].astype(str) == "bfloat16")
                & (window == 0) & (beam == 1))
        raw = raw[keep]
        decode = path.name.startswith("generation")
        isl = raw["isl"].to_numpy(np.int64)
        parts.append(pd.DataFrame({
            "hardware": hardware, "backend": backend_of(raw["kernel_source"], lookup(hardware).architecture),
            "batch": raw["batch_size"].to_numpy(np.int64), "heads_q": raw["num_heads"].to_numpy(np.int64),
            "heads_kv": raw["num_key_value_heads"].to_numpy(np.int64), "head_dim": raw["head_dim"].to_numpy(np.int64),
            "seq_q": np.ones_like(isl) if decode else isl,
            "seq_kv": isl + raw["step"].to_numpy(np.int64) if decode else isl,
            "causal": not decode, "latency": raw["latency"].to_numpy(np.float64), "table": str(path)}))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if not len(frame):
        return finalize(pd.DataFrame(), SOURCE)
    frame = frame[frame["backend"].notna()]
    rank = frame["backend"].map({b: i for i, b in enumerate(PREFERENCE)})
    frame = frame[rank == rank.groupby(frame["hardware"]).transform("min")]
    rows = median_rows(frame, ["hardware", "backend"] + SHAPE)
    group = shape_set(rows["heads_q"], rows["heads_kv"], rows["head_dim"])
    rows = rows.assign(family="attention", dtype="bf16", runtime_us=rows["latency"] * 1000.0, **{"pass": "fwd"},
                       group="aiconfigurator-attention/heads" + pd.Series(group).astype(str))
    return finalize(rows.drop(columns="latency"), SOURCE)
