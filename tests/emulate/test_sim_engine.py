"""Grouped NCCL calls in the engine: the collectives one rank issues inside one ncclGroupStart/ncclGroupEnd batch
(a pipeline stage's send and recv from torch's batch_isend_irecv, coalesced collectives) are one unit whose members
progress concurrently, each matched with its peers, the unit ending when its last member does.

Every pipeline exchange below issues its send before its recv on every rank: serialised on one stream, each send
waits for a recv its peer issues only after its own send, so without the group the traces deadlock. Launch latency
is 0 (``meta.launch_latency_us``) so the arithmetic stays plain."""
from __future__ import annotations

import pytest

from stepcast.emulate.report import build_report
from stepcast.emulate.sim.engine import SimulationDeadlock
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate

COMM_STREAM = 2


def builder(rank: int, world_size: int) -> TraceBuilder:
    b = TraceBuilder(rank=rank, world_size=world_size, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    return b


def compute(b: TraceBuilder, us: float) -> None:
    """A kernel on the compute stream that the communication stream then waits for (as torch orders them)."""
    b.kernel(stream=1, duration_us=us)
    b.record(event=1, stream=1)
    b.wait(stream=COMM_STREAM, event=1)


def p2p(b: TraceBuilder, op: str, peer: int, us: float, group: int | None, comm: str = "world") -> None:
    ev = b.collective(op=op, stream=COMM_STREAM, comm=comm, peer=peer, duration_us=us)
    ev["ranks"] = b.world_size
    if group is not None:
        ev["group"] = group


def report_of(builders: list[TraceBuilder]) -> dict:
    docs = []
    for b in builders:
        b.device_sync()
        b.iteration(1, end=True)
        docs.append(b.doc())
    return build_report(simulate(docs, "h100-sxm", durations="measured"))


TRANSFER_US = {(0, 1): 20.0, (1, 0): 30.0, (1, 2): 25.0, (2, 1): 15.0, (2, 3): 40.0, (3, 2): 10.0}


def exchange(b: TraceBuilder, peer: int, group: int | None) -> None:
    """send to ``peer``, then recv from it (one batch_isend_irecv when ``group`` is set)."""
    p2p(b, "send", peer, TRANSFER_US[(b.rank, peer)], group)
    p2p(b, "recv", peer, TRANSFER_US[(peer, b.rank)], group)


def two_stage_pipeline(grouped: bool) -> list[TraceBuilder]:
    builders = []
    for rank, compute_us in ((0, 100.0), (1, 50.0)):
        b = builder(rank, 2)
        compute(b, compute_us)
        exchange(b, 1 - rank, 7 if grouped else None)
        builders.append(b)
    return builders


def test_a_grouped_send_and_recv_progress_together_on_two_ranks():
    """Both transfers start when the later rank (100 us) reaches the group and run concurrently: 100 + max(20,
    30) us."""
    report = report_of(two_stage_pipeline(grouped=True))
    assert report["collectives_matched"] == 2
    assert report["iteration_time_ms"] == pytest.approx(0.130)


def test_the_same_exchange_serialised_on_one_stream_deadlocks():
    with pytest.raises(SimulationDeadlock):
        report_of(two_stage_pipeline(grouped=False))


def four_stage_pipeline(grouped: bool) -> list[TraceBuilder]:
    """One 1F1B steady-state step of a 4-stage pipeline: each stage computes, then exchanges with the next stage
    (send activation, recv gradient) and with the previous one (send gradient, recv activation), each exchange one
    group (Megatron's send_forward_recv_backward / send_backward_recv_forward)."""
    builders = []
    for rank in range(4):
        b = builder(rank, 4)
        compute(b, 10.0 * (rank + 1))
        if rank < 3:
            exchange(b, rank + 1, 1 if grouped else None)
        if rank > 0:
            exchange(b, rank - 1, 2 if grouped else None)
        builders.append(b)
    return builders


def test_a_four_stage_pipeline_exchange_completes_when_grouped():
    """By hand: stage 3's exchange with stage 2 starts at 40 us (stage 3's compute; stage 2's first group is its
    exchange with stage 3, reached at 30 us) and ends at 40 + max(40, 10) = 80; stage 2's second group (with
    stage 1) then starts at 80 and ends at 80 + max(15, 25) = 105; stage 1's first group is that same exchange, its
    second (with stage 0, ready at 10 us) starts at 105 and ends at 105 + max(30, 20) = 135. The slowest rank
    ends at 135 us."""
    report = report_of(four_stage_pipeline(grouped=True))
    assert report["collectives_matched"] == 6
    assert report["iteration_time_ms"] == pytest.approx(0.135)


def test_the_four_stage_exchange_serialised_deadlocks():
    with pytest.raises(SimulationDeadlock):
        report_of(four_stage_pipeline(grouped=False))


def test_coalesced_collectives_on_one_communicator_take_turns_and_on_two_overlap():
    """Two all-gathers in one group share their communicator's links (NCCL runs them through the same channels):
    10 + 20 us; on two communicators they overlap: max(10, 20)."""
    def run(comms: tuple[str, str]) -> float:
        builders = []
        for rank in range(2):
            b = builder(rank, 2)
            compute(b, 5.0)
            for seq, (comm, us) in enumerate(zip(comms, (10.0, 20.0))):
                ev = b.collective(op="all_gather", stream=COMM_STREAM, comm=comm,
                                  comm_seq=seq if comms[0] == comms[1] else 0, duration_us=us)
                ev["group"] = 3
            builders.append(b)
        return report_of(builders)["iteration_time_ms"]

    assert run(("dp", "dp")) == pytest.approx(0.035)
    assert run(("dp", "tp")) == pytest.approx(0.025)


def test_a_grouped_unit_holds_its_stream_until_its_last_member_ends():
    """A kernel issued on the communication stream after the group starts only when the longer transfer (30 us)
    has ended: 100 + 30 + 5."""
    builders = two_stage_pipeline(grouped=True)
    for b in builders:
        b.kernel(stream=COMM_STREAM, duration_us=5.0)
    assert report_of(builders)["iteration_time_ms"] == pytest.approx(0.135)


def test_an_event_recorded_on_an_idle_stream_is_reached_when_its_record_arrives():
    # cudaEventElapsedTime between two records around a launch-bound call is the host's time between them: the GPU
    # reaches a record on an idle stream when the record arrives (issue + latency), not when its stream last ran
    b = TraceBuilder(meta={"launch_latency_us": 2.0})
    b.iteration(0)
    b.kernel(stream=1, duration_us=5.0)
    b.record(event=1, stream=1, gap_us=30.0)     # the stream went idle at 7 us; the record is issued at 30
    b.kernel(stream=1, duration_us=4.0, gap_us=20.0)
    b.record(event=2, stream=1, gap_us=1.0)      # issued at 51, behind the kernel (52-56)
    b.device_sync()
    result = simulate([b.doc()], "h100-sxm", durations="measured")
    end = result.timelines[0].end
    first, second = (i for i, e in enumerate(b.events) if e["kind"] == "event_record")
    assert (end[first], end[second]) == pytest.approx((32.0, 56.0))


def all_to_all_ring(zero_byte_members: bool) -> list[dict]:
    """One ring rotation of 4 ranks as torch's all_to_all_single issues it: a send to the next rank and a recv from
    the previous one carry the data (5 us each), and with ``zero_byte_members`` a zero-count send and recv to every
    other rank (torch passes zero counts to NCCL, which uses them to synchronise). Rank 2 computes 100 us, the
    others 10."""
    docs = []
    for rank in range(4):
        b = builder(rank, 4)
        compute(b, 100.0 if rank == 2 else 10.0)
        for peer in range(4):
            data = peer in ((rank + 1) % 4, (rank - 1) % 4)
            if peer == rank or not (data or zero_byte_members):
                continue
            for op, carries in (("send", peer == (rank + 1) % 4), ("recv", peer == (rank - 1) % 4)):
                ev = b.collective(op=op, stream=COMM_STREAM, peer=peer, duration_us=5.0 if carries else 0.0,
                                  nbytes=1 << 20 if carries else 0)
                ev.update(ranks=4, group=3)
        b.device_sync()
        b.iteration(1, end=True)
        docs.append(b.doc())
    return docs


def test_zero_byte_members_of_a_grouped_exchange_hold_every_rank_until_its_slowest_peer_arrives():
    """Rank 0 moves data only with ranks 1 and 3 (ready at 10 us: its exchange ends at 15), but a zero-byte send and
    recv with rank 2 still pair with rank 2's, as NCCL pairs them, so its group ends when rank 2 arrives at 100 us."""
    end_of_rank_0 = [simulate(all_to_all_ring(zero), "h100-sxm", durations="measured").timelines[0].end_time
                     for zero in (False, True)]
    assert end_of_rank_0 == [pytest.approx(15.0), pytest.approx(100.0)]


def test_running_the_engine_again_on_the_same_collective_groups_gives_the_same_timelines():
    """The collectives' groups carry their members' arrivals while a run goes; a second run on them (the contention
    pass of emulate.simulate runs the engine twice) starts with none arrived, so a rank that reaches a collective
    first still waits for its peer."""
    from stepcast.emulate.sim.collate import collate
    from stepcast.emulate.sim.durations import assign_durations
    from stepcast.emulate.sim.engine import run
    from stepcast.emulate.sim import host as host_model
    from stepcast.emulate.sim.program import build_program

    docs = []
    for rank, lead in ((0, 0.0), (1, 500.0)):
        b = TraceBuilder(rank=rank, world_size=2, meta={"launch_latency_us": 0.0})
        b.kernel(stream=1, duration_us=10.0 + lead)
        b.collective(op="all_reduce", stream=1, duration_us=5.0)
        b.device_sync()
        docs.append(b.doc())
    programs = [build_program(d) for d in docs]
    times = assign_durations(programs, None, "measured", None, 2)
    group_of, groups = collate(programs, times)
    setups = host_model.plan(programs, host_speed=1.0, latency_us=[0.0, 0.0], costs_us={}, work=None).setups
    first = run(programs, times, group_of, groups, setups, 16)
    second = run(programs, times, group_of, groups, setups, 16)
    assert first[0].end_time == pytest.approx(515.0)
    assert [t.end_time for t in second] == [t.end_time for t in first]
