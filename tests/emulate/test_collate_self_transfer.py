"""emulate.sim.collate: NCCL's all-to-all as grouped sends and receives includes each rank's transfer to itself; it
waits for no peer and runs alone (it was reported as a transfer its peer never reached)."""
from __future__ import annotations

from stepcast.emulate.sim.collate import collate
from stepcast.emulate.sim.durations import assign_durations
from stepcast.emulate.sim.program import build_program
from stepcast.emulate.sim.synthetic import TraceBuilder


def all_to_all_trace(rank: int) -> dict:
    """Context parallelism's all-to-all on 2 ranks: to itself (0 bytes) and to the other rank, each a send and a
    receive, peers numbered within the communicator."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.iteration(0)
    for peer, nbytes in sorted([(rank, 0), (1 - rank, 1 << 21)]):
        for op in ("send", "recv"):
            b.collective(op=op, comm="cp", peer=peer, nbytes=nbytes, stream=3, duration_us=3.0).update(comm_rank=rank)
    b.iteration(1, end=True)
    return b.doc()


def test_a_transfer_to_itself_runs_alone_and_the_transfers_between_ranks_pair_up():
    programs = [build_program(all_to_all_trace(r)) for r in (0, 1)]
    group_of, groups = collate(programs, assign_durations(programs, None, "measured", None, 2))
    assert sorted(g.key[2:4] for g in groups) == [(0, 1), (1, 0)]
    for r, prog in enumerate(programs):
        peers = [(ev.get("peer"), group_of[r][i]) for i, ev in enumerate(prog.events) if ev.get("kind") == "collective"]
        assert [g for peer, g in peers if peer == r] == [-1, -1]
        assert all(g >= 0 for peer, g in peers if peer != r)
