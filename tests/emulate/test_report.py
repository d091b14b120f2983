"""The report's fields and the arithmetic that ties them together."""
from __future__ import annotations

import json

import numpy as np
import pytest

from stepcast.emulate.report import BREAKDOWN_TERMS, build_report, steady_indices, union_length, write_report
from stepcast.emulate.sim.synthetic import TraceBuilder, training_like_traces
from stepcast.emulate.simulate import simulate

REPORT_FIELDS = {"hardware", "world_size", "iteration_time_ms", "iterations_ms", "peak_memory_bytes",
                 "breakdown_ms", "mfu", "per_rank", "fallback_kernels"}


@pytest.fixture(scope="module")
def ddp_report() -> dict:
    return build_report(simulate(training_like_traces(6000, ranks=2), "h100-sxm", durations="measured"))


def test_every_field_is_present(ddp_report):
    assert REPORT_FIELDS <= set(ddp_report)
    assert set(ddp_report["breakdown_ms"]) == set(BREAKDOWN_TERMS)
    for entry in ddp_report["per_rank"]:
        assert {"rank", "iteration_time_ms", "peak_memory_bytes", "breakdown_ms"} <= set(entry)
    assert [e["rank"] for e in ddp_report["per_rank"]] == [0, 1]
    json.dumps(ddp_report)  # serialisable as is


def test_iteration_time_is_the_slowest_ranks_steady_median(ddp_report):
    slowest = max(e["iteration_time_ms"] for e in ddp_report["per_rank"])
    assert ddp_report["iteration_time_ms"] == slowest
    for entry in ddp_report["per_rank"]:
        steady = np.asarray(entry["iterations_ms"])[1:]   # 6 iterations: the first is warm-up
        assert entry["iteration_time_ms"] == pytest.approx(float(np.median(steady)))


def test_breakdown_terms_sum_to_the_iteration_time(ddp_report):
    for entry in [ddp_report, *ddp_report["per_rank"]]:
        parts = entry["breakdown_ms"]
        total = parts["compute"] + parts["exposed_communication"] + parts["host_bound"] + parts["idle"]
        assert total == pytest.approx(entry["iteration_time_ms"], rel=1e-9)
        assert parts["exposed_communication"] <= parts["communication"] + 1e-12
        assert all(v >= -1e-9 for v in parts.values())


def test_ddp_reports_communication(ddp_report):
    assert ddp_report["breakdown_ms"]["communication"] > 0
    assert ddp_report["collectives_matched"] > 0


def test_mfu_from_gemm_specs():
    b = TraceBuilder(meta={"launch_latency_us": 0.0})
    b.iteration(0)
    # 2 * 4096^3 FLOPs in bf16 on h100-sxm (989.4 TFLOP/s): 138.9 us at peak; measured 277.8 us -> 50% MFU.
    spec = {"family": "gemm", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "batch": 1}
    ideal_us = 2 * 4096**3 / 989.4e12 * 1e6
    b.kernel(stream=1, spec=spec, duration_us=2 * ideal_us)
    b.device_sync()
    b.iteration(1, end=True)
    report = build_report(simulate([b.doc()], "h100-sxm", durations="measured"))
    assert report["mfu"] == pytest.approx(0.5)


def test_mfu_is_null_without_model_flops(ddp_report):
    assert ddp_report["mfu"] is None


def test_steady_state_drops_the_first_of_two_or_more():
    assert steady_indices(1).tolist() == [0]
    assert steady_indices(2).tolist() == [1]
    assert steady_indices(3).tolist() == [1, 2]


def test_union_length_merges_overlaps():
    assert union_length(np.array([0.0, 5.0, 20.0]), np.array([10.0, 12.0, 25.0])) == 17.0
    assert union_length(np.array([3.0]), np.array([3.0])) == 0.0


def test_write_report_is_atomic(tmp_path, ddp_report):
    path = write_report(ddp_report, tmp_path / "r" / "report.json")
    assert json.loads(path.read_text())["world_size"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_steady_fallback_count_leaves_out_benchmark_launches_before_the_steady_iterations():
    # iteration 0 warm-up, 1 autotuning (three benchmark launches of a kernel without a model), 2-4 steady; every
    # iteration launches one kernel without a model (no spec, nothing measured: the launch floor)
    b = TraceBuilder(meta={"launch_latency_us": 0.0})
    for step in range(5):
        b.iteration(step)
        b.kernel(name="timed", duration_us=10.0)
        if step == 1:
            for _ in range(3):
                b.kernel(name="benchmark_candidate")
        b.kernel(name="no_model")
        b.device_sync()
    b.iteration(5, end=True)
    report = build_report(simulate([b.doc()], "h100-sxm", durations="measured"))
    assert report["steady_iterations"] == [2, 3, 4]
    assert report["fallback_kernels"] == 5 + 3
    assert report["fallback_kernels_steady"] == 3


def test_steady_fallback_count_includes_kernels_the_analytical_estimator_timed():
    b = TraceBuilder(meta={"launch_latency_us": 0.0})
    spec = {"family": "elementwise", "dtype": "fp32", "op": "copy", "numel": 1 << 20}
    for step in range(4):
        b.iteration(step)
        b.kernel(spec=spec)
        b.device_sync()
    b.iteration(4, end=True)
    report = build_report(simulate([b.doc()], "h100-sxm", estimator="roofline"))
    assert report["fallback_kernels"] == 4
    assert report["fallback_kernels_steady"] == len(report["steady_iterations"]) == 3


def test_the_summary_names_the_moe_routing_and_its_busiest_expert(ddp_report):
    from rich.console import Console

    from stepcast.emulate.report import print_summary

    routing = {"routing": "power law, alpha 1.2", "stated": True, "errors": [],
               "routers": [{"tokens": 16384, "experts": 64, "topk": 6, "calls": 64, "routing": "power",
                            "busiest_expert_routes": 15475, "mean_expert_routes": 1536.0}]}
    console = Console(record=True, width=200)
    print_summary({**ddp_report, "moe_routing": routing}, console=console)
    text = console.export_text()
    assert "MoE routing" in text and "power law, alpha 1.2; busiest expert 15475 routes of a mean 1536" in text
    console = Console(record=True, width=200)
    print_summary({**ddp_report, "moe_routing": {**routing, "stated": False}}, console=console)
    assert "(not stated)" in console.export_text()


def test_a_leading_steady_iteration_still_warming_up_is_left_out_of_the_breakdown():
    """Iterations 1-3 repeat one event sequence, but iteration 1 waits 200 us on a collective its peer reaches late
    (warming up): the breakdown covers 2-3 alone, with no idle, and the median iteration time is unchanged."""
    builders = [TraceBuilder(rank=r, world_size=2, meta={"launch_latency_us": 0.0}) for r in range(2)]
    for step in range(4):
        for rank, b in enumerate(builders):
            b.iteration(step)
            b.kernel(name="work", duration_us=300.0 if (rank == 1 and step == 1) else 100.0)
            b.collective("all_reduce", stream=0, duration_us=10.0)
            b.device_sync()
    for b in builders:
        b.iteration(4, end=True)
    report = build_report(simulate([b.doc() for b in builders], "h100-sxm", durations="measured"))
    rank0 = report["per_rank"][0]
    assert rank0["iterations_ms"][1] > 1.1 * rank0["iterations_ms"][2]
    assert rank0["steady_iterations"] == [2, 3]
    assert rank0["breakdown_ms"]["idle"] == pytest.approx(0.0, abs=1e-9)
    assert rank0["iteration_time_ms"] == pytest.approx(0.110, rel=1e-3)
