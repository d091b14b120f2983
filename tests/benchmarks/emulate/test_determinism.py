"""The determinism benchmark's arithmetic (benchmarks.emulate.determinism): the spread, one run's components taken
from its report, and their spreads over runs. The emulations themselves are the benchmark's, not a test's."""
from __future__ import annotations

import pytest

from benchmarks.emulate.determinism import (
    component_spreads,
    components,
    decomposition_table,
    main,
    spread,
)
from stepcast.emulate.report import build_report
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate


def test_spread_is_the_range_over_the_median():
    assert spread([10.0, 11.0, 10.5]) == pytest.approx(1.0 / 10.5)
    assert spread([0.0, 0.0]) == 0.0


def captured_loop(steady_gaps_us: list[float], kernel_us: float = 1.0) -> dict:
    """A captured trace: a warm-up iteration, then one kernel per iteration after a host gap of ``steady_gaps_us[k]``
    (the same call each time)."""
    b = TraceBuilder(meta={"launch_latency_us": 0.0, "call_costs_in_gaps": False})
    b.iteration(0)
    b.kernel(stream=1, duration_us=kernel_us, gap_us=100.0)
    for k, gap in enumerate(steady_gaps_us):
        b.iteration(1 + k)
        b.kernel(stream=1, duration_us=kernel_us, gap_us=gap)
    b.iteration(1 + len(steady_gaps_us), end=True)
    return b.doc()


def test_components_split_a_host_bound_run_into_host_device_and_capture():
    report = build_report(simulate([captured_loop([20.0, 60.0, 20.0, 30.0])], "h100-sxm", durations="measured",
                                   call_costs_us={}))
    c = components(report)
    assert c["iteration_ms"] == pytest.approx(report["iteration_time_ms"])
    assert c["host_ms"] == pytest.approx(0.020)          # the per-call minimum
    assert c["device_busy_ms"] == pytest.approx(0.001)
    assert c["waiting_on_peers_ms"] == 0.0
    assert c["captured_host_ms"] == pytest.approx(0.025)  # median of 20, 60, 20, 30 us as recorded
    assert c["host_interference"] == pytest.approx(1 - 20 / 25)
    assert c["uncounted_host_ms"] is None                 # not a counting capture
    assert c["steady_iterations"] == [1, 2, 3, 4]


def test_component_spreads_point_at_the_part_that_varies():
    base = {"iteration_ms": 8.0, "host_ms": 7.0, "device_busy_ms": 1.4, "waiting_on_peers_ms": 0.0,
            "captured_host_ms": 8.0, "host_interference": 0.1, "uncounted_host_ms": 1.0, "steady_iterations": [2, 3, 4]}
    runs = [base, {**base, "iteration_ms": 8.8, "host_ms": 7.8, "captured_host_ms": 9.0, "host_interference": 0.2,
                   "uncounted_host_ms": 1.8},
            {**base, "steady_iterations": [3, 4]}]
    s = component_spreads(runs)
    assert s["iteration_ms"] == pytest.approx(0.8 / 8.0)
    assert s["host_ms"] == pytest.approx(0.8 / 7.0)
    assert s["device_busy_ms"] == 0.0
    assert s["waiting_on_peers_ms"] == (0.0, 0.0)
    assert s["host_interference"] == (0.1, 0.2)
    assert s["uncounted_host_ms"] == (1.0, 1.8)
    assert s["steady_sets"] == 2
    table = decomposition_table([{"workload": "w", "setting": "quiet", "components": s}])
    assert table.row_count == 1


def test_replays_have_no_captured_host_part():
    runs = [{"iteration_ms": 1.0, "host_ms": 1.0, "device_busy_ms": 1.0, "waiting_on_peers_ms": 0.0,
             "captured_host_ms": None, "host_interference": None, "uncounted_host_ms": None,
             "steady_iterations": [1]}] * 2
    s = component_spreads(runs)
    assert s["captured_host_ms"] is None and s["host_interference"] is None and s["uncounted_host_ms"] is None


def test_fewer_than_two_runs_is_one_line_and_exit_2(capsys):
    assert main(["--runs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepcast: --runs") and len(err.strip().splitlines()) == 1
