"""LLMCompass's real-hardware fp16 GEMM table (``llmcompass/ae/figure5/ab/real_hardware/matmul_A100.csv``).

No header; columns ``M, N, K, latency, throughput`` with units as suffixes (``0.1900ms``, ``101.7124Tflops``);
2 M N K / latency reproduces the throughput column, so C[M, N] = A[M, K] @ B[K, N]: gemm m=M, n=N, k=K, batch 1,
fp16. 19 rows: a sanity set. The A100 variant is not recorded; ``a100-sxm-80gb`` is assumed (its 290 TFLOP/s
sustained points fit the SXM part's 312 TFLOP/s peak). The softmax/layernorm/gelu tables are throughputs with
uncertain units (see SOURCE.md) and are not imported.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.common import DataImportError, finalize, read_csv

SOURCE = "llmcompass"
MATMUL = Path("llmcompass/ae/figure5/ab/real_hardware/matmul_A100.csv")
HARDWARE = "a100-sxm-80gb"


def input_files(root: Path) -> list[Path]:
    path = Path(root) / MATMUL
    return [path] if path.is_file() else []


def load(root: Path) -> pd.DataFrame:
    frames = [load_matmul(path) for path in input_files(root)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def load_matmul(path: Path) -> pd.DataFrame:
    raw = read_csv(path, (), header=None, names=["M", "N", "K", "latency", "throughput"], skipinitialspace=True)
    latency = raw["latency"].astype(str).str.strip()
    if not latency.str.endswith("ms").all():
        raise DataImportError(f"{path}: column 4 (latency): expected values like '0.19ms'")
    return pd.DataFrame({
        "family": "gemm", "m": raw["M"], "n": raw["N"], "k": raw["K"], "batch": 1, "dtype": "fp16",
        "hardware": HARDWARE, "runtime_us": pd.to_numeric(latency.str[:-2], errors="coerce") * 1000.0,
        "group": "llmcompass/matmul_A100", "gemm_op": "matmul",
    })
