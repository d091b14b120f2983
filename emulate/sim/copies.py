"""Ranks of a sparse run that did not run (``stepcast run --run-ranks``): each is simulated as a copy of its twin's
program, sharing the twin's event arrays (no second copy of a trace in memory), with its own rank id and its own
communicators (:mod:`emulate.roles`): a collective of the copy is its twin's, on the communicator ``comm_map``
names, as that communicator's member ``rank``; a point-to-point peer is renumbered the same way."""
from __future__ import annotations

import dataclasses
from typing import Any

from emulate.sim.program import RankProgram

COMM_MAP = "comm_map"  # RankProgram.meta key: {twin's communicator: (own communicator, own rank, peer numbers)}


def with_copies(programs: list[RankProgram], copies: dict[int, dict[str, Any]]) -> list[RankProgram]:
    """``programs`` plus one program per copy (``{rank: {"twin": rank, "comm_map": {...}}}``), sorted by rank.
    A copy shares every array of its twin's program; only ``rank``, ``source`` and ``meta`` are its own."""
    by_rank = {p.rank: p for p in programs}
    out = list(programs)
    for rank, copy in copies.items():
        twin = by_rank.get(int(copy["twin"]))
        if twin is None:
            raise ValueError(f"copies: rank {rank} copies rank {copy['twin']}, whose trace is not among the traces")
        meta = {**twin.meta, "copied_from": twin.rank, COMM_MAP: copy.get("comm_map") or {}}
        out.append(dataclasses.replace(twin, rank=int(rank), source=f"{twin.source} (as rank {rank})", meta=meta))
    return sorted(out, key=lambda p: p.rank)


def comm_view(prog: RankProgram, ev: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(communicator, rank in it, peer) of a collective event as ``prog``'s rank makes it."""
    comm, comm_rank, peer = ev.get("comm"), ev.get("comm_rank"), ev.get("peer")
    mapping = prog.meta.get(COMM_MAP)
    if mapping:
        entry = mapping.get(comm)
        if entry is not None:
            comm, comm_rank, numbers = entry[0], entry[1], entry[2]
            if peer is not None and 0 <= int(peer) < len(numbers):
                peer = numbers[int(peer)]
    return comm, comm_rank, peer
