"""Read one rank's capture log and its op table, and turn them into trace-v1 events (:mod:`emulate.trace`).

The log (``rank<k>.log.driver.<pid>.jsonl``, one JSON object a line: per process, since Inductor's compile workers
load the driver too) holds, besides the driver's notes, one record per call the capture times (csrc/capture.c):
``launch``, ``malloc`` (``ok`` 0 when the device refused), ``free``, ``memcpy``, ``memset``, ``event_record``,
``stream_wait_event``, ``event_sync``, ``stream_sync``, ``device_sync``, ``collective`` (csrc/nccl.c), each with
``t`` (ns), ``gap`` (the thread's CPU time since its previous call), ``ops``/``nodes``/``py`` (host work counted since
it: the events' ``host_ops``/``host_nodes``/``host_py``), ``thread``, ``op`` (op table index, -1 none) and ``call``
(the op call); a launch also ``rd``/``wr`` when its launcher told the bytes it reads and writes (the event's
``bytes_read``/``bytes_written``); a graph launch's replayed records ``graph`` and ``node``. ``mark`` records are
iterations (``source`` 1 profiler, 2 optimizer, 3 backward, ``step``); ``comm`` notes name each communicator
(``comm``, ``nranks``, ``rank``); ``unsupported`` notes an entry point answered NOT_SUPPORTED.

The op table (``rank<k>.log.ops.json``, written by emulate/capture.py) describes each op id: its aten name, input
shapes, dtypes and scalar arguments. The kernels are the libraries' own (cuBLASLt's nvjet / cutlass kernels, cuDNN's,
Triton's): a kernel's estimator row comes from its aten op's shapes (:func:`profiling.classify.classify_op`), given
to the op call's first kernel of the family; its further kernels of that family (cuBLASLt's split-K reduction)
become ``op_part``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from stepcast.emulate.trace import OpCalls
from stepcast.profiling.classify import classify_kernel_name, classify_op
from stepcast.errors import InputError

SOURCES = {1: "profiler", 2: "optimizer", 3: "backward"}
#: the driver's stream ids (csrc/stream.c): 1 is the legacy default stream, the trace's stream 0
LEGACY_STREAM = 1
TIMED = frozenset({"launch", "malloc", "free", "memcpy", "memset", "event_record", "stream_wait_event", "event_sync",
                   "stream_sync", "device_sync", "collective"})
#: device work: what a script that asked nothing of the GPU has none of
DEVICE_WORK = frozenset({"launch", "memcpy", "memset", "collective"})
# ncclDataType_t
NCCL_DTYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "fp16", 7: "fp32",
               8: "fp64", 9: "bf16", 10: "fp8_e4m3", 11: "fp8_e5m2"}
NCCL_DTYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "fp16": 2, "fp32": 4,
                    "fp64": 8, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
COLLECTIVE_FAMILY_OPS = {"send": "send_recv", "recv": "send_recv", "reduce": "all_reduce", "gather": "all_gather"}


class CaptureLogError(InputError):
    """A capture log that cannot be read; the message names the file and what is wrong."""


@dataclass
class DriverLog:
    """One rank's capture: its timed records and marks in order, plus the op table (sidecar)."""

    path: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    unhandled: list[str] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    sidecar: dict[str, Any] = field(default_factory=dict)
    comms: dict[str, tuple[int, int]] = field(default_factory=dict)  # communicator id -> (size, this rank's rank)
    host_clock: str = "cpu"
    end: dict[str, Any] | None = None        # the log's end record (None: the process never wrote one)
    deadlock: str | None = None              # the deadlock the driver found, as it said it
    torn: bool = False                       # the last line was cut mid-record (the process died writing it)

    def completeness(self) -> str | None:
        """None when this capture is whole; else one line saying what it lost. A whole capture has its op table
        and an end record whose count of timed records is the log's."""
        if not self.sidecar:
            return "no op table: the process ended before the capture layer saved it (its kernels have no op)"
        if self.end is None:
            state = (self.sidecar.get("status") or {}).get("exit", "?")
            return (f"the log has no end record: the process was killed (its op table says '{state}')"
                    + (" mid-write" if self.torn else ""))
        timed = sum(1 for r in self.records if r["event"] != "mark")
        if int(self.end.get("records", timed)) != timed:
            return f"the log holds {timed} of the {self.end['records']} records the process wrote"
        return None


def is_driver_log(path: Path) -> bool:
    return path.name.endswith(".jsonl") and ".driver." in path.name


def sidecar_path(log: Path) -> Path:
    """``rank0.log.driver.123.jsonl`` -> ``rank0.log.ops.json`` (the capture layer names it after STEPCAST_LOG)."""
    return log.with_name(log.name.split(".driver.")[0] + ".ops.json")


def read_driver_log(path: str | Path) -> DriverLog:
    path = Path(path)
    out = DriverLog(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureLogError(f"{path}: cannot read the capture log ({exc.strerror})") from None
    lines = data.split(b"\n")
    if lines and lines[-1]:  # no newline at the end: the process died writing its last record
        out.torn = True
    records = []
    for number, line in enumerate(lines[:-1] if out.torn else lines, 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CaptureLogError(f"{path}:{number}: a line is not JSON ({exc})") from None
    for rec in records:
        kind = rec.get("event")
        if kind in TIMED or kind == "mark":
            out.records.append(rec)
        elif kind == "unsupported":
            out.unhandled.append(rec["name"])
        elif kind == "comm":
            out.comms[rec["comm"]] = (int(rec["nranks"]), int(rec["rank"]))
        elif kind == "end":
            out.end = rec
        elif kind == "deadlock":
            out.deadlock = rec.get("message")
    sidecar = sidecar_path(path)
    if sidecar.is_file():
        out.sidecar = json.loads(sidecar.read_text())
        out.ops = out.sidecar.get("ops", [])
    return out


@functools.lru_cache(maxsize=None)
def _cxa_demangle():
    lib = ctypes.util.find_library("stdc++")
    try:
        fn = ctypes.CDLL(lib or "libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return fn


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The C++ name of a device function (as Kineto shows it); the input unchanged when it is not mangled."""
    fn = _cxa_demangle()
    if fn is None or not name.startswith("_Z"):
        return name
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


def listify(value: Any) -> Any:
    """Tuples (the op table's JSON lists) as lists, all the way down."""
    if isinstance(value, (list, tuple)):
        return [listify(v) for v in value]
    return value


def kernel_spec(op: dict | None, name: str) -> dict | None:
    """The estimator row of a kernel launched inside ``op`` (its op-table entry), or None: no op, an op the
    classifier does not know, or a helper kernel of the op (a fill, a copy) whose name says another family."""
    if op is None:
        return None
    try:
        row = classify_op(op["op"], op["shapes"], op["dtypes"], kernel_name=name, args=op.get("args"))
    except Exception:  # the classifier must never lose a trace
        return None
    if row is None:
        return None
    by_name = classify_kernel_name(name)
    if by_name is not None and by_name.get("family") != row.get("family"):
        return None  # a helper kernel of the op (fill, copy...), not the op's main kernel
    return row


def collective_bytes(op: str, count: int, dtype: str, ranks: int, rank: int | None, root: int) -> int:
    """Per-rank bytes: the larger of the send and the receive buffer (nccl-tests 'size')."""
    unit = NCCL_DTYPE_BYTES.get(dtype, 4) * count
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return unit * max(ranks, 1)
    if op == "gather" and rank == root:
        return unit * max(ranks, 1)
    return unit


def collective_event(r: dict[str, Any], stream: Callable[[int], int], comms: dict[str, tuple[int, int]],
                     comm_sizes: dict[str, int], ranks_per_node: int, torch_op: str | None) -> dict[str, Any]:
    """The trace-v1 collective of a ``collective`` record (csrc/nccl.c). ``stream`` maps the log's stream id to the
    trace's; ``comms``: the log's communicators (id -> (size, rank))."""
    coll, comm, count, peer = r["coll"], r["comm"], int(r["count"]), int(r["peer"])
    dtype = NCCL_DTYPES.get(int(r["dtype"]), str(r["dtype"]))
    ranks = comm_sizes.get(comm) or max(int(r["nranks"]), 1)
    my_rank = comms.get(comm, (0, -1))[1]
    nbytes = collective_bytes(coll, count, dtype, ranks, my_rank, peer)
    return {"kind": "collective", "stream": stream(int(r["stream"])), "op": coll, "comm": comm,
            "comm_seq": int(r["seq"]), "ranks": ranks, "peer": peer if peer >= 0 else None,
            "comm_rank": my_rank if my_rank >= 0 else None, "count": count, "dtype": dtype,
            "bytes": nbytes, "group": int(r["group"]) or None, "torch_op": torch_op,
            "spec": {"family": "collective", "dtype": dtype if dtype in ("fp32", "fp16", "bf16", "fp64")
                     else "fp32", "op": COLLECTIVE_FAMILY_OPS.get(coll, coll), "bytes": nbytes,
                     "ranks": ranks, "ranks_per_node": min(ranks, ranks_per_node)}}


def driver_events(log: DriverLog, *, comm_sizes: dict[str, int] | None = None,
                  ranks_per_node: int = 1) -> list[dict[str, Any]]:
    """Trace-v1 events of one rank, in host order, renumbered; iteration events from the best mark source.
    ``comm_sizes``: each communicator's size (:func:`comm_sizes` over every rank's log); ``ranks_per_node``: the
    collectives' members per node until the collator places them."""
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
        ctx = {"op": op["op"] if op else None, "op_shapes": listify(op["shapes"]) if op else None,
               "op_dtypes": listify(op["dtypes"]) if op else None}
        if kind == "launch":
            name = demangle(r["name"])
            ev = {"kind": "kernel", "stream": stream(r["stream"]), "name": name, "grid": r["grid"],
                  "block": r["block"], "shmem": r["smem"], "cluster": r["cluster"], "lib": None, **ctx,
                  "spec": kernel_spec(op, name)}
            if r.get("rd") or r.get("wr"):  # what its launcher said it reads and writes (Inductor's Triton)
                ev["bytes_read"], ev["bytes_written"] = r.get("rd", 0), r.get("wr", 0)
            if ev["spec"] and r["call"]:
                op_calls.mark(ev, (op_id, r["call"]))
        elif kind == "memcpy":
            ev = {"kind": "memcpy", "stream": stream(r["stream"]), "bytes": r["bytes"], "direction": r["direction"],
                  "blocking": bool(r["blocking"]), "op": ctx["op"]}
            if r.get("peer"):   # to or from a peer's memory (symmetric memory): it crosses NVLink
                ev["peer"] = True
            if r.get("zeros"):  # the host read zeros in place of values a kernel computed
                ev["read_zeros"] = True
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
            ev = collective_event(r, stream, log.comms, comm_sizes or {}, ranks_per_node, ctx["op"])
        else:
            ev = {"kind": "device_sync"}
        if r.get("graph"):  # a node of a graph launch (any device work): one launch call for all its nodes
            ev["graph_launch"], ev["graph_node"] = r["graph"], r["node"]
        ev.update({"t_ns": r["t"], "gap_ns": r["gap"], "thread": r["thread"]})
        if r.get("ops") or r.get("nodes") or r.get("py"):
            ev.update(host_ops=r.get("ops", 0), host_nodes=r.get("nodes", 0), host_py=r.get("py", 0))
        events.append(ev)
    return start_at_first_call(events)


def start_at_first_call(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events (the first an iteration marker) renumbered, their clock starting at the first intercepted call: the
    time before it is interpreter start-up and imports, not the script's training loop."""
    first = next((ev for ev in events[1:] if ev["kind"] != "iteration"), None)
    if first is not None:
        origin = first["t_ns"]
        first["gap_ns"] = 0
        for ev in events[1:]:
            ev["t_ns"] = max(ev["t_ns"] - origin, 0)
    for seq, ev in enumerate(events):
        ev["seq"] = seq
    return events


def comm_sizes(logs: list[DriverLog]) -> dict[str, int]:
    """Size of each communicator: what the members reported at init, else how many ranks' logs hold it."""
    sizes: dict[str, int] = {}
    members: dict[str, int] = {}
    for log in logs:
        for comm, (nranks, _) in log.comms.items():
            if nranks > 0:
                sizes[comm] = nranks
            members[comm] = members.get(comm, 0) + 1
    return {comm: sizes.get(comm, members[comm]) for comm in members}


def peak_device_bytes(events: list[dict[str, Any]]) -> int:
    """Largest sum of live device allocations over the trace (the device memory the run needed)."""
    live = peak = 0
    for ev in events:
        if ev["kind"] == "malloc" and not ev.get("failed"):
            live += ev["bytes"]
            peak = max(peak, live)
        elif ev["kind"] == "free":
            live -= ev["bytes"]
    return peak
