"""Read one rank's log of the emulated driver (``python -m emulate run --backend driver``) and its op table, and turn
them into trace-v1 events, the same events :func:`emulate.shimlog.rank_events` makes of a shim log.

The log (``rank<k>.log.driver.<pid>.jsonl``, one JSON object a line, see :mod:`emulate.driver`) holds, besides the
driver's notes, one record per call the capture times (csrc/capture.c): ``launch``, ``malloc`` (``ok`` 0 when the
device refused), ``free``, ``memcpy``, ``memset``, ``event_record``, ``stream_wait_event``, ``event_sync``,
``stream_sync``, ``device_sync`` (a launch also ``rd``/``wr`` when its launcher told the bytes it reads and writes:
the event's ``bytes_read``/``bytes_written``), each with ``t`` (ns), ``gap`` (the thread's CPU time since its previous
call, the shim's ``cpu`` host clock), ``ops``/``nodes``/``py`` (host work counted since it: the events'
``host_ops``/``host_nodes``/``host_py``), ``thread``, ``op`` (op table index, -1 none) and ``call`` (the op call); and
``mark`` records (iteration marks: ``source`` 1 profiler, 2 optimizer, 3 backward, ``step``). With more than one rank,
the shim's NCCL preloaded above the driver (emulate/csrc/nccl_driver.c) adds ``comm`` notes and timed ``collective``
records whose ``text`` is the shim log's own X / N line, parsed as the shim's are.

The kernels are the libraries' own (cuBLASLt's nvjet / cutlass kernels, cuDNN's, Triton's): a kernel's estimator
row comes from its aten op's shapes (the classifier the shim log uses, :mod:`emulate.shimlog`), given to the op call's
first kernel of the family; its further kernels of that family (cuBLASLt's split-K reduction) become ``op_part``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulate.driver.launchlog import read_events
from emulate.shimlog import (SOURCES, ShimLogError, _kernel_spec, _listify, collective_event, demangle,
                             start_at_first_call)
from emulate.trace import OpCalls

#: the driver's stream ids (csrc/stream.c): 1 is the legacy default stream, the trace's stream 0
LEGACY_STREAM = 1
TIMED = frozenset({"launch", "malloc", "free", "memcpy", "memset", "event_record", "stream_wait_event", "event_sync",
                   "stream_sync", "device_sync", "collective"})


@dataclass
class DriverLog:
    """One rank's capture on the driver: its timed records and marks in order, plus the op table (sidecar). The
    attributes :mod:`emulate.collate` reads are those of :class:`emulate.shimlog.RankLog`."""

    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    unhandled: list[str] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    sidecar: dict[str, Any] = field(default_factory=dict)
    comms: dict[str, tuple[int, int]] = field(default_factory=dict)  # the shim's NCCL: id -> (size, rank)
    host_clock: str = "cpu"


def is_driver_log(path: Path) -> bool:
    return path.name.endswith(".jsonl") and ".driver." in path.name


def sidecar_path(log: Path) -> Path:
    """``rank0.log.driver.123.jsonl`` -> ``rank0.log.ops.json`` (the capture layer names it after STEPCAST_LOG)."""
    return log.with_name(log.name.split(".driver.")[0] + ".ops.json")


def read_driver_log(path: str | Path) -> DriverLog:
    path = Path(path)
    out = DriverLog(path)
    try:
        records = read_events(path)
    except OSError as exc:
        raise ShimLogError(f"{path}: cannot read the driver log ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ShimLogError(f"{path}: a line is not JSON ({exc})") from None
    for rec in records:
        kind = rec.get("event")
        if kind in TIMED or kind == "mark":
            out.records.append(rec)
        elif kind == "unsupported":
            out.unhandled.append(rec["name"])
        elif kind == "comm":
            comm, nranks, rank = rec["text"].split("\t")[:3]
            out.comms[comm] = (int(nranks), int(rank))
    sidecar = sidecar_path(path)
    if sidecar.is_file():
        out.sidecar = json.loads(sidecar.read_text())
        out.ops = out.sidecar.get("ops", [])
    return out


def driver_events(log: DriverLog, *, comm_sizes: dict[str, int] | None = None,
                  ranks_per_node: int = 1) -> list[dict[str, Any]]:
    """Trace-v1 events of one rank, in host order, renumbered; iteration events from the best mark source.
    ``comm_sizes`` and ``ranks_per_node`` as for :func:`emulate.shimlog.rank_events` (collectives)."""
    marks = [r["source"] for r in log.records if r["event"] == "mark"]
    source = min(marks) if marks else None
    events: list[dict[str, Any]] = [{"kind": "iteration", "step": 0, "source": SOURCES.get(source), "t_ns": 0,
                                     "gap_ns": 0, "thread": 0}]
    stream_ids: dict[int, int] = {LEGACY_STREAM: 0}
    op_calls = OpCalls()

    def stream(raw: int) -> int:
        return stream_ids.setdefault(raw, len(stream_ids))

    for r in log.records:
        kind = r["event"]
        if kind == "mark":
            if r["source"] == source:
                events.append({"kind": "iteration", "step": r["step"], "source": SOURCES[source], "t_ns": r["t"],
                               "gap_ns": 0, "thread": r["thread"]})
            continue
        op_id = r["op"]
        op = log.ops[op_id] if 0 <= op_id < len(log.ops) else None
        ctx = {"op": op["op"] if op else None, "op_shapes": _listify(op["shapes"]) if op else None,
               "op_dtypes": _listify(op["dtypes"]) if op else None}
        if kind == "launch":
            name = demangle(r["name"])
            ev = {"kind": "kernel", "stream": stream(r["stream"]), "name": name, "grid": r["grid"],
                  "block": r["block"], "shmem": r["smem"], "cluster": r["cluster"], "lib": None, **ctx,
                  "spec": _kernel_spec(op, name)}
            if r.get("rd") or r.get("wr"):  # what its launcher said it reads and writes (Inductor's Triton)
                ev["bytes_read"], ev["bytes_written"] = r.get("rd", 0), r.get("wr", 0)
            if ev["spec"] and r["call"]:
                op_calls.mark(ev, (op_id, r["call"]))
        elif kind == "memcpy":
            ev = {"kind": "memcpy", "stream": stream(r["stream"]), "bytes": r["bytes"], "direction": r["direction"],
                  "blocking": bool(r["blocking"]), "op": ctx["op"]}
        elif kind == "memset":
            ev = {"kind": "memset", "stream": stream(r["stream"]), "bytes": r["bytes"], "op": ctx["op"]}
        elif kind == "malloc":
            ev = ({"kind": "malloc", "ptr": r["ptr"], "bytes": r["bytes"]} if r["ok"]
                  else {"kind": "malloc", "ptr": None, "bytes": r["bytes"], "failed": True})
        elif kind == "free":
            ev = {"kind": "free", "ptr": r["ptr"], "bytes": r["bytes"]}
        elif kind == "event_record":
            ev = {"kind": "event_record", "event": r["handle"], "stream": stream(r["stream"])}
        elif kind == "stream_wait_event":
            ev = {"kind": "stream_wait_event", "stream": stream(r["stream"]), "event": r["handle"]}
        elif kind == "event_sync":
            ev = {"kind": "event_sync", "event": r["handle"]}
        elif kind == "stream_sync":
            ev = {"kind": "stream_sync", "stream": stream(r["stream"])}
        elif kind == "collective":
            ev = collective_event(r["text"].split("\t"), lambda raw: stream(int(raw)), log.comms, comm_sizes or {},
                                  ranks_per_node, ctx["op"])
        else:
            ev = {"kind": "device_sync"}
        if r.get("graph"):  # a node of a graph launch (any device work): one launch call for all its nodes
            ev["graph_launch"], ev["graph_node"] = r["graph"], r["node"]
        ev.update({"t_ns": r["t"], "gap_ns": r["gap"], "thread": r["thread"]})
        if r.get("ops") or r.get("nodes") or r.get("py"):
            ev.update(host_ops=r.get("ops", 0), host_nodes=r.get("nodes", 0), host_py=r.get("py", 0))
        events.append(ev)
    return start_at_first_call(events)   # as the shim's traces
