"""The host side of the model (emulate.sim.host, the launch queue of emulate.sim.engine, device-inclusive
iterations of emulate.report): known-answer synthetic traces. Launch latency is 0 so the arithmetic stays plain."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stepcast.emulate.host_costs import (REFERENCE_HOST, ReferenceHost, WorkCosts, fit_work, load_costs,
                                         load_work_costs,
                                work_class, write_reference_host)
from stepcast.emulate.sim.host import UNCOUNTED_NS, UNCOUNTED_RATIO, uncounted
from stepcast.emulate.report import build_report
from stepcast.emulate.sim.program import build_program
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate

NO_LATENCY = {"launch_latency_us": 0.0}


def report_of(*builders: TraceBuilder, **kwargs) -> dict:
    kwargs.setdefault("durations", "measured")
    return build_report(simulate([b.doc() for b in builders], "h100-sxm", **kwargs))


def no_sync_loop(iterations: int = 6, kernels: int = 50, kernel_us: float = 20.0, gap_us: float = 2.0,
                 rank: int = 0, world_size: int = 1, meta: dict | None = None) -> TraceBuilder:
    """A training loop that never synchronises: per iteration, ``kernels`` kernels of ``kernel_us`` issued
    ``gap_us`` apart, then a profiler step. Device time per iteration: kernels x kernel_us; host time: kernels x
    gap_us."""
    b = TraceBuilder(rank=rank, world_size=world_size, meta={**NO_LATENCY, **(meta or {})})
    for step in range(iterations):
        b.iteration(step)
        for _ in range(kernels):
            b.kernel(stream=1, duration_us=kernel_us, gap_us=gap_us)
    b.iteration(iterations, end=True)
    return b


@pytest.mark.parametrize("depth", [8, 1024, 10**9])
def test_a_host_that_never_synchronises_is_reported_at_its_device_time(depth):
    # Device 1000 us per iteration, host 100 us: the host runs ahead, but an iteration cannot be shorter than its
    # device work, whatever the queue depth (an unbounded queue included).
    report = report_of(no_sync_loop(), queue_depth=depth)
    assert report["iteration_time_ms"] == pytest.approx(1.000)
    rank = report["per_rank"][0]
    assert rank["device_busy_ms"][2] == pytest.approx(1.000)
    assert rank["host_ms"][2] == pytest.approx(0.100)


def test_a_full_launch_queue_blocks_the_host_until_the_oldest_op_ends():
    b = TraceBuilder(meta=NO_LATENCY)
    b.iteration(0)
    for _ in range(3):
        b.kernel(stream=1, duration_us=100.0)
    b.kernel(stream=2, duration_us=1.0)        # another stream: free, but the host may not issue it before 100 us
    b.iteration(1, end=True)
    result = simulate([b.doc()], "h100-sxm", durations="measured", queue_depth=2)
    tl, prog = result.timelines[0], result.programs[0]
    kernels = prog.device_index
    assert list(tl.host[kernels]) == pytest.approx([0.0, 0.0, 100.0, 200.0])
    assert tl.start[kernels[-1]] == pytest.approx(200.0)


def test_runtime_call_costs_are_added_to_captured_gaps_only():
    captured = no_sync_loop(kernels=10, kernel_us=1.0, gap_us=0.0, meta={"call_costs_in_gaps": False})
    replayed = no_sync_loop(kernels=10, kernel_us=1.0, gap_us=0.0)
    costs = {"kernel": 5.0}
    # captured: each launch costs the host 5 us, so the host sets the pace: 10 x 5 us per iteration
    assert report_of(captured, call_costs_us=costs)["iteration_time_ms"] == pytest.approx(0.050)
    assert report_of(replayed, call_costs_us=costs)["iteration_time_ms"] == pytest.approx(0.010)


def test_host_speed_divides_the_call_costs_too():
    captured = no_sync_loop(kernels=10, kernel_us=1.0, gap_us=0.0, meta={"call_costs_in_gaps": False})
    assert report_of(captured, call_costs_us={"kernel": 5.0}, host_speed=2.0)["iteration_time_ms"] == \
        pytest.approx(0.025)


def test_the_shipped_call_costs_name_trace_kinds():
    costs = load_costs()
    assert set(costs) >= {"kernel", "memcpy", "memset", "event_record", "collective"}
    assert all(v > 0 for v in costs.values())


def skewed_ranks(warmup_gap_us: tuple[float, float]) -> list[TraceBuilder]:
    """Two data-parallel ranks: a warm-up iteration of local work whose host time differs by rank, then identical
    steady iterations of 100 us compute and a 50 us all-reduce, each ended by a stream sync (the loss read)."""
    out = []
    for rank, warmup in enumerate(warmup_gap_us):
        b = TraceBuilder(rank=rank, world_size=2, meta=NO_LATENCY)
        seq = 0
        for step in range(5):
            b.iteration(step)
            b.kernel(stream=1, duration_us=100.0, gap_us=warmup if step == 0 else 1.0)
            if step:
                b.record(event=1, stream=1)
                b.wait(stream=2, event=1)
                b.collective(stream=2, comm_seq=seq, duration_us=50.0)
                seq += 1
                b.stream_sync(stream=2)
        b.iteration(5, end=True)
        out.append(b)
    return out


def test_warm_up_skew_never_shows_as_steady_state_idle_time():
    even = report_of(*skewed_ranks((0.0, 0.0)))
    skewed = report_of(*skewed_ranks((0.0, 3000.0)))
    assert skewed["ranks_aligned"]
    assert skewed["iteration_time_ms"] == pytest.approx(even["iteration_time_ms"])
    assert all(r["waiting_on_peers_ms"] == pytest.approx(0.0) for r in skewed["per_rank"])
    assert skewed["breakdown_ms"] == pytest.approx(even["breakdown_ms"])


def test_without_alignment_warm_up_skew_lands_in_the_first_steady_iteration_and_the_report_drops_it():
    """The control of the test above: unaligned, the early rank's first steady all-reduce waits 3 ms, so that
    iteration runs 3 ms long; the report leaves it out of the steady window as still warming up
    (``emulate.report.settled``), so its wait is no steady-state idle time there either."""
    report = report_of(*skewed_ranks((0.0, 3000.0)), align_ranks=False)
    assert not report["ranks_aligned"]
    early = report["per_rank"][0]
    assert early["iterations_ms"][1] > early["iterations_ms"][2] + 2.9
    assert early["steady_iterations"] == [2, 3, 4] and early["waiting_on_peers_ms"] == pytest.approx(0.0)


def test_replayed_ranks_keep_their_recorded_start_offsets():
    ranks = skewed_ranks((0.0, 0.0))
    ranks[0].meta["clock_origin_us"] = 1_000.0
    ranks[1].meta["clock_origin_us"] = 1_500.0   # started 500 us after rank 0
    result = simulate([b.doc() for b in ranks], "h100-sxm", durations="measured")
    assert not result.aligned
    report = build_report(result)
    first_collective = {p.rank: int(p.device_index[2]) for p in result.programs}
    starts = [tl.start[first_collective[p.rank]] for p, tl in zip(result.programs, result.timelines)]
    # rank 1 starts 500 us late: its first all-reduce can begin after 500 + 2 x 100 us of compute
    assert starts[0] == pytest.approx(starts[1]) == pytest.approx(700.0)
    early, late = report["per_rank"]
    assert early["iterations_ms"][1] == pytest.approx(late["iterations_ms"][1] + 0.5)   # the wait, in iteration 1
    assert early["steady_iterations"] == [2, 3, 4]   # still warming up: out of the breakdown's window


def test_fewer_than_three_iterations_get_a_warning():
    report = report_of(no_sync_loop(iterations=2))
    assert any("no steady state" in w for w in report["warnings"])
    assert not any("no steady state" in w for w in report_of(no_sync_loop(iterations=4))["warnings"])


def test_ranks_that_disagree_on_their_iterations_get_one_line_saying_what_was_assumed():
    a, b = skewed_ranks((0.0, 0.0))
    doc_b = b.doc()
    doc_b["events"] = [e for e in doc_b["events"] if not (e["kind"] == "iteration" and e["step"] == 3)]
    result = simulate([a.doc(), doc_b], "h100-sxm", durations="measured")
    assert not result.aligned
    assert len(result.warnings) == 1 and "disagree on their number of iterations" in result.warnings[0]


def test_a_script_without_iteration_marks_is_one_iteration_with_a_warning():
    b = TraceBuilder(meta=NO_LATENCY)
    b.kernel(stream=1, duration_us=10.0)
    report = report_of(b)
    assert report["iterations_ms"] == pytest.approx([0.010])
    assert any("no iteration marks" in w for w in report["warnings"])


def test_determinism_note_gives_the_steady_iterations_and_their_spread():
    report = report_of(no_sync_loop(iterations=6))
    assert report["determinism"]["steady_iterations"] == 5
    assert report["determinism"]["spread"] == pytest.approx(0.0, abs=1e-9)


def test_effective_gaps_leave_blocking_copies_without_a_call_cost():
    b = TraceBuilder(meta={"call_costs_in_gaps": False})
    b.memcpy(1024, blocking=True, duration_us=1.0, gap_us=1.0)
    b.memcpy(1024, blocking=False, duration_us=1.0, gap_us=1.0)
    from stepcast.emulate.sim.host import effective_gaps

    gaps = effective_gaps(build_program(b.doc()), 1.0, {"memcpy": 8.0})
    assert gaps == pytest.approx([1_000.0, 9_000.0])


def growing_then_steady(gaps_us: list[float], captured: bool = True) -> TraceBuilder:
    """A warm-up iteration, one that still grows the allocator, then iterations of one kernel whose host gap is
    ``gaps_us[k]`` (the same calls each time)."""
    b = TraceBuilder(meta={**NO_LATENCY, "call_costs_in_gaps": not captured})
    b.iteration(0)
    b.malloc(ptr=1, nbytes=1 << 20)
    b.kernel(stream=1, duration_us=1.0, gap_us=10.0)
    b.iteration(1)
    b.malloc(ptr=2, nbytes=1 << 20)
    b.kernel(stream=1, duration_us=1.0, gap_us=10.0)
    for k, gap in enumerate(gaps_us):
        b.iteration(2 + k)
        b.kernel(stream=1, duration_us=1.0, gap_us=gap)
    b.iteration(2 + len(gaps_us), end=True)
    return b


def test_steady_state_leaves_out_iterations_that_still_grow_the_allocator():
    from stepcast.emulate.sim.program import steady_iterations

    prog = build_program(growing_then_steady([5.0, 5.0, 5.0]).doc())
    assert steady_iterations(prog).tolist() == [2, 3, 4]


def test_captured_steady_iterations_take_each_calls_smallest_gap():
    # interference made one steady iteration's call 40 us slower: the capture's steady state is the work itself
    noisy = report_of(growing_then_steady([5.0, 45.0, 5.0]), call_costs_us={})
    quiet = report_of(growing_then_steady([5.0, 5.0, 5.0]), call_costs_us={})
    assert noisy["iterations_ms"][2:] == pytest.approx(quiet["iterations_ms"][2:])
    # a real trace's gaps are what happened
    real = report_of(growing_then_steady([5.0, 45.0, 5.0], captured=False))
    assert real["iterations_ms"][3] == pytest.approx(0.045)


def test_captured_host_time_gives_what_was_recorded_and_what_the_minimum_discarded():
    from stepcast.emulate.sim.host import captured_host

    prog = build_program(growing_then_steady([5.0, 45.0, 5.0, 25.0]).doc())
    (host,) = captured_host([prog])
    assert host.recorded_ms == pytest.approx((0.005, 0.045, 0.005, 0.025))
    assert host.used_ms == pytest.approx(0.005)
    assert host.recorded_median_ms == pytest.approx(0.015)
    assert host.recorded_spread == pytest.approx((0.045 - 0.005) / 0.015)
    assert host.interference == pytest.approx(1 - 0.005 / 0.015)


def test_an_undisturbed_capture_shows_no_interference():
    from stepcast.emulate.sim.host import captured_host

    (host,) = captured_host([build_program(growing_then_steady([5.0, 5.0, 5.0]).doc())])
    assert host.interference == pytest.approx(0.0, abs=1e-12)
    assert host.recorded_spread == pytest.approx(0.0, abs=1e-12)


def test_real_traces_have_no_captured_host_time():
    from stepcast.emulate.sim.host import captured_host

    assert captured_host([build_program(growing_then_steady([5.0, 45.0, 5.0], captured=False).doc())]) == [None]


def test_determinism_note_says_how_disturbed_the_capture_was_although_simulated_iterations_agree():
    # the simulated steady iterations share the per-call minimum, so their spread is 0; the note still shows that
    # the capture recorded 5, 45 and 5 us
    det = report_of(growing_then_steady([5.0, 45.0, 5.0]), call_costs_us={})["determinism"]
    assert det["spread"] == pytest.approx(0.0, abs=1e-9)
    assert det["captured_host_ms"] == pytest.approx(0.005)
    assert det["captured_host_spread"] == pytest.approx(8.0)
    assert det["host_interference"] == pytest.approx(0.0, abs=1e-12)
    noisy = report_of(growing_then_steady([45.0, 5.0, 45.0]), call_costs_us={})["determinism"]
    assert noisy["host_interference"] == pytest.approx(1 - 5 / 45)
    real = report_of(growing_then_steady([5.0, 45.0, 5.0], captured=False))["determinism"]
    assert real["captured_host_ms"] is None and real["host_interference"] is None


# ---- the counted host model ----

def counted_loop(measured_gap_us: float, ops: int = 3, nodes: int = 1, iterations: int = 6,
                 kernels: int = 10) -> TraceBuilder:
    """A capture that counted its host work: per kernel, ``ops`` aten ops and ``nodes`` autograd nodes before it;
    its measured gaps are ``measured_gap_us`` (what a clock read on the emulating machine)."""
    b = TraceBuilder(meta={**NO_LATENCY, "call_costs_in_gaps": False, "host_work": "record_function"})
    for step in range(iterations):
        b.iteration(step)
        for _ in range(kernels):
            ev = b.kernel(stream=1, duration_us=1.0, gap_us=measured_gap_us)
            ev["host_ops"], ev["host_nodes"] = ops, nodes
    b.iteration(iterations, end=True)
    return b


WORK = WorkCosts(call_ns=2_000.0, op_ns=3_000.0, node_ns=5_000.0)


def test_counted_host_time_does_not_depend_on_the_measured_gaps():
    # the same script captured on a quiet and on a loaded machine: the clock read 20 and 45 us per call
    quiet = report_of(counted_loop(20.0), call_costs_us={}, work=WORK)
    loaded = report_of(counted_loop(45.0), call_costs_us={}, work=WORK)
    assert quiet["iteration_time_ms"] == loaded["iteration_time_ms"]
    # 10 calls x (2 + 3 x 3 + 1 x 5 us)
    assert quiet["iteration_time_ms"] == pytest.approx(10 * 16e-3)


def test_counted_host_time_is_at_the_reference_hosts_speed():
    # costs measured on a machine the reference host outruns 2x: every counted gap takes half the time
    faster = dataclasses.replace(WORK, host_speed=2.0)
    report = report_of(counted_loop(20.0), call_costs_us={}, work=faster)
    assert report["iteration_time_ms"] == pytest.approx(10 * 16e-3 / 2.0)
    # --host-speed is relative to that host
    assert report_of(counted_loop(20.0), call_costs_us={}, work=faster, host_speed=0.5)["iteration_time_ms"] \
        == pytest.approx(10 * 16e-3)


def test_the_reference_hosts_speed_leaves_measured_and_recorded_gaps_alone():
    faster = dataclasses.replace(WORK, host_speed=2.0)
    captured = no_sync_loop(kernels=10, kernel_us=1.0, gap_us=30.0, meta={"call_costs_in_gaps": False})
    assert report_of(captured, call_costs_us={}, work=faster)["iteration_time_ms"] == pytest.approx(0.30)
    recorded = no_sync_loop(kernels=10, kernel_us=1.0, gap_us=30.0)
    assert report_of(recorded, call_costs_us={}, work=faster)["iteration_time_ms"] == pytest.approx(0.30)


def test_the_report_names_the_reference_host_of_counted_time_only():
    named = dataclasses.replace(WORK, host="median GPU server")
    assert report_of(counted_loop(20.0), call_costs_us={}, work=named)["reference_host"] == "median GPU server"
    assert report_of(counted_loop(20.0), call_costs_us={}, work=None)["reference_host"] is None


def test_measured_host_model_uses_the_gaps():
    assert report_of(counted_loop(45.0), call_costs_us={}, work=None)["iteration_time_ms"] == pytest.approx(0.45)


def test_captures_without_counts_keep_their_measured_gaps_under_the_counted_model():
    captured = no_sync_loop(kernels=10, kernel_us=1.0, gap_us=30.0, meta={"call_costs_in_gaps": False})
    assert report_of(captured, call_costs_us={}, work=WORK)["iteration_time_ms"] == pytest.approx(0.30)


def test_host_work_the_counts_cannot_see_is_kept_from_the_measured_gap():
    # a 5 ms Python loop before one launch per iteration: no op counts it, the clock does (no ordinary gap tells the
    # machine's speed here, so the reading is taken as it is)
    b = TraceBuilder(meta={**NO_LATENCY, "call_costs_in_gaps": False, "host_work": "record_function"})
    for step in range(5):
        b.iteration(step)
        ev = b.kernel(stream=1, duration_us=1.0, gap_us=5_000.0)
        ev["host_ops"], ev["host_nodes"] = 1, 0
    b.iteration(5, end=True)
    assert report_of(b, call_costs_us={}, work=WORK)["iteration_time_ms"] == pytest.approx(5.0)


def loop_with_uncounted_work(slowdown: float, uncounted_us: float = 2_000.0, kernels: int = 20) -> TraceBuilder:
    """Per iteration, ``kernels`` ordinary launches of 22 us counted work and one launch after ``uncounted_us`` of
    work no count sees, every reading taken on a machine ``slowdown`` times slower than the reference."""
    b = TraceBuilder(meta={**NO_LATENCY, "call_costs_in_gaps": False, "host_work": "record_function"})
    for step in range(5):
        b.iteration(step)
        for k in range(kernels + 1):
            work_us = 22.0 + (uncounted_us if k == kernels else 0.0)
            ev = b.kernel(stream=1, duration_us=1.0, gap_us=slowdown * work_us)
            ev["host_ops"], ev["host_nodes"] = 5, 1     # 2 + 5 x 3 + 5 = 22 us counted
    b.iteration(5, end=True)
    return b


@pytest.mark.parametrize("slowdown", [1.0, 2.5, 7.0])
def test_uncounted_host_work_is_timed_at_the_reference_speed_however_slow_the_capture_ran(slowdown):
    # the machine's speed shows in the ordinary gaps of the same iteration, and the uncounted work is divided by it
    report = report_of(loop_with_uncounted_work(slowdown), call_costs_us={}, work=WORK)
    assert report["iteration_time_ms"] == pytest.approx((21 * 22.0 + 2_000.0) / 1e3)


def test_an_ordinary_gap_read_slow_adds_no_uncounted_work():
    report = report_of(loop_with_uncounted_work(3.0, uncounted_us=0.0), call_costs_us={}, work=WORK)
    assert report["iteration_time_ms"] == pytest.approx(21 * 22.0 / 1e3)
    assert report["determinism"]["uncounted_host_ms"] == 0.0


def test_the_report_says_how_much_host_time_a_clock_gave():
    report = report_of(loop_with_uncounted_work(4.0), call_costs_us={}, work=WORK)
    assert report["determinism"]["uncounted_host_ms"] == pytest.approx(2.0)
    assert report_of(loop_with_uncounted_work(4.0), call_costs_us={}, work=None)["determinism"][
        "uncounted_host_ms"] is None


def test_uncounted_work_grows_continuously_from_the_line():
    counted = np.full(2001, 50_000.0)
    readings = np.linspace(0.0, 20.0, 2001) * counted    # 0-20x the counted time, in steps of 0.01x (500 ns)
    extra = uncounted(readings, counted)
    assert extra[readings <= UNCOUNTED_RATIO[0] * counted].max() == 0.0
    full = (readings >= UNCOUNTED_RATIO[1] * counted) & (readings - counted >= UNCOUNTED_NS[1])
    assert np.allclose(extra[full], (readings - counted)[full])
    # a reading 500 ns higher never adds more than 500 ns times the steepest the two ramps can make it
    slope = 1 + UNCOUNTED_RATIO[1] / (UNCOUNTED_RATIO[1] - UNCOUNTED_RATIO[0]) \
        + UNCOUNTED_NS[1] / (UNCOUNTED_NS[1] - UNCOUNTED_NS[0])
    assert np.diff(extra).max() < 500.0 * slope
    assert (np.diff(extra) >= 0).all()


def test_graph_nodes_after_the_first_are_no_call_of_their_own():
    from stepcast.emulate.sim.host import call_mask

    b = TraceBuilder(meta={"host_work": "record_function"})
    b.iteration(0)
    for node in range(3):
        b.kernel(stream=1, duration_us=1.0).update(graph_launch=1, graph_node=node)
    assert call_mask(build_program(b.doc())).tolist() == [False, True, False, False]


def test_work_fit_recovers_known_costs():
    rng = np.random.default_rng(0)
    ops, nodes = rng.integers(0, 8, 500).astype(float), rng.integers(0, 2, 500).astype(float)
    calls = np.ones(500)
    gaps = WORK.gaps(calls, ops, nodes) + rng.normal(0, 100.0, 500)
    call_ns, op_ns, node_ns = fit_work(gaps, calls, ops, nodes)
    assert (call_ns, op_ns, node_ns) == pytest.approx((2_000.0, 3_000.0, 5_000.0), rel=0.05)


@pytest.mark.parametrize("name, expected", [
    ("aten::addmm", "op"), ("c10d::allreduce_", "op"), ("_c10d_functional::all_gather_into_tensor", "op"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "node"), ("AddmmBackward0", None),
    ("ProfilerStep#3", None), ("Optimizer.step#AdamW.step", None), ("autograd::engine::something", None),
])
def test_profiler_op_names_count_as_the_capture_counts_them(name, expected):
    assert work_class(name) == expected


def test_the_shipped_work_costs_are_positive_and_name_their_reference():
    work = load_work_costs()
    assert work.call_ns > 0 and work.op_ns > 0 and work.node_ns >= 0
    assert "torch" in work.reference


def test_the_shipped_reference_host_is_the_median_of_the_servers_it_names():
    import json

    from stepcast.emulate import config

    doc = json.loads(open(config.HOST_CALL_COSTS_FILE).read())[REFERENCE_HOST]
    work = load_work_costs()
    assert work.host_speed == pytest.approx(np.median(list(doc["servers"].values())), abs=1e-3)
    assert work.host_speed > 1.0 and "KernelBench" in work.host


def test_a_reference_host_is_the_median_server_so_one_outlier_moves_it_little():
    servers = {"a": 1.2, "b": 1.3, "c": 1.4, "d": 7.4}
    assert ReferenceHost.of_servers(servers, "x").speed == pytest.approx(1.35)
    with pytest.raises(ValueError, match="no server"):
        ReferenceHost.of_servers({}, "x")


def test_writing_the_reference_host_keeps_the_rest_of_the_cost_file(tmp_path):
    import json

    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"costs_us": {"kernel": 7.5}, "work_ns": {"call_ns": 1, "op_ns": 2, "node_ns": 3,
                                                                          "py_ns": 4, "reference": "vm"}}))
    write_reference_host(ReferenceHost.of_servers({"a": 1.5, "b": 2.5}, "two servers"), path)
    work = load_work_costs(str(path))
    assert (work.host_speed, work.host, work.reference) == (2.0, "two servers", "vm")
    assert json.loads(path.read_text())["costs_us"] == {"kernel": 7.5}


@pytest.mark.parametrize("bad, field", [({"speed": -1, "name": "x", "servers": {}}, "reference_host.speed"),
                                        ({"name": "x"}, "reference_host")])
def test_a_bad_reference_host_is_one_line_naming_the_field(tmp_path, bad, field):
    import json

    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"work_ns": {"call_ns": 1, "op_ns": 2, "node_ns": 3, "py_ns": 4, "reference": "vm"},
                                REFERENCE_HOST: bad}))
    with pytest.raises(ValueError, match=f"{path}: field '{field}'"):
        load_work_costs(str(path))
