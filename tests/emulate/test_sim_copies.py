"""emulate.sim.copies: a sparse run's absent ranks simulated as their twins' shared programs on their own
communicators give the report every rank's own trace gives."""
from __future__ import annotations

import numpy as np
import pytest

from stepcast.emulate.report import build_report
from stepcast.emulate.sim.collate import collate
from stepcast.emulate.sim.copies import shared_groups, twin_indices, with_copies
from stepcast.emulate.sim.program import build_program
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate

WORLD = 4


def tp_dp_trace(rank: int, captured: bool = False) -> dict:
    """Ranks (0, 1) and (2, 3) are tensor-parallel pairs ('tp0', 'tp1'); every rank all-reduces over 'world'.
    The pair with rank 0 computes a little longer on its first rank, so the ranks are not all alike.
    ``captured``: as a capture (host gaps smoothed and aligned), with kernels the estimator times (a GEMM)
    and one it cannot (no spec, no duration: a fallback)."""
    b = TraceBuilder(rank=rank, world_size=WORLD, meta={"call_costs_in_gaps": False} if captured else None)
    tp = f"tp{rank // 2}"
    for step in range(4):
        b.iteration(step, gap_us=5.0)
        b.kernel(stream=1, duration_us=30.0 + 10.0 * (rank % 2), gap_us=3.0 + step % 2)
        if captured:
            b.kernel(stream=1, gap_us=2.0, spec={"family": "gemm", "m": 2048, "n": 2048 + 512 * (rank % 2),
                                                 "k": 1024, "batch": 1, "dtype": "bf16"})
            b.kernel(stream=1, gap_us=1.0 + step)
        b.collective(comm=tp, comm_seq=2 * step, duration_us=8.0, gap_us=2.0, stream=1).update(ranks=2)
        b.kernel(stream=1, duration_us=12.0, gap_us=3.0)
        b.collective(comm=tp, comm_seq=2 * step + 1, duration_us=8.0, gap_us=2.0, stream=1).update(ranks=2)
        b.collective(comm="world", comm_seq=step, duration_us=20.0, gap_us=1.0, stream=2)
    b.iteration(4, gap_us=5.0, end=True)
    return b.doc()


COPIES = {2: {"twin": 0, "comm_map": {"tp0": ["tp1", 0, [0, 1]], "world": ["world", 2, [2, 3, 0, 1]]}},
          3: {"twin": 1, "comm_map": {"tp0": ["tp1", 1, [0, 1]], "world": ["world", 3, [2, 3, 0, 1]]}}}


def test_copies_share_their_twins_event_arrays():
    programs = [build_program(tp_dp_trace(r)) for r in (0, 1)]
    everyone = with_copies(programs, COPIES)
    assert [p.rank for p in everyone] == [0, 1, 2, 3]
    assert everyone[2].kind is everyone[0].kind and everyone[3].events is everyone[1].events


def test_a_run_with_copies_reports_what_every_rank_running_reports():
    full = build_report(simulate([tp_dp_trace(r) for r in range(WORLD)], None, durations="measured"))
    sparse = build_report(simulate([tp_dp_trace(r) for r in (0, 1)], None, durations="measured", copies=COPIES))
    assert sparse["world_size"] == full["world_size"] == WORLD
    assert sparse["iteration_time_ms"] == full["iteration_time_ms"]
    assert [r["iterations_ms"] for r in sparse["per_rank"]] == [r["iterations_ms"] for r in full["per_rank"]]


def test_a_copy_left_on_its_twins_communicator_is_refused():
    wrong = {a: {"twin": c["twin"], "comm_map": {"world": c["comm_map"]["world"]}} for a, c in COPIES.items()}
    with pytest.raises(ValueError, match="more members"):
        simulate([tp_dp_trace(r) for r in (0, 1)], None, durations="measured", copies=wrong)


def test_copies_share_their_twins_timelines_and_the_result_is_the_full_simulations():
    full = simulate([tp_dp_trace(r) for r in range(WORLD)], None, durations="measured")
    sparse = simulate([tp_dp_trace(r) for r in (0, 1)], None, durations="measured", copies=COPIES)
    assert sparse.timelines[2] is sparse.timelines[0] and sparse.timelines[3] is sparse.timelines[1]
    for mine, theirs in zip(sparse.timelines, full.timelines):
        assert mine.end_time == theirs.end_time
        assert np.array_equal(mine.start, theirs.start) and np.array_equal(mine.end, theirs.end)
        assert mine.arrival == theirs.arrival


def test_copies_that_do_not_mirror_their_twins_are_walked_one_by_one():
    """Both absent ranks copy rank 0 (the faster of the pair): their tensor-parallel collective pairs rank 0 with
    itself while rank 0's pairs it with rank 1, so sharing would not be exact: every rank is simulated."""
    lopsided = {2: {"twin": 0, "comm_map": {"tp0": ["tp1", 0, [0, 1]], "world": ["world", 2, [2, 3, 0, 1]]}},
                3: {"twin": 0, "comm_map": {"tp0": ["tp1", 1, [1, 0]], "world": ["world", 3, [3, 2, 1, 0]]}}}
    result = simulate([tp_dp_trace(r) for r in (0, 1)], None, durations="measured", copies=lopsided)
    assert result.timelines[3] is not result.timelines[0]
    group_of, groups = collate(result.programs, result.durations)
    assert shared_groups(result.programs, group_of, groups, twin_index=[0, 1, 0, 0]) is None


def test_copies_are_timed_planned_and_reported_once_and_give_what_every_rank_running_gives():
    """Each stage works on the twins and shares with the copies (the same arrays, setups' gaps and timelines);
    every figure, fallback counts and per-rank entries included, is the full run's."""
    kwargs = dict(hardware="h100-sxm", durations="measured", estimator="roofline")
    full = simulate([tp_dp_trace(r, captured=True) for r in range(WORLD)], **kwargs)
    sparse = simulate([tp_dp_trace(r, captured=True) for r in (0, 1)], copies=COPIES, **kwargs)
    assert sparse.durations.us[2] is sparse.durations.us[0] and sparse.durations.us[3] is sparse.durations.us[1]
    assert sparse.durations.fallback_kernels == full.durations.fallback_kernels == WORLD * 8
    assert sparse.durations.fallback_reasons == full.durations.fallback_reasons
    for mine, theirs in zip(sparse.durations.us, full.durations.us):
        assert np.array_equal(mine, theirs)
    assert sparse.timelines[2] is sparse.timelines[0] and sparse.aligned and full.aligned
    for mine, theirs in zip(sparse.timelines, full.timelines):
        assert np.array_equal(mine.start, theirs.start) and np.array_equal(mine.end, theirs.end)
    assert sparse.collectives_matched == full.collectives_matched == len(full.groups)
    report = build_report(sparse)
    assert report == build_report(full)
    assert [r["rank"] for r in report["per_rank"]] == list(range(WORLD))
    assert report["per_rank"][2]["iterations_ms"] is not report["per_rank"][0]["iterations_ms"]


def test_twin_indices_name_the_program_each_copy_shares():
    programs = with_copies([build_program(tp_dp_trace(r)) for r in (0, 1)], COPIES)
    assert twin_indices(programs) == [0, 1, 0, 1]
    alone = [build_program(tp_dp_trace(r)) for r in range(WORLD)]
    assert twin_indices(alone) == [0, 1, 2, 3]


def test_a_copy_whose_meta_differs_from_its_twins_is_its_own():
    programs = with_copies([build_program(tp_dp_trace(r)) for r in (0, 1)], COPIES)
    programs[2].meta["launch_latency_us"] = 9.0
    assert twin_indices(programs) == [0, 1, 2, 1]
