"""The eager KernelBench check (benchmarks/emulate/kernelbench_eager.py): which problems and GPUs it compares, in which
class, what it predicts for a call between two timing events, and what it refuses; no emulation is run here."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.emulate.kernelbench_eager import (
    DEVICE,
    EAGER,
    INSTANT_HOST,
    LAUNCH,
    classes,
    device_timed,
    elapsed_between_events,
    floor_call_ms,
    held_out_speeds,
    main,
    medians,
)
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.trace import read_trace, write_trace
from stepcast.estimator.kernelbench import measured_ms

#: eager forward times (ms) per GPU folder
TIMINGS_MS = {"T4_modal": {"19_ReLU.py": 0.03, "23_Softmax.py": 0.04, "36_RMSNorm_.py": 0.9,
                           "1_Square_matrix_multiplication_.py": 2.0, "5_Matrix_scalar_multiplication.py": 0.5},
              "B200_together": {"19_ReLU.py": 0.03, "23_Softmax.py": 0.05, "36_RMSNorm_.py": 0.04,
                                "1_Square_matrix_multiplication_.py": 0.04}}


def test_pairs_are_launch_bound_under_one_and_a_half_host_floors_device_bound_over_three(kernelbench_timings):
    compared = classes(measured_ms(kernelbench_timings(EAGER, TIMINGS_MS), EAGER))
    # the softmax on the B200 lies between the two (left out); a device-bound GEMM is cuBLAS's choice for its GPU
    # (left out), a launch-bound one is the host's time; the scalar product is a pointwise kernel despite its name
    assert compared == {"1_Square_matrix_multiplication_": {"b200": LAUNCH},
                        "5_Matrix_scalar_multiplication": {"t4": DEVICE},
                        "19_ReLU": {"t4": LAUNCH, "b200": LAUNCH}, "23_Softmax": {"t4": LAUNCH},
                        "36_RMSNorm_": {"t4": DEVICE, "b200": LAUNCH}}


def test_medians_are_per_class_and_gpu():
    rows = [{"problem": "a", "gpus": {"t4": {"class": LAUNCH, "measured_ms": 1.0, "predicted_ms": 1.2},
                                      "b200": {"class": DEVICE, "measured_ms": 1.0, "predicted_ms": 0.5}}},
            {"problem": "b", "gpus": {"t4": {"class": LAUNCH, "measured_ms": 1.0, "predicted_ms": 0.6}}},
            {"problem": "c", "skipped": "why"}]
    got = medians(rows)
    assert got[LAUNCH]["t4"]["n"] == 2 and got[LAUNCH]["t4"]["median_abs_error_pct"] == pytest.approx(30.0)
    assert got[LAUNCH]["t4"]["median_error_pct"] == pytest.approx(-10.0)
    assert got[DEVICE]["b200"]["median_abs_error_pct"] == pytest.approx(50.0)


def kernelbench_call(b: TraceBuilder, kernel_us: float, host_us: float) -> None:
    """One of KernelBench's timed calls: a record, the forward's launch ``host_us`` later, a record, a sync."""
    b.record(event=1, stream=0, gap_us=5.0)
    b.kernel(stream=0, duration_us=kernel_us, gap_us=host_us)
    b.record(event=2, stream=0, gap_us=8.0)
    b.device_sync()


def test_the_prediction_is_the_time_between_the_last_calls_events_host_included():
    b = TraceBuilder(hardware="t4", meta={"launch_latency_us": 2.0})
    for step in range(3):
        b.iteration(step)
        kernelbench_call(b, kernel_us=3.0, host_us=20.0 if step < 2 else 12.0)
    b.iteration(3)
    elapsed_ms, device_ms = elapsed_between_events(b.doc(), "t4")
    # the last call: its first record is reached at issue + 2; the kernel (no spec: a few us at the launch floor)
    # starts at 12 + 2 and ends before the second record, issued at 20 and reached at 22. The first two calls' 20 us
    # of host time are not counted
    assert elapsed_ms == pytest.approx(0.020, abs=1e-6) and 0.0 < device_ms < 0.008


def test_a_call_without_two_records_is_left_out():
    b = TraceBuilder(hardware="t4")
    for step in range(3):
        b.iteration(step)
        b.kernel(stream=0, duration_us=3.0, gap_us=10.0)
    b.iteration(3)
    assert elapsed_between_events(b.doc(), "t4") == "the call is not between two event records"


def test_missing_timings_or_a_problem_that_is_not_compared_exit_2(tmp_path, capsys, kernelbench_timings):
    assert main(["--root", str(tmp_path)]) == 2
    kernelbench_timings(EAGER, TIMINGS_MS)
    assert main(["--root", str(tmp_path), "--problems", "99_Unknown"]) == 2
    assert "stepcast:" in capsys.readouterr().err


def test_each_server_is_scored_at_the_median_of_the_others_host_speeds():
    speeds = {"t4": 1.2, "b200": 1.3, "l40s": 1.4, "odd": 7.0}
    held_out = held_out_speeds(speeds)
    assert held_out == pytest.approx({"t4": 1.4, "b200": 1.4, "l40s": 1.3, "odd": 1.3})
    assert held_out_speeds({"t4": 1.2}) == {}   # one server: no other to take its speed from


def test_a_server_that_did_not_time_its_host_compares_every_pair_but_a_librarys_as_device_bound(kernelbench_timings):
    compared = classes(measured_ms(kernelbench_timings(EAGER, TIMINGS_MS), EAGER), hidden_host=frozenset({"b200"}))
    # the B200's launch-bound and in-between pairs are device time there; its GEMM is still cuBLAS's pick
    assert {p: c["b200"] for p, c in compared.items() if "b200" in c} == {
        "19_ReLU": DEVICE, "23_Softmax": DEVICE, "36_RMSNorm_": DEVICE}
    assert compared["19_ReLU"]["t4"] == LAUNCH


def floor_trace(tmp_path: Path, gpu: str) -> Path:
    b = TraceBuilder(hardware=gpu, meta={"launch_latency_us": 2.0})
    for step in range(3):
        b.iteration(step)
        kernelbench_call(b, kernel_us=3.0, host_us=20.0)
    b.iteration(3)
    doc = b.doc()
    return write_trace(tmp_path / f"{gpu}.json", rank=0, world_size=1, hardware=gpu, events=doc["events"],
                       meta=doc["meta"])


def test_a_host_floor_within_one_and_a_half_device_side_times_says_the_host_was_not_timed(tmp_path):
    traces = {gpu: floor_trace(tmp_path, gpu) for gpu in ("t4", "b200")}
    device = floor_call_ms(traces["t4"], "t4", INSTANT_HOST)
    # the same call with its 20 us of host: the events span more than the kernel only when the host is counted
    assert 0.0 < device < elapsed_between_events(read_trace(traces["t4"]), "t4")[0]
    assert device_timed(traces, {"t4": 10 * device, "b200": 1.2 * floor_call_ms(traces["b200"], "b200", INSTANT_HOST)}) == {"b200"}
    assert device_timed(traces, {"t4": 2 * device, "b200": 2 * floor_call_ms(traces["b200"], "b200", INSTANT_HOST)}) == set()
