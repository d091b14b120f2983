"""Ranks of a sparse run that did not run (``stepcast run --run-ranks``): each is simulated as a copy of its twin's
program, sharing the twin's event arrays (no second copy of a trace in memory), with its own rank id and its own
communicators (:mod:`emulate.roles`): a collective of the copy is its twin's, on the communicator ``comm_map``
names, as that communicator's member ``rank``; a point-to-point peer is renumbered the same way.

The simulation's stages work on the twins and share with their copies where that is exact (:func:`twin_indices`):
durations, host gaps and report entries are the twin's; collectives are matched on the twins alone
(:mod:`emulate.sim.shared_collate`, or :func:`shared_groups` after a collation of every rank) and the engine walks
the twins, each copy sharing its twin's timeline (:func:`run_twins`). A copy's collectives keep its twin's specs,
placement on nodes included (``spec.ranks_per_node``, recorded at capture for the twin's communicator): the same
as the copy's own where its communicators are its twin's moved along the job's layout, as :mod:`emulate.roles`
builds them."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from stepcast.emulate.sim.program import RankProgram
from stepcast.errors import InputError

COMM_MAP = "comm_map"  # RankProgram.meta key: {twin's communicator: (own communicator, own rank, peer numbers)}


def with_copies(programs: list[RankProgram], copies: dict[int, dict[str, Any]]) -> list[RankProgram]:
    """``programs`` plus one program per copy (``{rank: {"twin": rank, "comm_map": {...}}}``), sorted by rank.
    A copy shares every array of its twin's program; only ``rank``, ``source`` and ``meta`` are its own."""
    by_rank = {p.rank: p for p in programs}
    out = list(programs)
    for rank, copy in copies.items():
        twin = by_rank.get(int(copy["twin"]))
        if twin is None:
            raise InputError(f"copies: rank {rank} copies rank {copy['twin']}, whose trace is not among the traces")
        meta = {**twin.meta, "copied_from": twin.rank, COMM_MAP: copy.get("comm_map") or {}}
        out.append(dataclasses.replace(twin, rank=int(rank), source=f"{twin.source} (as rank {rank})", meta=meta))
    return sorted(out, key=lambda p: p.rank)


#: RankProgram fields a rank owns; every other field of a copy is its twin's, the same object (:func:`with_copies`)
OWN_FIELDS = frozenset({"rank", "source", "meta"})
COPY_META = frozenset({"copied_from", COMM_MAP})   # meta keys a copy adds to its twin's


def twin_indices(programs: list[RankProgram]) -> list[int]:
    """Per program, the index of the first program it mirrors: every column the same object (a sparse run's copy
    and its twin, :func:`with_copies`) and the same meta but for the copy's own keys; itself when none. What a
    stage computes from those alone (durations, host gaps, the report of a shared timeline) is then computed once
    for the first and shared, exactly: the copy's inputs are its twin's."""
    names = [f.name for f in dataclasses.fields(RankProgram) if f.name not in OWN_FIELDS]
    first: dict[tuple[int, ...], int] = {}
    out: list[int] = []
    for k, prog in enumerate(programs):
        j = first.setdefault(tuple(id(getattr(prog, n)) for n in names), k)
        if j != k and _own_meta(programs[j].meta) != _own_meta(prog.meta):
            j = k
        out.append(j)
    return out


def _own_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in COPY_META}


def comm_view(prog: RankProgram, ev: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(communicator, rank in it, peer) of a collective event as ``prog``'s rank makes it."""
    return mapped_view(prog.meta.get(COMM_MAP), ev.get("comm"), ev.get("comm_rank"), ev.get("peer"))


def mapped_view(mapping: dict[Any, Any] | None, comm: Any, comm_rank: Any, peer: Any) -> tuple[Any, Any, Any]:
    """(communicator, rank in it, peer) of a twin's collective as made by the copy whose map is ``mapping``
    (:data:`COMM_MAP`; None or empty: as the twin makes it)."""
    if mapping:
        entry = mapping.get(comm)
        if entry is not None:
            comm, comm_rank, numbers = entry[0], entry[1], entry[2]
            if peer is not None and 0 <= int(peer) < len(numbers):
                peer = numbers[int(peer)]
    return comm, comm_rank, peer


def shared_groups(programs: list[RankProgram], group_of: list[list[int]], groups: list[Any],
                  twin_index: list[int]) -> tuple[list[list[int]], list[tuple[list[tuple[int, int]], float]]] | None:
    """The collectives as the twins alone see them: each member (copy, event) becomes (its twin, event), members
    made twice count once, and groups that come out with the same members are one. None where that is not a
    partition (an event of a twin would belong to two different groups, or merged groups differ in duration): the
    copies are then not an exact mirror of their twins and every rank must be walked."""
    twins = sorted(set(twin_index))
    local = {k: j for j, k in enumerate(twins)}
    out_of: list[list[int]] = [[-1] * programs[k].n_events for k in twins]
    out: list[tuple[list[tuple[int, int]], float]] = []
    by_members: dict[tuple[tuple[int, int], ...], int] = {}
    for grp in groups:
        members = tuple(sorted({(local[twin_index[r]], i) for r, i in grp.members}))
        index = by_members.get(members)
        if index is None:
            index = by_members[members] = len(out)
            out.append((list(members), grp.duration_ns))
        elif out[index][1] != grp.duration_ns:
            return None
        for j, i in members:
            if out_of[j][i] not in (-1, index):
                return None
            out_of[j][i] = index
    for k, j in local.items():   # a collective the twin makes alone must not be one its copies make together
        if any(g >= 0 and group_of[k][i] < 0 for i, g in enumerate(out_of[j])):
            return None
    return out_of, out


@dataclass
class TwinCollectives:
    """The collectives as the twins alone see them (:func:`shared_groups`,
    :func:`emulate.sim.shared_collate.collate_twins`): the engine's input for the twins."""

    twins: list[int]                    # program index of each twin
    twin_of: list[int]                  # per program, its twin's position in ``twins``
    group_of: list[list[int]]           # per twin, its events' group (-1: runs alone)
    groups: list[Any]                   # CollectiveGroup; members are (twin position, event)
    matched: int                        # the collectives a collation of every rank matches


def run_shared(programs: list[RankProgram], durations: Any, group_of: list[list[int]], groups: list[Any],
               setups: list[Any], queue_depth: int) -> list[Any] | None:
    """The engine's timelines of every rank, walking only the ranks that ran: a copy shares its twin's timeline
    (the same object). Exact where the copies mirror their twins: same durations, same host setup, and
    collectives that pair twins as the copies pair each other (:func:`shared_groups`); None where they do not
    (the caller then walks every rank)."""
    from stepcast.emulate.sim.collate import CollectiveGroup

    index_of = {p.rank: k for k, p in enumerate(programs)}
    twin_index = [index_of[int(p.meta.get("copied_from", p.rank))] for p in programs]
    if twin_index == list(range(len(programs))):
        return None
    shared = shared_groups(programs, group_of, groups, twin_index)
    if shared is None:
        return None
    twin_group_of, twin_groups = shared
    twins = sorted(set(twin_index))
    local = {k: j for j, k in enumerate(twins)}
    reduced = [CollectiveGroup(key=("shared", n), expected=len(members), members=members, duration_ns=duration)
               for n, (members, duration) in enumerate(twin_groups)]
    return run_twins(programs, durations, TwinCollectives(twins, [local[t] for t in twin_index], twin_group_of,
                                                          reduced, len(groups)), setups, queue_depth)


def run_twins(programs: list[RankProgram], durations: Any, shared: TwinCollectives, setups: list[Any],
              queue_depth: int) -> list[Any] | None:
    """The engine walks the twins on their own collectives; each copy gets its twin's timeline (the same object).
    None where a copy's durations or host setup differ from its twin's (the caller then walks every rank)."""
    from stepcast.emulate.sim.engine import run

    twins = shared.twins
    for k, j in enumerate(shared.twin_of):
        t = twins[j]
        a, b = setups[k], setups[t]
        if k != t and (a.latency_us != b.latency_us or a.start_us != b.start_us or a.align_at != b.align_at
                       or not _same(a.gap_ns, b.gap_ns) or not _same(durations.us[k], durations.us[t])):
            return None
    times = dataclasses.replace(durations, us=[durations.us[k] for k in twins],
                                measured=[durations.measured[k] for k in twins],
                                fills=[durations.fills[k] for k in twins] if durations.fills else [])
    timelines = run([programs[k] for k in twins], times, shared.group_of, shared.groups, [setups[k] for k in twins],
                    queue_depth)
    return [timelines[j] for j in shared.twin_of]


def _same(a: Any, b: Any) -> bool:
    """Equal arrays; shared ones (a copy's, :func:`twin_indices`) without reading them."""
    import numpy as np

    return a is b or np.array_equal(a, b)
