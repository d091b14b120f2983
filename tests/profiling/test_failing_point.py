"""A point that cannot run is recorded as failed with its reason, and a later run does not retry it.
(The fixtures measure on the CPU, where these failures are real.)"""
from __future__ import annotations

from stepcast.profiling.runner import run
from stepcast.profiling.store import FamilyStore


def test_unsupported_backend_is_recorded_and_skipped(tiny_config, tmp_path):
    # The memory-efficient and cuDNN SDPA kernels do not exist on a CPU: the points fail for real.
    cfg = tiny_config("families=[attention]", "attention.grid.0.backend=[efficient,math]", "attention.max_points=8")
    first = run(cfg)
    assert first.families["attention"].measured == 8
    frame = FamilyStore(first.output, "attention").read()
    failed = frame[frame["status"] == "failed"]
    assert set(failed["backend"]) == {"efficient"} and len(failed) == 4
    assert failed["error"].str.contains("No viable backend").all()
    assert failed["median_us"].isna().all() and (failed["reps"] == 0).all()
    ok = frame[frame["status"] == "ok"]
    assert set(ok["backend"]) == {"math"} and (ok["median_us"] > 0).all() and ok["error"].isna().all()

    second = run(cfg)
    assert second.families["attention"].measured == 0
    assert second.families["attention"].already == 8


def test_tf32_on_a_cpu_is_a_failed_point_not_an_fp32_measurement(tiny_config):
    result = run(tiny_config("families=[gemm]", "gemm.grid.0.dtype=[fp32,tf32]"))
    frame = FamilyStore(result.output, "gemm").read()
    tf32 = frame[frame["dtype"] == "tf32"]
    assert len(tf32) and (tf32["status"] == "failed").all()
    assert tf32["error"].str.startswith("ValueError: tf32 is a CUDA math mode").all()
    assert (frame[frame["dtype"] == "fp32"]["status"] == "ok").all()
