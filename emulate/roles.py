"""Which ranks of a job run and which are copies: the ``--run-ranks`` list, the twin each absent rank copies, and the
communicators a copy uses in place of its twin's.

A sparse run (:mod:`emulate.sparse_store`) records every process group the script creates (the same list on every
rank: torch creates each group on every rank, in the same order) with the communicator the emulated NCCL made for it where a
running rank was a member. An absent rank ``a`` copies a twin ``t``: the running rank of the smallest group that
holds ``a`` and exactly one running rank (earliest created on ties): with the ranks of one data-parallel replica
running, ``a``'s data-parallel group, so the twin holds the same model shard; with one rank per pipeline stage
running, ``a``'s tensor-parallel group (or the tensor x data-parallel group of its stage). The groups that partition the
world (every tensor-parallel group, every data-parallel group, every pipeline group: :func:`families`) give every rank
coordinates, its position in its group of each; the world permutation ``sigma`` adds the coordinates of ``a`` minus
those of ``t`` to every rank's, which maps ``t`` to ``a`` and each of ``t``'s groups to the group of ``a`` in the same
role (``t``'s pipeline group to ``a``'s, its data-parallel group to ``a``'s). A copy's collectives are its twin's with
each communicator replaced by its image under ``sigma``, and its rank within it (and a point-to-point peer) renumbered.
Groups no running rank belongs to have no communicator: they are named ``sparse:<group name>``. Where no group holds
``a`` with exactly one running rank (torchtitan makes no group of a pipeline stage's ranks, so with one rank per stage
running, a rank off both its stage leader's tensor- and data-parallel groups has none), the twin is the running rank
at ``a``'s coordinates along the families the running ranks differ in (its stage's). Where that finds none either, or
the groups give no coordinates (no grid structure), ``sigma`` shifts every rank by ``a - t`` (modulo the world),
``t`` being the running rank at ``a``'s position modulo the number of running ranks, and the report warns."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from stepcast.errors import InputError

RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class RunRanksError(InputError):
    """A ``--run-ranks`` value that does not parse or does not fit the job; the message is one line."""


def parse_ranks(text: str, world: int, option: str) -> list[int]:
    """``'0-7,16-23'`` or ``'0,1,2'`` -> sorted distinct ranks, each below ``world``; errors name ``option``."""
    ranks: set[int] = set()
    for part in text.replace(" ", "").split(","):
        m = RANGE.match(part)
        if not m:
            raise RunRanksError(f"{option} {text!r}: expected ranks and ranges like 0-7,16-23, found {part!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise RunRanksError(f"{option} {text!r}: range {part} runs backwards")
        ranks.update(range(lo, hi + 1))
    if max(ranks) >= world:
        raise RunRanksError(f"{option} {text!r}: rank {max(ranks)} is outside the job of {world} ranks "
                            "(--nproc x --nodes)")
    return sorted(ranks)


def parse_run_ranks(text: str, world: int) -> list[int]:
    """The ranks of ``--run-ranks`` (:func:`parse_ranks`); rank 0 must be among them (it sets the job's first NCCL
    id and is every report's reference rank)."""
    ranks = parse_ranks(text, world, "--run-ranks")
    if 0 not in ranks:
        raise RunRanksError(f"--run-ranks {text!r}: rank 0 must run")
    return ranks


@dataclass
class Group:
    name: str
    ranks: list[int]
    index: int
    desc: str | None = None                                  # torch's group_desc (Megatron names its groups)
    comm: str | None = None                                  # its communicator, where a running rank made one
    p2p: dict[str, str] = field(default_factory=dict)        # point-to-point key 'a:b' -> communicator

    def comm_name(self) -> str:
        return self.comm or f"sparse:{self.name}"

    def p2p_name(self, key: str) -> str:
        return self.p2p.get(key) or f"sparse:{self.name}:{key}"


@dataclass
class Copy:
    """An absent rank: the running rank it copies and, per communicator of the twin, (its own communicator, its rank
    in it, the new number of each of the twin communicator's members)."""

    rank: int
    twin: int
    comm_map: dict[str, tuple[str, int, list[int]]]
    structured: bool = True


def groups_from_records(records: list[dict[str, Any]]) -> list[Group]:
    """Merge the ranks' records (op tables' ``sparse``): the groups (same list everywhere) with the communicator any
    running member made."""
    if not records:
        return []
    base = max(records, key=lambda r: len(r.get("groups", [])))
    groups = [Group(g["name"], list(g["ranks"]), i, g.get("desc")) for i, g in enumerate(base.get("groups", []))]
    by_name = {g.name: g for g in groups}
    for rec in records:
        for g in rec.get("groups", []):
            if g.get("comm") and g["name"] in by_name:
                by_name[g["name"]].comm = by_name[g["name"]].comm or g["comm"]
        for c in rec.get("comms", []):
            grp = by_name.get(c["group"])
            if grp is None:
                continue
            if ":" in c["key"]:
                a, b = sorted(int(x) for x in c["key"].split(":"))
                grp.p2p.setdefault(f"{a}:{b}", c["comm"])
            elif grp.comm is None:
                grp.comm = c["comm"]
    return groups


def _role_group(rank: int, groups: list[Group], running: set[int], size: int | None = None) -> Group | None:
    best = None
    for g in groups:
        if rank in g.ranks and sum(r in running for r in g.ranks) == 1 and (size is None or len(g.ranks) == size):
            if best is None or len(g.ranks) < len(best.ranks):
                best = g
    return best


def families(groups: list[Group], world: int) -> list[list[Group]]:
    """Sets of groups that partition the world (disjoint, of one size, covering every rank), in creation order:
    consecutive blocks of the groups of one ``desc`` (torch's group_desc: Megatron names every tensor-parallel
    group alike; DeviceMesh names them ``mesh_<dim>``, once per mesh having the dimension), and of the undescribed
    groups."""
    def partition(block: list[Group]) -> bool:
        size = len(block[0].ranks)
        return 1 < size < world and all(len(g.ranks) == size for g in block) and \
            len(block) * size == world and len({r for g in block for r in g.ranks}) == world

    def blocks(run: list[Group]) -> list[list[Group]]:
        """Consecutive blocks of ``run`` that partition the world."""
        found, i = [], 0
        while i < len(run):
            size = len(run[i].ranks)
            k = world // size if size else 0
            block = run[i:i + k]
            if k and len(block) == k and partition(block):
                found.append(block)
                i += k
            else:
                i += 1
        return found

    out: list[list[Group]] = []
    described: dict[tuple[str, int], list[Group]] = defaultdict(list)
    for g in groups:
        if g.desc is not None:
            described[(g.desc, len(g.ranks))].append(g)
    for run in described.values():  # one description may name several families (torch's DeviceMesh remakes a
        out += blocks(run)           # dimension's groups for every mesh that has it: torchtitan's mesh_tp x3)
    out += blocks([g for g in groups if g.desc is None])
    return out


def coordinates(groups: list[Group], world: int) -> list[list[Group]]:
    """The families that give every rank distinct coordinates (its position in its group of each family),
    smallest groups first, a family kept only when it tells more ranks apart; [] when they never identify every
    rank (no grid structure)."""
    chosen: list[list[Group]] = []
    keys: list[tuple[int, ...]] = [() for _ in range(world)]
    for family in sorted(families(groups, world), key=lambda f: (len(f[0].ranks), f[0].index)):
        pos = [0] * world
        for g in family:
            for q, r in enumerate(g.ranks):
                pos[r] = q
        extended = [k + (p,) for k, p in zip(keys, pos)]
        if len(set(extended)) > len(set(keys)):
            chosen.append(family)
            keys = extended
        if len(set(keys)) == world:
            return chosen
    return []


def _permutation(absent: int, run_ranks: list[int], groups: list[Group], world: int,
                 grid: list[list[Group]]) -> tuple[int, dict[int, int], bool]:
    """(twin, sigma as a map of the ranks it moves, whether the group structure gave it)."""
    running = set(run_ranks)
    home = _role_group(absent, groups, running)
    position = [[0] * world for _ in grid]
    for f, family in enumerate(grid):
        for g in family:
            for q, r in enumerate(g.ranks):
                position[f][r] = q
    twin = next(r for r in home.ranks if r in running) if home is not None else _grid_twin(absent, run_ranks,
                                                                                            position)
    if twin is None or not grid:
        twin = run_ranks[absent % len(run_ranks)] if twin is None else twin
        shift = absent - twin
        return twin, {x: (x + shift) % world for x in range(world)}, home is not None
    rank_at = {tuple(p[r] for p in position): r for r in range(world)}
    sizes = [len(family[0].ranks) for family in grid]
    delta = [p[absent] - p[twin] for p in position]
    sigma = {r: rank_at[tuple((p[r] + d) % n for p, d, n in zip(position, delta, sizes))] for r in range(world)}
    return twin, sigma, True


def _grid_twin(absent: int, run_ranks: list[int], position: list[list[int]]) -> int | None:
    """Where no group ties ``absent`` to exactly one running rank: the running rank at ``absent``'s coordinates along
    every family in which the running ranks take more than one position (the families the run tells apart, such as
    the pipeline stage when one rank per stage runs), the lowest if several; None when none is, or no family is
    told apart."""
    told_apart = [pos for pos in position if len({pos[r] for r in run_ranks}) > 1]
    if not told_apart:
        return None
    return next((r for r in run_ranks if all(pos[r] == pos[absent] for pos in told_apart)), None)


def _twin_comms(twin: int, groups: list[Group]) -> list[tuple[str, Group, list[int], str | None]]:
    """(communicator, group, its members in communicator order, p2p key or None) for every communicator of twin."""
    out = []
    for g in groups:
        if twin not in g.ranks:
            continue
        out.append((g.comm_name(), g, g.ranks, None))
        for key, comm in g.p2p.items():
            a, b = (int(x) for x in key.split(":"))
            if twin in (g.ranks[a], g.ranks[b]):
                out.append((comm, g, [g.ranks[a], g.ranks[b]], key))
    return out


def copies(run_ranks: list[int], world: int, records: list[dict[str, Any]]) -> tuple[dict[int, Copy], list[str]]:
    """Every absent rank's :class:`Copy`, and warnings (one line each) where a copy may differ from its twin."""
    groups = groups_from_records(records)
    by_set: dict[frozenset[int], list[Group]] = defaultdict(list)
    for g in groups:
        by_set[frozenset(g.ranks)].append(g)
    running = set(run_ranks)
    grid = coordinates(groups, world)
    out: dict[int, Copy] = {}
    unmatched: set[str] = set()
    unstructured: list[int] = []
    for a in range(world):
        if a in running:
            continue
        twin, sigma, structured = _permutation(a, run_ranks, groups, world, grid)
        if not structured:
            unstructured.append(a)
        comm_map: dict[str, tuple[str, int, list[int]]] = {}
        for comm, g, members, key in _twin_comms(twin, groups):
            image = [sigma.get(r, r) for r in g.ranks]
            twins_of_set = by_set[frozenset(g.ranks)]
            candidates = by_set.get(frozenset(image), [])
            ordinal = twins_of_set.index(g)
            if a not in image or ordinal >= len(candidates):
                unmatched.add(comm)
                continue
            target = candidates[ordinal]
            mapped = [sigma.get(r, r) for r in members]
            if key is None:
                new_members, name = target.ranks, target.comm_name()
            else:
                local = sorted(target.ranks.index(r) for r in mapped)
                new_members = [target.ranks[j] for j in local]
                name = target.p2p_name(f"{local[0]}:{local[1]}")
            comm_map[comm] = (name, new_members.index(a), [new_members.index(r) for r in mapped])
        out[a] = Copy(a, twin, comm_map, structured)
    warnings = []
    if unstructured:
        warnings.append(f"ranks {ranges(unstructured)} copy the running rank at their position modulo "
                        f"{len(run_ranks)} (no process group holds them with exactly one running rank): a copy may "
                        "differ from its twin")
    if unmatched:
        warnings.append(f"{len(unmatched)} communicator(s) of running ranks have no counterpart for some copies "
                        "(the group structure is not symmetric): those copies keep their twin's")
    return out, warnings


def copy_summary(run_ranks: list[int], copies: dict[int, Any]) -> dict[str, Any]:
    """The report's ``ranks_run`` and ``ranks_copied`` ({twin: its copies}) of a sparse run; ``copies`` maps each
    absent rank to its :class:`Copy` or its ``copies.json`` entry."""
    by_twin: dict[int, list[int]] = defaultdict(list)
    for rank, c in copies.items():
        by_twin[int(c.twin if isinstance(c, Copy) else c["twin"])].append(int(rank))
    return {"ranks_run": ranges(run_ranks), "ranks_copied": {str(t): ranges(rs) for t, rs in sorted(by_twin.items())}}


def summary_line(fields: dict[str, Any]) -> str:
    """One line from :func:`copy_summary`'s fields: which ranks of a sparse run ran and which were copied from
    which (the report keeps the whole list)."""
    copied = "; ".join(f"{ranks} from {twin}" for twin, ranks in fields["ranks_copied"].items())
    copied = copied if len(copied) <= 240 else copied[:240] + "... (report: ranks_copied)"
    return f"sparse run: ranks {fields['ranks_run']} ran; the others are copies of a running twin ({copied})"


def ranges(ranks: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5'."""
    parts: list[str] = []
    for r in sorted(ranks):
        if parts and r == int(parts[-1].rsplit("-", 1)[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return ",".join(parts)


