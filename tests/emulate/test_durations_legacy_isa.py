"""emulate.sim.durations: an attention kernel built for an older SM generation (FlashAttention-2 on Hopper) gets the
tensor-core time its instructions add over the estimator's prediction (estimator.legacy_isa)."""
from __future__ import annotations

import numpy as np
import pytest

from emulate.sim.synthetic import TraceBuilder
from emulate.simulate import simulate
from estimator.legacy_isa import extra_us
from profiling.hardware import lookup
from tests.emulate.test_durations_triton import attention_estimator

SPEC = {"family": "attention", "dtype": "bf16", "batch": 2, "heads_q": 32, "heads_kv": 8, "seq_q": 8192,
        "seq_kv": 8192, "head_dim": 128, "causal": True, "pass": "fwd"}
FLOPS = 4.0 * 2 * 32 * 8192 * 8192 * 128 * 0.5   # causal: half the score matrix


def attention_times(name: str, hardware: str) -> float:
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    b.kernel(stream=1, name=name, spec=dict(SPEC))
    b.device_sync()
    b.iteration(1, end=True)
    result = simulate([b.doc()], hardware, estimator=attention_estimator())
    kernel = next(i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "kernel")
    return float(result.durations.us[0][kernel])


def test_flashattention2_on_hopper_adds_its_flops_at_amperes_rate_and_native_kernels_keep_the_prediction():
    fa2 = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, false, true>(Params)"
    expected = float(extra_us(np.array([FLOPS], dtype=float), (8, 0), lookup("h100-sxm"), "bf16")[0])
    assert expected > 100.0
    assert attention_times(fa2, "h100-sxm") == pytest.approx(1000.0 + expected, rel=1e-3)
    assert attention_times("void flash::FlashAttnFwdSm90<T>(P)", "h100-sxm") == 1000.0
    assert attention_times(fa2, "a100-sxm-80gb") == 1000.0          # Ampere's own build
