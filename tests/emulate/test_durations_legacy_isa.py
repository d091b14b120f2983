"""emulate.sim.durations: an attention kernel built for an older SM generation (FlashAttention-2 on Hopper) takes the
estimator's prediction times the tensor-rate factor of its instructions (estimator.legacy_isa)."""
from __future__ import annotations

import pandas as pd
import pytest

from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.estimator.legacy_isa import time_factor
from stepcast.estimator.workload import attention
from stepcast.profiling.hardware import lookup
from tests.emulate.test_durations_triton import attention_estimator

SPEC = {"family": "attention", "dtype": "bf16", "batch": 2, "heads_q": 32, "heads_kv": 8, "seq_q": 8192,
        "seq_kv": 8192, "head_dim": 128, "causal": True, "pass": "fwd"}


def attention_times(name: str, hardware: str) -> float:
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    b.kernel(stream=1, name=name, spec=dict(SPEC))
    b.device_sync()
    b.iteration(1, end=True)
    result = simulate([b.doc()], hardware, estimator=attention_estimator())
    kernel = next(i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "kernel")
    return float(result.durations.us[0][kernel])


def test_flashattention2_on_hopper_takes_the_tensor_rate_factor_and_native_kernels_keep_the_prediction():
    fa2 = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, false, true>(Params)"
    work = attention(pd.DataFrame.from_records([SPEC]))
    factor = float(time_factor(work.flops, work.bytes, (8, 0), lookup("h100-sxm"), "bf16")[0])
    assert factor > 1.5
    assert attention_times(fa2, "h100-sxm") == pytest.approx(1000.0 * factor, rel=1e-6)
    assert attention_times("void flash::FlashAttnFwdSm90<T>(P)", "h100-sxm") == 1000.0
    assert attention_times(fa2, "a100-sxm-80gb") == 1000.0          # Ampere's own build
