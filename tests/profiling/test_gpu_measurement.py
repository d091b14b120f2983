"""On a CUDA GPU: CUDA-event timing, TF32 and fp8 GEMMs, recorded kernels (skipped without a GPU)."""
from __future__ import annotations

import json

import pytest
import torch

from stepcast.profiling.runner import run
from stepcast.profiling.store import FamilyStore

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_gemm_on_gpu_records_kernels(tiny_config):
    cfg = tiny_config("families=[gemm]", "gemm.grid.0.dtype=[fp32,tf32,bf16,fp8_e4m3]", "gemm.grid.0.m=[32,64]",
                      "gemm.grid.0.k=[32,64]", "+gemm.grid.0.trans_b=true", "gemm.max_points=16",
                      "measure.record_kernels=true", "threads=null", "hardware=auto")
    result = run(cfg)
    frame = FamilyStore(result.output, "gemm").read()
    assert (frame["status"] == "ok").all(), frame[["dtype", "error"]]
    assert set(frame["dtype"]) == {"fp32", "tf32", "bf16", "fp8_e4m3"}
    assert (frame["timing"] == "cuda_event").all() and frame["threads"].isna().all()
    kernels = [json.loads(k) for k in frame["kernels"]]
    assert all(k and {"name", "grid", "block", "duration_us"} <= set(k[0]) for k in kernels)
