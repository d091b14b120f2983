"""Suite 9 of benchmarks.estimator.accuracy: the shipped bundle's fp8 GEMMs against cuBLASLt's, per GPU, large GEMMs
only."""
from __future__ import annotations

import pytest

from benchmarks.estimator.accuracy import suite_fp8
from tests.estimator.test_importers_aiconfigurator import H100, gemm, write


def test_the_fp8_suite_scores_the_large_gemms_against_their_time_without_quantisation(tmp_path):
    # one large GEMM (16384 x 4096 x 4096, 5.5e11 FLOPs) at 1,000 TFLOP/s once its 0.2 ms quantisation is off, and a
    # small one left out (most of it is quantisation)
    flops = 2.0 * 16384 * 4096 * 4096
    rows = [gemm(H100, "fp8", 16384, 32, 4096, 0.2 + 0.05 / 2), gemm(H100, "bfloat16", 16384, 32, 4096, 0.05),
            gemm(H100, "fp8", 16384, 4096, 4096, 0.2 + flops / 1e15 * 1e3), gemm(H100, "fp8", 64, 64, 64, 0.01)]
    write(tmp_path, "h100_sxm/gemm/trtllm/1.0/gemm_perf.parquet", rows)
    out = suite_fp8(tmp_path)
    assert out[["hardware", "n"]].values.tolist() == [["h100-sxm", 1]]
    assert out["tflops_measured"].iat[0] == pytest.approx(1000.0)
    predicted = out["tflops_predicted"].iat[0]
    assert out["signed_median"].iat[0] == pytest.approx((1000.0 / predicted - 1.0) * 100.0)
