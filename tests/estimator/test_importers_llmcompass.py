"""LLMCompass matmul table: units and the M, N, K reading checked against its own throughput column."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stepcast.estimator.importers import llmcompass


def test_matmul_rows_reproduce_the_published_throughput(shared_data: Path):
    rows = llmcompass.load(shared_data)
    raw = pd.read_csv(shared_data / llmcompass.MATMUL, header=None, skipinitialspace=True)
    assert len(rows) == len(raw) > 10
    assert (rows["dtype"] == "fp16").all() and set(rows["hardware"]) == {"a100-sxm-80gb"}
    tflops = 2 * rows["m"] * rows["n"] * rows["k"] / (rows["runtime_us"] * 1e-6) / 1e12
    published = raw[4].str.strip().str.removesuffix("Tflops").astype(float)
    assert tflops.to_numpy() == pytest.approx(published.to_numpy(), rel=0.01)
