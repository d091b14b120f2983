"""Fidelity of the simulator on real profiler traces (../shared/data): replaying the measured kernel durations
must reproduce each rank's measured ProfilerStep time within 3% (the whole-trace span where there are none); an op
call's kernels are timed as one op."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from stepcast.emulate.kineto_to_trace import convert_file
from stepcast.emulate.replay import replay
from stepcast.profiling.paths import shared_data_root

TOLERANCE = 0.03
PATTERNS = ("hta/tests/data/**/*.json.gz", "kineto/tb_plugin/samples/**/*.json.gz")


def real_traces() -> list[str]:
    root = shared_data_root()
    found = sorted({str(p.relative_to(root)) for pattern in PATTERNS for p in root.glob(pattern)})
    return found or ["<shared data absent>"]


@pytest.mark.shared_data
@pytest.mark.parametrize("relative", real_traces())
def test_measured_replay_matches_the_profiled_steps(shared_data: Path, relative: str):
    report = replay([shared_data / relative], durations="measured", quiet=True)
    for rank in report["per_rank"]:
        measured = rank["measured_iteration_time_ms"]
        error = (rank["iteration_time_ms"] - measured) / measured
        assert abs(error) < TOLERANCE, f"rank {rank['rank']}: predicted {rank['iteration_time_ms']:.3f} ms, " \
                                       f"measured {measured:.3f} ms ({error:+.1%})"


@pytest.mark.shared_data
def test_two_ranks_of_a_larger_job_replay_together(shared_data: Path):
    files = sorted((shared_data / "hta/tests/data/trace_filter").glob("sampled_rank-*.json.gz"))
    report = replay(files, durations="measured", quiet=True)
    assert report["world_size"] == 128 and report["ranks_simulated"] == 2
    assert report["collectives_matched"] == 0           # 126 ranks absent: recorded durations, no waiting
    for rank in report["per_rank"]:
        assert rank["iteration_time_ms"] == pytest.approx(rank["measured_iteration_time_ms"], rel=TOLERANCE)


@pytest.mark.shared_data
def test_predicted_replay_runs_on_other_hardware(shared_data: Path):
    trace = shared_data / "hta/tests/data/trace_diff/control/control.json.gz"
    report = replay([trace], durations="predicted", hardware="h100-sxm", estimator="roofline", quiet=True)
    assert report["hardware"] == "h100-sxm" and report["durations"] == "predicted"
    assert math.isfinite(report["iteration_time_ms"]) and report["iteration_time_ms"] > 0
    assert report["fallback_kernels"] > 0            # the roofline is not a learned model: every kernel counts
    assert report["per_rank"][0]["measured_iteration_time_ms"] > 0


@pytest.mark.shared_data
def test_a_split_k_gemms_reduction_is_timed_with_its_gemm(shared_data: Path):
    """HTA's control trace (A100): cuBLAS split-K GEMMs launch a reduction kernel in the same aten::mm call. Only
    the GEMM kernel carries the spec; the reduction is an op_part, and the GEMM's op_duration_us adds its time."""
    doc = convert_file(shared_data / "hta/tests/data/trace_diff/control/control.json.gz")
    kernels = [e for e in doc["events"] if e["kind"] == "kernel"]
    reductions = [e for e in kernels if e["name"].startswith("void splitKreduce_kernel") and e.get("op")]
    assert reductions and all(e.get("op_part") and not e.get("spec") for e in reductions)
    parts = [e for e in kernels if e.get("op_part")]
    firsts = [e for e in kernels if "op_duration_us" in e]
    assert firsts and all(e["spec"] for e in firsts)
    extra = sum(e["op_duration_us"] - e["duration_us"] for e in firsts)
    assert extra == pytest.approx(sum(e["duration_us"] for e in parts))
