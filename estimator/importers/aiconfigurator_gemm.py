"""aiconfigurator's Linear GEMMs: ``<gpu>/gemm/<framework>/<version>/gemm_perf.parquet`` (NVIDIA, Apache-2.0).

Columns ``framework, version, device, op_name, kernel_source, gemm_dtype, m, n, k, latency``; the op is a Linear
layer, y[m, n] = x[m, k] @ W[n, k]^T, **latency in milliseconds**. Imported: the ``bfloat16`` rows, which every
framework runs through ``torch.nn.functional.linear`` on cuBLAS/cuBLASLt (kernel_source
``torch.nn.functional.linear``, ``sglang_torch_linear``, ``sglang``, ``vllm_default``, ``torch_flow``: the
frameworks' unquantised Linear method); the fp8 / fp8-block / nvfp4 / int8 / int4 rows are CUTLASS, DeepGEMM or
FlashInfer kernels that a PyTorch training step does not call (torch's fp8 path is cuBLASLt ``_scaled_mm``), so
they would teach the fp8 rows a different library.

Rows with m = 0 (TensorRT-LLM 1.2.0rc5 timed empty GEMMs on the H100: 0.5 us, launch only, no work) are dropped.
Rows: family ``gemm``, m, n, k as given, batch 1, dtype ``bf16``, ``runtime_us`` the median over the framework
releases that timed the shape (``estimator.importers.aiconfigurator``), ``gemm_op`` ``linear``, ``backend``
``cublas``. ``group`` is ``aiconfigurator-gemm/nk<i>``: the (n, k) pair's fixed set among five, so held-out splits
hold out whole weight shapes on every device at once (a Vidur model's weights are a handful of (n, k) pairs too).

Timing method (SOURCE.md): CUDA graphs around repeated launches with the weights rotated across copies so that
they are not served from L2: every call reads its weight from HBM, as a layer's weight is read once per pass in a
training step, and no launch gap is counted (the emulator adds host and launch gaps itself).

Which source stands for "a kernel inside a training step": this project's profiler (``datasets/``: CUDA events per
op with L2 flushed before each repetition, so cold weights too) and, on devices it has not measured, these rows,
unscaled: both time the kernel alone with its weight coming from HBM, which is how a training step meets it.
Vidur is not reconciled to them by an offset. On the 23 (n, k) pairs both measured on the H100 (6,003 Vidur rows,
aiconfigurator interpolated in log m), Vidur's in-model timings with an older cuBLAS are slower by a median 1.00x at
m <= 16, 1.05x at 16-64, 1.22x at 64-256, 1.37x at 256-1024 and 1.13x at 1024-4096, with a spread of 0.09-0.20
within each range: kernel choices, not a timing offset. aiconfigurator's own time at the same (n, k), times that
offset per log2 m fitted on the same rows, predicts Vidur at 9.4 % mean APE, worse than a model trained on three
other Vidur models (6.7 %); adding these rows to the Vidur H100 folds scores 7.0
(``python -m benchmarks.estimator.accuracy --suites vidur``, column ``xgboost(+aiconfigurator)``). The ``source`` column
keeps each row's origin for a model that takes it as a feature.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.aiconfigurator import SOURCE, catalog_tables, median_rows, shape_set, tables
from stepcast.estimator.importers.common import finalize
from stepcast.errors import InputError

REQUIRED = ("kernel_source", "gemm_dtype", "m", "n", "k", "latency")
#: the one dtype whose rows are plain torch Linear (cuBLAS)
TORCH_DTYPE = "bfloat16"
#: the tables' ``gemm_dtype`` -> the schema's dtype, for :func:`load`'s ``gemm_dtype``: the per-tensor ``fp8`` rows
#: (``torch_flow``'s ``torch._scaled_mm``, vLLM's and SGLang's CUTLASS scaled-mm) are read only as evidence of what
#: the fp8 datapath sustains within its board's power (``estimator.power_floor``), not as training rows
DTYPES = {"bfloat16": "bf16", "fp8": "fp8_e4m3"}


def input_files(root: Path) -> list[Path]:
    return tables(root, "gemm", "gemm_perf.parquet")


def load(root: Path, gemm_dtype: str = TORCH_DTYPE) -> pd.DataFrame:
    """Every Linear GEMM of ``gemm_dtype`` (a key of :data:`DTYPES`; the training rows are the bf16 ones) of a
    catalog device, one row per (device, m, n, k)."""
    if gemm_dtype not in DTYPES:
        raise InputError(f"gemm_dtype '{gemm_dtype}': expected one of {', '.join(DTYPES)}")
    parts = []
    for path, raw, hardware in catalog_tables(input_files(root), root, REQUIRED):
        raw = raw[(raw["gemm_dtype"].astype(str) == gemm_dtype) & (raw[["m", "n", "k"]] >= 1).all(axis=1)]
        parts.append(raw[["m", "n", "k", "latency"]].assign(hardware=hardware, table=str(path)))
    if not parts:
        return finalize(pd.DataFrame(), SOURCE)
    rows = median_rows(pd.concat(parts, ignore_index=True), ["hardware", "m", "n", "k"])
    rows = rows.assign(family="gemm", dtype=DTYPES[gemm_dtype], batch=1, runtime_us=rows["latency"] * 1000.0,
                       gemm_op="linear", backend="cublas",
                       group="aiconfigurator-gemm/nk" + pd.Series(shape_set(rows["n"], rows["k"])).astype(str))
    return finalize(rows.drop(columns="latency"), SOURCE)


#: the kernel source of TensorRT-LLM's PyTorch flow: its per-tensor FP8 Linear quantises the input per tensor
#: (``quantize_e4m3_per_tensor``: the input's amax, then its cast; the collector loads no input scale) and calls
#: ``cublas_scaled_mm``, the cuBLASLt FP8 GEMM that torch's ``_scaled_mm`` runs for tensorwise scales
CUBLASLT_FP8_SOURCE = "torch_flow"


def cublaslt_fp8(root: Path) -> pd.DataFrame:
    """The cuBLASLt FP8 GEMMs of TensorRT-LLM's PyTorch flow, their input quantisation taken off: rows as
    :func:`load`'s (dtype ``fp8_e4m3``) plus ``quantize_us``, what was taken off. Never training rows: a check of the
    fp8 predictions the bf16-trained models extrapolate (``python -m benchmarks.estimator.accuracy --suites fp8``).

    Each row's quantisation costs what it costs at that (device, m, k) whatever n is: the table's narrowest GEMM
    there (n of a few dozen, whose GEMM only reads its input) is that quantisation plus an fp8 read of the input,
    half the bf16 row's time at that shape, so quantize = fp8(m, n_min, k) - bf16(m, n_min, k) / 2 (on the H100 about
    0.15 ms per 64 M elements, 5 bytes each at 2.1 TB/s: two reads of the bf16 input and a write). Shapes without a
    bf16 row at their narrowest n, or whose GEMM would come out at no time, are left out."""
    parts = []
    for path, raw, hardware in catalog_tables(input_files(root), root, REQUIRED):
        raw = raw[(raw["kernel_source"].astype(str) == CUBLASLT_FP8_SOURCE)
                  & raw["gemm_dtype"].astype(str).isin(("fp8", TORCH_DTYPE)) & (raw[["m", "n", "k"]] >= 1).all(axis=1)]
        parts.append(raw[["gemm_dtype", "m", "n", "k", "latency"]].assign(hardware=hardware, table=str(path)))
    if not parts:
        return finalize(pd.DataFrame(), SOURCE)
    rows = median_rows(pd.concat(parts, ignore_index=True), ["hardware", "gemm_dtype", "m", "n", "k"])
    fp8 = rows[rows["gemm_dtype"] == "fp8"].drop(columns="gemm_dtype")
    bf16 = rows[rows["gemm_dtype"] == TORCH_DTYPE].drop(columns="gemm_dtype").rename(columns={"latency": "bf16"})
    narrowest = fp8.loc[fp8.groupby(["hardware", "m", "k"])["n"].idxmin()].merge(bf16, on=["hardware", "m", "n", "k"])
    narrowest["quantize"] = narrowest["latency"] - narrowest["bf16"] / 2.0
    fp8 = fp8.merge(narrowest[["hardware", "m", "k", "quantize"]], on=["hardware", "m", "k"])
    fp8 = fp8[fp8["latency"] > fp8["quantize"]]
    fp8 = fp8.assign(family="gemm", dtype=DTYPES["fp8"], batch=1, gemm_op="linear", backend="cublas",
                     runtime_us=(fp8["latency"] - fp8["quantize"]) * 1000.0, quantize_us=fp8["quantize"] * 1000.0)
    return finalize(fp8.drop(columns=["latency", "quantize"]), SOURCE)
