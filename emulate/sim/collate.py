"""Collation: match each collective across the ranks' traces, so that the simulator can start it when its last
member arrives (design notes, "Collation and simulation")."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulate.sim.durations import Durations
from emulate.sim.program import COLLECTIVE, RankProgram


@dataclass
class CollectiveGroup:
    """One collective call as every member rank sees it."""

    key: tuple
    expected: int
    members: list[tuple[int, int]] = field(default_factory=list)   # (rank index, event position)
    duration_ns: float = 0.0
    arrived: int = 0
    last_arrival: float = 0.0



def collate(programs: list[RankProgram], durations: Durations) -> tuple[list[list[int]], list[CollectiveGroup]]:
    """Match collectives across ranks by (communicator, sequence number); point-to-point ops by (communicator,
    source, destination, n-th transfer between them). Returns each rank's group index per event (-1: runs alone)
    and the groups.

    Matching needs every rank of the job: when the traces hold fewer ranks than ``world_size``, every collective
    runs alone with its own (recorded or predicted) duration."""
    group_of = [[-1] * p.n_events for p in programs]
    world = {p.world_size for p in programs}
    if len(world) > 1:
        raise ValueError(f"traces disagree on world_size: {', '.join(f'{p.source}={p.world_size}' for p in programs)}")
    ranks = [p.rank for p in programs]
    if len(set(ranks)) != len(ranks):
        dup = next(r for r in ranks if ranks.count(r) > 1)
        raise ValueError(f"rank {dup} appears in more than one trace: "
                         f"{', '.join(p.source for p in programs if p.rank == dup)}")
    if len(programs) < programs[0].world_size or len(programs) == 1:
        return group_of, []

    by_key: dict[tuple, CollectiveGroup] = {}
    for r, prog in enumerate(programs):
        seq_on: dict[Any, int] = defaultdict(int)
        p2p_seq: dict[tuple, int] = defaultdict(int)
        for i in np.flatnonzero(prog.kind_array == COLLECTIVE).tolist():
            ev = prog.events[i]
            op, comm = ev.get("op"), ev.get("comm")
            if op in ("send", "recv") and ev.get("peer") is not None:
                src, dst = (prog.rank, int(ev["peer"])) if op == "send" else (int(ev["peer"]), prog.rank)
                n = p2p_seq[(comm, src, dst)]
                p2p_seq[(comm, src, dst)] += 1
                key, expected = ("p2p", comm, src, dst, n), 2
            else:
                seq = ev.get("comm_seq")
                if seq is None:
                    seq = seq_on[comm]
                seq_on[comm] += 1
                key, expected = ("coll", comm, seq), int(ev.get("ranks") or prog.world_size)
            grp = by_key.get(key)
            if grp is None:
                grp = by_key[key] = CollectiveGroup(key=key, expected=expected)
            grp.members.append((r, i))
            if len(grp.members) > grp.expected:
                raise ValueError(f"{prog.source}: events[{i}]: collective {key[1:]!r} has more members than its "
                                 f"{grp.expected} ranks (duplicate comm_seq?)")

    groups: list[CollectiveGroup] = []
    for grp in by_key.values():
        if len(grp.members) != grp.expected:
            continue  # some members' traces are absent: run alone
        us = [float(durations.us[r][i]) for r, i in grp.members]
        all_measured = all(bool(durations.measured[r][i]) for r, i in grp.members)
        # A recorded collective duration includes the time its rank waited for the others: the last to arrive
        # waited least, so the smallest recorded duration is the transfer itself.
        grp.duration_ns = (min(us) if all_measured else max(us)) * 1e3
        for r, i in grp.members:
            group_of[r][i] = len(groups)
        groups.append(grp)
    return group_of, groups
