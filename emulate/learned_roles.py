"""``stepcast run --run-ranks auto[:M]``: learn which ranks of a job must run from a small world, then run the big
one sparsely.

The probe is the same script on ``M`` nodes (default 1) with every rank running (``--run-ranks`` of all of them, so
each rank records the process groups: :mod:`emulate.sparse_store`), captured only. Two ranks of the probe are
alike when they asked for the same device work: the same kernels and library calls, and the same collectives on
communicators of the same role. Rank dedup's hash (emulate/driver/csrc/dedup.c) cannot say this: it hashes each
collective's communicator id, which differs between tensor-parallel peers (each is in its own data-parallel and
pipeline group) and between replicas, so here a communicator is replaced by its group's role (``group_desc`` and
size, or the family of groups it belongs to) and a point-to-point peer by its offset in that group; copies, memsets
and synchronisations are left out, as dedup leaves them out (rank-0-only logging adds them).

The probe's process groups give every rank coordinates (:func:`emulate.roles.coordinates`: its position in its
tensor-, data- and pipeline-parallel group...). A family of groups along which every group holds alike ranks is a
*copy family* (tensor-parallel peers of a stage; data-parallel replicas); the ranks run in the big job are those at
position 0 of every copy family. The big job is taken to be the probe with more replicas: the copy family of the
largest stride (the outermost replicated dimension: data parallelism in Megatron's and torchtitan's rank orders)
grows by ``W / W_probe``, and ranks are numbered in the same mixed radix. After the big run its own process groups
are checked against that prediction, and the report warns where they differ."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepcast.emulate.roles import Group, coordinates, groups_from_records, ranges
from stepcast.errors import InputError

AUTO = "auto"
KERNEL_FIELDS = ("name", "grid", "block", "shmem", "stream", "lib", "gemm")
COLLECTIVE_FIELDS = ("op", "bytes", "dtype", "count", "ranks", "stream")


class LearnError(InputError):
    """Roles that cannot be learned from the probe; the message is one line."""


def parse_auto(text: str) -> int | None:
    """``'auto'`` -> 1, ``'auto:4'`` -> 4 (the probe's nodes); None for a ranks list."""
    if text != AUTO and not text.startswith(AUTO + ":"):
        return None
    nodes = text[len(AUTO) + 1:] or "1"
    if not nodes.isdigit() or int(nodes) < 1:
        raise LearnError(f"--run-ranks {text!r}: expected auto or auto:M (M nodes for the probe, at least 1)")
    return int(nodes)


@dataclass
class Layout:
    """The probe's grid: per family (fastest first) its groups' role, size, stride, and whether it copies."""

    roles: list[str]
    sizes: list[int]
    strides: list[int]
    copies: list[bool]

    def rank(self, position: Iterable[int], sizes: list[int]) -> int:
        out, stride = 0, 1
        for p, n in zip(position, sizes):
            out += p * stride
            stride *= n
        return out


@dataclass
class Learned:
    """What the probe taught: the ranks to run in the big job, and the report's ``learned_roles``."""

    run_ranks: list[int]
    report: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    predicted_groups: list[list[int]] = field(default_factory=list)


def _role(g: Group, family_of: dict[str, int]) -> tuple:
    return (g.desc, len(g.ranks), family_of.get(g.name, -1))


@dataclass
class CommRole:
    """A communicator as :func:`signature` sees it: its group's role, and for a point-to-point pair the pair's
    global ranks (in communicator order) and its group's ranks."""

    role: tuple
    pair: list[int] | None = None
    group: list[int] | None = None


def communicator_roles(groups: list[Group], family_of: dict[str, int]) -> dict[str, CommRole]:
    """Communicator id -> its :class:`CommRole`."""
    out: dict[str, CommRole] = {}
    for g in groups:
        if g.comm:
            out[g.comm] = CommRole(_role(g, family_of))
        for key, comm in g.p2p.items():
            a, b = (int(x) for x in key.split(":"))
            out[comm] = CommRole(_role(g, family_of) + ("p2p",), [g.ranks[a], g.ranks[b]], g.ranks)
    return out


def signature(rank: int, events: Iterable[dict[str, Any]], comms: dict[str, CommRole]) -> int:
    """A hash of a rank's device work with communicators replaced by their roles (module docstring)."""
    parts: list[tuple] = []
    for ev in events:
        kind = ev.get("kind")
        if kind == "kernel":
            parts.append(("k", *(json.dumps(ev.get(f), sort_keys=True) for f in KERNEL_FIELDS)))
        elif kind == "collective":
            entry = comms.get(ev.get("comm"))
            role: tuple = ("?", ev.get("ranks")) if entry is None else entry.role
            if entry is not None and entry.pair and entry.group and ev.get("peer") is not None:
                peer = entry.pair[int(ev["peer"])] if 0 <= int(ev["peer"]) < 2 else None
                if peer in entry.group and rank in entry.group:   # the peer's offset in the group
                    role = role + ((entry.group.index(peer) - entry.group.index(rank)) % len(entry.group),)
            parts.append(("c", *(ev.get(f) for f in COLLECTIVE_FIELDS), role))
    return hash(tuple(parts))


def layout(groups: list[Group], world: int, alike: list[int]) -> Layout:
    """The probe's grid families as a mixed radix, fastest first (rank = sum of position x stride for every rank,
    else :class:`LearnError`); ``alike[r]``: rank r's class."""
    grid = coordinates(groups, world)
    if not grid:
        return Layout([], [], [], [])
    entries = []
    for family in grid:
        position = [0] * world
        for g in family:
            for q, r in enumerate(g.ranks):
                position[r] = q
        home = next(g for g in family if 0 in g.ranks)
        copies = all(len({alike[r] for r in g.ranks}) == 1 for g in family)
        entries.append((home.ranks[1] if len(home.ranks) > 1 and home.ranks[0] == 0 else 0,
                        family[0].desc or f"{len(home.ranks)}-rank groups", len(home.ranks), copies, position))
    entries.sort(key=lambda e: e[0])
    out = Layout([e[1] for e in entries], [e[2] for e in entries], [e[0] for e in entries], [e[3] for e in entries])
    if any(sum(e[4][r] * e[0] for e in entries) != r for r in range(world)) or \
            any(e[0] != out.rank([0] * f + [1], out.sizes) for f, e in enumerate(entries)):
        raise LearnError("--run-ranks auto: the probe's process groups do not number the ranks as a grid "
                         "(e.g. tensor x data x pipeline parallel, fastest first): declare the ranks to run")
    return out


def learn(probe_docs: list[dict[str, Any]], records: list[dict[str, Any]], world: int) -> Learned:
    """The ranks to run in a job of ``world`` ranks, from the probe's traces (one per rank) and group records."""
    probe_world = len(probe_docs)
    if world % probe_world:
        raise LearnError(f"--run-ranks auto: the job's {world} ranks are not a multiple of the probe's {probe_world}")
    groups = groups_from_records(records)
    grid = coordinates(groups, probe_world)
    family_of = {g.name: f for f, family in enumerate(grid) for g in family}
    comms = communicator_roles(groups, family_of)
    docs = sorted(probe_docs, key=lambda d: int(d["rank"]))
    sigs = [signature(int(d["rank"]), d["events"], comms) for d in docs]
    first = {s: r for r, s in reversed(list(enumerate(sigs)))}
    alike = [first[s] for s in sigs]
    classes = {r: [q for q, a in enumerate(alike) if a == r] for r in sorted(set(alike))}
    report: dict[str, Any] = {"probe_world": probe_world,
                              "probe_alike": {str(r): ranges(rs) for r, rs in classes.items() if len(rs) > 1}}
    k = world // probe_world
    if len(classes) == 1 and not grid:   # every rank alike and no structure (DDP, FSDP): rank 0 stands for all
        report.update(copy_families=["every rank"], grows="every rank")
        return Learned([0], report, [f"learned roles: the {probe_world} ranks of the probe are alike; rank 0 "
                                     f"runs and the job's {world} ranks copy it"])
    lay = layout(groups, probe_world, alike)
    if not lay.roles:
        raise LearnError("--run-ranks auto: the probe's ranks differ and its process groups give them no grid "
                         "coordinates: declare the ranks to run")
    copying = [f for f, c in enumerate(lay.copies) if c]
    report["copy_families"] = [lay.roles[f] for f in copying]
    if not copying:
        report["grows"] = None
        return Learned(list(range(world)), report, ["learned roles: no rank of the probe copies another: every "
                                                     "rank runs"])
    grows = copying[-1]
    sizes = list(lay.sizes)
    sizes[grows] *= k
    report["grows"] = lay.roles[grows]
    positions = [[0] if lay.copies[f] else range(n) for f, n in enumerate(sizes)]
    run = sorted(lay.rank(p, sizes) for p in itertools.product(*positions))
    predicted = [[lay.rank([0] * f + [q], sizes) for q in range(n)] for f, n in enumerate(sizes)]
    warnings = [f"learned roles: ranks alike in the probe of {probe_world} ranks copy each other along "
                f"{', '.join(report['copy_families'])}; the job is taken to be the probe with {k}x more replicas "
                f"along {report['grows']}, so ranks {ranges(run)} run"]
    if len(copying) < 2 and len(lay.roles) > 1:
        warnings.append(f"learned roles: only {report['grows']} copies in the probe, taken as the dimension that "
                        "grows; a probe with two replicas or more compares them (auto:M, M nodes)")
    return Learned(run, report, warnings, predicted)


def check_against_job(learned: Learned, records: list[dict[str, Any]]) -> list[str]:
    """Warnings where the big job's own process groups differ from the layout the probe predicted (the group of
    rank 0 along each family)."""
    if not learned.predicted_groups:
        return []
    have = {frozenset(g.ranks) for g in groups_from_records(records)}
    missing = [g for g in learned.predicted_groups if len(g) > 1 and frozenset(g) not in have]
    if not missing:
        return []
    return [f"learned roles: the job has no process group {ranges(missing[0])} that the probe's layout predicts: "
            "the ranks run may not stand for the copies; declare --run-ranks"]


def probe(script: Path, script_args: list[str], *, hardware: str, nproc: int, nodes: int,
          folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Capture the probe (every rank of ``nproc * nodes`` running, groups recorded): (its traces, its records)."""
    from stepcast.emulate.trace import read_trace

    world = nproc * nodes
    cmd = [sys.executable, "-m", "stepcast.emulate", "run", "--hardware", hardware, "--nproc", str(nproc), "--nodes",
           str(nodes), "--run-ranks", f"0-{world - 1}", "--capture-only", "--trace-dir",
           str(folder), "--", str(script), *script_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        raise LearnError(f"--run-ranks auto: the probe of {world} ranks failed ({tail[-1] if tail else 'no output'})")
    return [read_trace(p) for p in sorted(folder.glob("rank*.trace.json*"))], group_records(folder)


def group_records(folder: Path) -> list[dict[str, Any]]:
    """The process groups each rank of a capture folder recorded (its op table's ``sparse``)."""
    records = [json.loads(p.read_text()).get("sparse") for p in sorted(folder.glob("rank*.log.ops.json"))]
    return [r for r in records if isinstance(r, dict)]


def report_fields(learned: Learned, trace_dir: Path, sparse_warnings: list[str]) -> dict[str, Any]:
    """The big run's report fields: ``learned_roles``, and the warnings first among ``sparse_warnings``."""
    checks = check_against_job(learned, group_records(trace_dir))
    return {"learned_roles": {**learned.report, "run_ranks": ranges(learned.run_ranks)},
            "sparse_warnings": [*learned.warnings, *checks, *sparse_warnings]}


def learn_run_ranks(script: Path, script_args: list[str], *, hardware: str, nproc: int, probe_nodes: int,
                    world: int) -> Learned:
    """Probe, then learn (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="stepcast-probe-") as tmp:
        docs, records = probe(script, script_args, hardware=hardware, nproc=nproc, nodes=probe_nodes,
                              folder=Path(tmp))
        learned = learn(docs, records, world)
    learned.report["probe_nodes"] = probe_nodes
    return learned
