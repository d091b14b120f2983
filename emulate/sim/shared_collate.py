"""Collation of a sparse run on its twins alone: the collectives :func:`emulate.sim.collate.collate` would match
across every rank, with each copy replaced by its twin (:func:`emulate.sim.copies.shared_groups`), found without
visiting a copy's events.

A copy makes its twin's collectives on the communicators its map names (:data:`emulate.sim.copies.COMM_MAP`), so
every collective of the job is fixed by a few facts per rank and communicator: which of its twin's communicators
it maps to which of the job's, and for a point-to-point channel (communicator, peer, send or recv) which
(communicator, source, destination) it becomes. Ranks whose communicator of the job is made of the same twins'
communicators (every data-parallel replica's tensor-parallel group of one stage) match their collectives the
same way: that is computed once per such signature. The work grows with the ranks times the communicators of
their twins, not with the ranks times their collectives.

Exact or nothing: None wherever the full collation would differ or fail (a member missing or in excess, members
that disagree, a copy mapping two of its twin's communicators or channels onto one, durations not shared with
the twin, a set of traces that is not the whole job, a twin's collective that would belong to two groups); the
caller then collates every rank (which raises the full collation's error, if any)."""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from stepcast.emulate.sim.collate import CollectiveGroup, columns_of, communicator_members, disagreement
from stepcast.emulate.sim.copies import COMM_MAP, TwinCollectives, mapped_view, twin_indices
from stepcast.emulate.sim.durations import Durations
from stepcast.emulate.sim.program import RankProgram

P2P_OPS = ("send", "recv")


@dataclass
class _Twin:
    """One twin's collectives by communicator (coll: seq -> (event, expected)) and by channel (p2p events)."""

    coll: dict[Any, dict[Any, tuple[int, int]]]
    p2p: dict[tuple[Any, Any, str], list[int]]
    comm_ranks: dict[Any, list[Any]]    # the comm_rank values its events record on each communicator
    agreed: dict[int, tuple[Any, ...]]


def collate_twins(programs: list[RankProgram], durations: Durations) -> TwinCollectives | None:
    """The twins' collectives (module docstring), or None where only collating every rank is exact."""
    world = programs[0].world_size
    if len(programs) != world or len(programs) == 1 or any(p.world_size != world for p in programs):
        return None
    if len({p.rank for p in programs}) != len(programs):
        return None
    twin = twin_indices(programs)
    twins = sorted(set(twin))
    if len(twins) == len(programs):
        return None
    if any(durations.us[r] is not durations.us[t] or durations.measured[r] is not durations.measured[t]
           for r, t in enumerate(twin) if r != t):
        return None
    local = {t: j for j, t in enumerate(twins)}
    summaries = _summaries(programs, twins, world)
    if summaries is None:
        return None
    views = _views(programs, twin, summaries)
    if views is None:
        return None
    global_rank = _global_ranks(programs, twin, summaries)
    coll_of: dict[Any, Counter] = defaultdict(Counter)          # job's communicator -> (twin, comm) multiplicities
    channels: dict[tuple, list[tuple[int, Any, Any, str]]] = defaultdict(list)
    for r, prog in enumerate(programs):
        t, mapping = twin[r], prog.meta.get(COMM_MAP)
        for comm in summaries[t].coll:
            coll_of[views[r][comm]][(t, comm)] += 1
        seen: set[tuple] = set()
        for comm, peer, op in summaries[t].p2p:
            own, _, mapped = mapped_view(mapping, comm, None, peer)
            other = global_rank.get((own, int(mapped)), int(mapped))
            key = (own, prog.rank, other) if op == "send" else (own, other, prog.rank)
            if key in seen:
                return None   # two channels of the twin are one of this rank's: counted together in full
            seen.add(key)
            channels[key].append((t, comm, peer, op))
    found: dict[tuple, tuple[list[tuple[tuple[int, int], ...]], int] | None] = {}
    signatures: list[tuple] = [("coll", frozenset(c.items())) for c in coll_of.values()]
    for sides in channels.values():
        if len(sides) != 2 or {s[3] for s in sides} != set(P2P_OPS):
            return None   # a transfer without its peer, or with two
        signatures.append(("p2p", tuple(sorted(sides, key=lambda s: s[3] != "send"))))
    matched = 0
    for sig in signatures:
        if sig not in found:
            found[sig] = _coll_groups(sig[1], summaries, local) if sig[0] == "coll" else \
                _p2p_groups(sig[1], summaries, local)
        if found[sig] is None:
            return None
        matched += found[sig][1]
    return _reduce(programs, twin, twins, local, summaries, durations, found, matched)


def _summaries(programs: list[RankProgram], twins: list[int], world: int) -> dict[int, _Twin] | None:
    columns = columns_of(programs)
    out: dict[int, _Twin] = {}
    for t in twins:
        coll: dict[Any, dict[Any, tuple[int, int]]] = defaultdict(dict)
        p2p: dict[tuple[Any, Any, str], list[int]] = defaultdict(list)
        comm_ranks: dict[Any, list[Any]] = defaultdict(list)
        seq_on: Counter = Counter()
        for i, op, comm, comm_rank, peer, seq, ranks in columns[t].rows:
            recorded = comm_ranks[comm]
            if comm_rank is not None and comm_rank not in recorded:
                recorded.append(comm_rank)
            if op in P2P_OPS and peer is not None:
                p2p[(comm, peer, op)].append(i)
                continue
            if seq is None:
                seq = seq_on[comm]
            seq_on[comm] += 1
            if seq in coll[comm]:
                return None   # a duplicate comm_seq: the full collation says so
            coll[comm][seq] = (i, int(ranks or world))
        out[t] = _Twin(dict(coll), dict(p2p), dict(comm_ranks), columns[t].agreed)
    return out


def _views(programs: list[RankProgram], twin: list[int], summaries: dict[int, _Twin]) -> list[dict] | None:
    """Per rank, the job's communicator of each of its twin's; None where two land on one (counted together)."""
    out: list[dict] = []
    for r, prog in enumerate(programs):
        mapping = prog.meta.get(COMM_MAP)
        view = {comm: mapped_view(mapping, comm, None, None)[0] for comm in summaries[twin[r]].comm_ranks}
        if len(set(view.values())) != len(view):
            return None
        out.append(view)
    return out


def _global_ranks(programs: list[RankProgram], twin: list[int],
                  summaries: dict[int, _Twin]) -> dict[tuple[Any, int], int]:
    """(communicator, rank within it) -> global rank, as the full collation finds it from every rank's events
    (:func:`emulate.sim.collate.communicator_members`), from each rank's communicators and their numbers."""
    def views():
        for r, prog in enumerate(programs):
            mapping = prog.meta.get(COMM_MAP)
            for comm, recorded in summaries[twin[r]].comm_ranks.items():
                for comm_rank in recorded or [None]:
                    own, own_rank, _ = mapped_view(mapping, comm, comm_rank, None)
                    yield own, own_rank, prog.rank

    return communicator_members(views())


def _agree(members: list[tuple[int, int]], summaries: dict[int, _Twin], p2p: bool) -> bool:
    """The members' recorded op, dtype and bytes agree, as the full collation requires."""
    first = summaries[members[0][0]].agreed[members[0][1]]
    return not any(disagreement(first, summaries[t].agreed[i], p2p) for t, i in members[1:])


def _coll_groups(pairs: frozenset, summaries: dict[int, _Twin],
                 local: dict[int, int]) -> tuple[list[tuple[tuple[int, int], ...]], int] | None:
    """The groups of a job's communicator made of these (twin, communicator) pairs, each counted as often as
    ranks make it: one per sequence number, with every pair's event of that number."""
    seqs = {s for (t, comm), _ in pairs for s in summaries[t].coll[comm]}
    out = []
    for s in sorted(seqs, key=repr):   # a fixed order of groups, run to run
        present = [((t, comm), n) for (t, comm), n in pairs if s in summaries[t].coll[comm]]
        expected = {summaries[t].coll[comm][s][1] for (t, comm), _ in present}
        if len(expected) != 1 or sum(n for _, n in present) != expected.pop():
            return None
        members = sorted({(t, summaries[t].coll[comm][s][0]) for (t, comm), _ in present})
        if not _agree(members, summaries, p2p=False):
            return None
        out.append(tuple((local[t], i) for t, i in members))
    return out, len(seqs)


def _p2p_groups(sides: tuple, summaries: dict[int, _Twin],
                local: dict[int, int]) -> tuple[list[tuple[tuple[int, int], ...]], int] | None:
    """The transfers of one channel: the n-th send of one side with the n-th recv of the other."""
    (ts, cs, ps, _), (tr, cr, pr, _) = sides
    sends, recvs = summaries[ts].p2p[(cs, ps, "send")], summaries[tr].p2p[(cr, pr, "recv")]
    if len(sends) != len(recvs):
        return None
    out = []
    for i, j in zip(sends, recvs):
        members = sorted({(ts, i), (tr, j)})
        if not _agree(members, summaries, p2p=True):
            return None
        out.append(tuple((local[t], k) for t, k in members))
    return out, len(sends)


def _reduce(programs: list[RankProgram], twin: list[int], twins: list[int], local: dict[int, int],
            summaries: dict[int, _Twin], durations: Durations, found: dict, matched: int) -> TwinCollectives | None:
    """Groups with the same members are one; a twin's event in two different groups is not a partition."""
    group_of = [[-1] * programs[t].n_events for t in twins]
    groups: list[CollectiveGroup] = []
    index: dict[tuple[tuple[int, int], ...], int] = {}
    for result in found.values():
        for members in result[0]:
            if members in index:
                continue
            g = index[members] = len(groups)
            for j, i in members:
                if group_of[j][i] >= 0:
                    return None
                group_of[j][i] = g
            us = [float(durations.us[twins[j]][i]) for j, i in members]
            all_measured = all(bool(durations.measured[twins[j]][i]) for j, i in members)
            groups.append(CollectiveGroup(key=("shared", g), expected=len(members), members=list(members),
                                          duration_ns=(min(us) if all_measured else max(us)) * 1e3))
    for t in twins:   # every collective of a twin is matched, as the full collation of a whole job requires
        s = summaries[t]
        events = [i for by_seq in s.coll.values() for i, _ in by_seq.values()] + \
            [i for positions in s.p2p.values() for i in positions]
        if any(group_of[local[t]][i] < 0 for i in events):
            return None
    return TwinCollectives(twins, [local[t] for t in twin], group_of, groups, matched)
