"""Collation: match each collective across the ranks' traces, so that the simulator can start it when its last
member arrives (design notes, "Collation and simulation")."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepcast.emulate.sim.copies import COMM_MAP, mapped_view, twin_indices
from stepcast.emulate.sim.durations import Durations
from stepcast.emulate.sim.program import COLLECTIVE, RankProgram
from stepcast.errors import InputError


@dataclass
class CollectiveGroup:
    """One collective call as every member rank sees it."""

    key: tuple
    expected: int
    members: list[tuple[int, int]] = field(default_factory=list)   # (rank index, event position)
    duration_ns: float = 0.0
    arrived: int = 0
    last_arrival: float = 0.0


class CollectiveMismatch(InputError):
    """The ranks' traces disagree on a collective: the message (one line) names the ranks, events and call."""


#: Fields every member of a collective must agree on. ``bytes`` is each rank's own traffic: equal for every
#: collective whose members move the same amount (all_to_all's split sizes may differ per rank, so it is exempt).
AGREED_FIELDS = ("op", "dtype", "bytes")
UNEVEN_OPS = frozenset({"all_to_all", "alltoall", "all_to_allv"})


@dataclass(frozen=True)
class Columns:
    """A rank's collectives as collation reads them, read from its event table once per distinct program (a
    sparse run's copy shares its twin's: :func:`emulate.sim.copies.twin_indices`)."""

    rows: list[tuple[int, Any, Any, Any, Any, Any, Any]]   # (position, op, comm, comm_rank, peer, comm_seq, ranks)
    agreed: dict[int, tuple[Any, ...]]                       # position -> its AGREED_FIELDS


def columns_of(programs: list[RankProgram]) -> list[Columns]:
    twin = twin_indices(programs)
    out: list[Columns] = []
    for r, prog in enumerate(programs):
        if twin[r] != r:
            out.append(out[twin[r]])
            continue
        positions = np.flatnonzero(prog.kind_array == COLLECTIVE).tolist()
        if not positions:
            out.append(Columns([], {}))
            continue
        table = prog.events
        column = {name: [values[i] for i in positions] for name in ("op", "comm", "comm_rank", "peer", "comm_seq",
                                                                    "ranks", *AGREED_FIELDS)
                  for values in (table.field(name),)}
        rows = list(zip(positions, *(column[n] for n in ("op", "comm", "comm_rank", "peer", "comm_seq", "ranks"))))
        out.append(Columns(rows, dict(zip(positions, zip(*(column[f] for f in AGREED_FIELDS))))))
    return out


def _describe_call(prog: RankProgram, i: int) -> str:
    ev = prog.events[i]
    size = f" of {ev['bytes']} B" if ev.get("bytes") is not None else ""
    return f"rank {prog.rank} ({prog.source} events[{i}]: {ev.get('op')} {ev.get('dtype') or ''}{size})"


def _call_name(key: tuple) -> str:
    if key[0] == "p2p":
        return f"point-to-point transfer #{key[4]} from rank {key[2]} to rank {key[3]} on communicator {key[1]!r}"
    return f"collective #{key[2]} on communicator {key[1]!r}"


def disagreement(first: tuple[Any, ...], other: tuple[Any, ...], p2p: bool) -> list[str]:
    """The :data:`AGREED_FIELDS` two members of one collective record different values of (a transfer pairs a
    send with a recv: not op; uneven ops: not bytes)."""
    if other is first:
        return []
    return [f for j, f in enumerate(AGREED_FIELDS) if not (f == "bytes" and first[0] in UNEVEN_OPS)
            and not (f == "op" and p2p) and first[j] is not None and other[j] is not None and first[j] != other[j]]


def _check_members_agree(grp: CollectiveGroup, programs: list[RankProgram], columns: list[Columns]) -> None:
    (r0, i0), rest = grp.members[0], grp.members[1:]
    first = columns[r0].agreed[i0]
    for r, i in rest:
        differ = disagreement(first, columns[r].agreed[i], grp.key[0] == "p2p")
        if differ:
            raise CollectiveMismatch(
                f"{_call_name(grp.key)}: {_describe_call(programs[r0], i0)} and {_describe_call(programs[r], i)} "
                f"disagree on {', '.join(differ)}: the ranks' collective orders differ (a call one rank skipped "
                "or made in another order)")


def _describe_missing(grp: CollectiveGroup, programs: list[RankProgram]) -> str:
    present = sorted(programs[r].rank for r, _ in grp.members)
    r0, i0 = grp.members[0]
    absent = ""
    if grp.expected == len(programs):  # a world communicator: the absent members are known
        absent = f"; rank(s) {sorted(set(p.rank for p in programs) - set(present))} never made it"
    return (f"{_call_name(grp.key)}: only rank(s) {present} of its {grp.expected} members reached it "
            f"(first: {_describe_call(programs[r0], i0)}){absent}: the traces are a full set, so a member is "
            "missing a call")


def collate(programs: list[RankProgram], durations: Durations) -> tuple[list[list[int]], list[CollectiveGroup]]:
    """Match collectives across ranks by (communicator, sequence number); point-to-point ops by (communicator,
    source, destination, n-th transfer between them). A transfer from a rank to itself (NCCL's all-to-all as grouped
    sends and receives includes each rank's own share) waits for no one and runs alone. Returns each rank's group
    index per event (-1: runs alone) and the groups.

    Matching needs every rank of the job: when the traces hold fewer ranks than ``world_size``, every collective
    runs alone with its own (recorded or predicted) duration. With every rank present, a collective whose members
    disagree (operation, dtype, bytes) or that some member never reached raises :class:`CollectiveMismatch`: the
    ranks' collective orders differ, and pairing them anyway would shift every later collective by one and still
    give a plausible report."""
    group_of = [[-1] * p.n_events for p in programs]
    world = {p.world_size for p in programs}
    if len(world) > 1:
        raise InputError(f"traces disagree on world_size: {', '.join(f'{p.source}={p.world_size}' for p in programs)}")
    ranks = [p.rank for p in programs]
    if len(set(ranks)) != len(ranks):
        dup = next(r for r in ranks if ranks.count(r) > 1)
        raise InputError(f"rank {dup} appears in more than one trace: "
                         f"{', '.join(p.source for p in programs if p.rank == dup)}")
    if len(programs) < programs[0].world_size or len(programs) == 1:
        return group_of, []

    columns = columns_of(programs)
    global_rank = communicator_members(_member_views(programs, columns))
    by_key: dict[tuple, CollectiveGroup] = {}
    for r, prog in enumerate(programs):
        seq_on: dict[Any, int] = defaultdict(int)
        p2p_seq: dict[tuple, int] = defaultdict(int)
        mapping = prog.meta.get(COMM_MAP)
        for i, op, comm, comm_rank, peer, seq, ranks in columns[r].rows:
            comm, _, peer = mapped_view(mapping, comm, comm_rank, peer)
            if op in ("send", "recv") and peer is not None:
                peer = global_rank.get((comm, int(peer)), int(peer))
                if peer == prog.rank:
                    continue   # to itself (an all-to-all's own share in a group call): no peer to wait for
                src, dst = (prog.rank, peer) if op == "send" else (peer, prog.rank)
                n = p2p_seq[(comm, src, dst)]
                p2p_seq[(comm, src, dst)] += 1
                key, expected = ("p2p", comm, src, dst, n), 2
            else:
                if seq is None:
                    seq = seq_on[comm]
                seq_on[comm] += 1
                key, expected = ("coll", comm, seq), int(ranks or prog.world_size)
            grp = by_key.get(key)
            if grp is None:
                grp = by_key[key] = CollectiveGroup(key=key, expected=expected)
            grp.members.append((r, i))
            if len(grp.members) > grp.expected:
                raise InputError(f"{prog.source}: events[{i}]: collective {key[1:]!r} has more members than its "
                                 f"{grp.expected} ranks (duplicate comm_seq?)")

    full = len(programs) == programs[0].world_size
    if full:
        for grp in by_key.values():
            _check_members_agree(grp, programs, columns)
        for grp in by_key.values():
            if len(grp.members) != grp.expected:
                raise CollectiveMismatch(_describe_missing(grp, programs))
    groups: list[CollectiveGroup] = []
    for grp in by_key.values():
        if len(grp.members) != grp.expected:
            continue  # some members' traces are absent (only when the set of traces is not full): run alone
        us = [float(durations.us[r][i]) for r, i in grp.members]
        all_measured = all(bool(durations.measured[r][i]) for r, i in grp.members)
        # A recorded collective duration includes the time its rank waited for the others: the last to arrive
        # waited least, so the smallest recorded duration is the transfer itself.
        grp.duration_ns = (min(us) if all_measured else max(us)) * 1e3
        for r, i in grp.members:
            group_of[r][i] = len(groups)
        groups.append(grp)
    return group_of, groups


def _member_views(programs: list[RankProgram], columns: list[Columns]) -> Iterator[tuple[Any, Any, int]]:
    """(communicator, rank within it, global rank) of every collective of every rank, as the rank makes it."""
    for prog, cols in zip(programs, columns):
        mapping = prog.meta.get(COMM_MAP)
        for _, _, comm, comm_rank, _, _, _ in cols.rows:
            comm, comm_rank, _ = mapped_view(mapping, comm, comm_rank, None)
            yield comm, comm_rank, prog.rank


def communicator_members(views: Iterable[tuple[Any, Any, int]]) -> dict[tuple[Any, int], int]:
    """(communicator, rank within it) -> global rank, from (communicator, rank within it or None, global rank)
    of the ranks' collectives in rank order: the first rank to record a number holds it (NCCL numbers a send's
    peer within the communicator: a pipeline stage's communicator {0, 2} calls rank 2 'peer 1')."""
    members: dict[tuple[Any, int], int] = {}
    users: dict[Any, set[int]] = defaultdict(set)
    for comm, comm_rank, rank in views:
        users[comm].add(rank)
        if comm_rank is not None:
            members.setdefault((comm, int(comm_rank)), rank)
    # A communicator whose members' numbers were not recorded (one made by ncclCommSplit): numbered by ascending
    # global rank, as torch.distributed.new_group orders its members (the split key is the rank).
    named = {comm for comm, _ in members}
    for comm, ranks in users.items():
        if comm not in named:
            for local, rank in enumerate(sorted(ranks)):
                members[(comm, local)] = rank
    return members
