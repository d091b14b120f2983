"""emulate.sim.shared_collate: collating a sparse run on its twins finds the groups that collating every rank and
replacing each copy by its twin finds, or declines (None) where that would not be exact."""
from __future__ import annotations

import numpy as np

from stepcast.emulate.sim.collate import collate
from stepcast.emulate.sim.copies import shared_groups, with_copies
from stepcast.emulate.sim.durations import assign_durations
from stepcast.emulate.sim.program import build_program
from stepcast.emulate.sim.shared_collate import collate_twins
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate

WORLD = 4


def pp_dp_trace(rank: int) -> dict:
    """Stage 0 is ranks 0 and 1 (data-parallel group 'dp0'), stage 1 ranks 2 and 3 ('dp1'); replica k sends from
    stage 0 to stage 1 on 'pp<k>' (point-to-point, peers numbered within the communicator)."""
    stage, replica = divmod(rank, 2)
    b = TraceBuilder(rank=rank, world_size=WORLD)
    for step in range(3):
        b.iteration(step, gap_us=4.0)
        b.kernel(stream=1, duration_us=20.0 + 15.0 * stage, gap_us=2.0)
        if stage == 0:
            b.collective(op="send", comm=f"pp{replica}", peer=1, stream=1, duration_us=5.0).update(comm_rank=0)
        else:
            b.collective(op="recv", comm=f"pp{replica}", peer=0, stream=1, duration_us=5.0).update(comm_rank=1)
        b.kernel(stream=1, duration_us=10.0, gap_us=2.0)
        b.collective(comm=f"dp{stage}", comm_seq=step, duration_us=7.0, stream=2).update(ranks=2, comm_rank=replica)
    b.iteration(3, gap_us=4.0, end=True)
    return b.doc()


COPIES = {1: {"twin": 0, "comm_map": {"pp0": ["pp1", 0, [0, 1]], "dp0": ["dp0", 1, [1, 0]]}},
          3: {"twin": 2, "comm_map": {"pp0": ["pp1", 1, [0, 1]], "dp1": ["dp1", 1, [1, 0]]}}}


def sparse_programs(copies: dict = COPIES):
    programs = with_copies([build_program(pp_dp_trace(r)) for r in (0, 2)], copies)
    return programs, assign_durations(programs, None, "measured", None, 2)


def as_sets(members_and_durations) -> set:
    return {(tuple(members), duration) for members, duration in members_and_durations}


def test_twins_alone_give_the_groups_of_every_rank_with_copies_replaced_by_twins():
    programs, times = sparse_programs()
    group_of, groups = collate(programs, times)
    twins = collate_twins(programs, times)
    assert twins is not None and twins.twins == [0, 2] and twins.twin_of == [0, 0, 1, 1]
    expected_group_of, expected = shared_groups(programs, group_of, groups, [0, 0, 2, 2])
    assert as_sets((g.members, g.duration_ns) for g in twins.groups) == as_sets(expected)
    assert twins.matched == len(groups) == 12   # per step: two transfers, two data-parallel all-reduces
    assert [[g >= 0 for g in row] for row in twins.group_of] == [[g >= 0 for g in row] for row in expected_group_of]


def test_a_sparse_pipeline_simulates_as_every_rank_running():
    full = simulate([pp_dp_trace(r) for r in range(WORLD)], None, durations="measured")
    sparse = simulate([pp_dp_trace(r) for r in (0, 2)], None, durations="measured", copies=COPIES)
    assert sparse.timelines[1] is sparse.timelines[0] and len(sparse.groups) < len(full.groups)
    assert sparse.collectives_matched == len(full.groups)
    for mine, theirs in zip(sparse.timelines, full.timelines):
        assert np.array_equal(mine.start, theirs.start) and np.array_equal(mine.end, theirs.end)
        assert mine.arrival == theirs.arrival


def test_a_copy_that_sends_where_its_twins_peer_does_not_receive_is_left_to_the_full_collation():
    """Rank 1's transfer goes to rank 2 (its map keeps 'pp0'): rank 2 then receives one transfer from two
    senders, which only the full collation can say."""
    wrong = {**COPIES, 1: {"twin": 0, "comm_map": {"dp0": ["dp0", 1, [1, 0]]}}}
    programs, times = sparse_programs(wrong)
    assert collate_twins(programs, times) is None


def test_a_full_set_of_traces_is_left_to_the_full_collation():
    programs = [build_program(pp_dp_trace(r)) for r in range(WORLD)]
    assert collate_twins(programs, assign_durations(programs, None, "measured", None, 2)) is None


def test_a_copy_that_maps_two_of_its_twins_communicators_onto_one_is_left_to_the_full_collation():
    """Rank 1 would make its twin's pipeline transfers and all-reduces on one communicator, where the full
    collation numbers them together."""
    merged = {**COPIES, 1: {"twin": 0, "comm_map": {"pp0": ["dp0", 0, [0, 1]], "dp0": ["dp0", 1, [1, 0]]}}}
    programs, times = sparse_programs(merged)
    assert collate_twins(programs, times) is None
