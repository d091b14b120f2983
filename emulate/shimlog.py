"""Read the shim's per-rank log (+ the capture layer's op table) and turn it into trace-v1 events.

Log lines are tab-separated. Timed calls: ``<kind> <t_ns> <gap_ns> <thread> <op id> <fields...>``; the kinds are
K kernel launch (``stream function grid block shmem read written call``: the bytes its launcher said it reads and
writes, 0 when unknown, and last the op call, shared by the kernels one call launches), G cuBLAS/cuBLASLt GEMM,
C memcpy, S memset, M malloc, f free, R event record, W stream wait event, E event sync, Y stream sync, D device
sync, N collective, L graph launch (``stream graph nodes``: the next ``nodes`` records, each with no gap of its
own, are the graph's captured work replayed; the launch's gap goes to the first). The gap is the host time since the
previous call returned, in the clock the ``H`` line names: ``cpu`` (the calling thread's CPU time since its own previous
call; the default) or ``wall`` (STEPCAST_HOST_CLOCK=wall; logs from before the setting, with no clock named, are wall).
Notes (no host time of their own): ``H t0 clock``, ``F <id> <mangled kernel name>``, ``X <comm id> <ranks> <rank>``,
``U <entry point answered generically>``, ``I <t_ns> 0 <thread> <op> <source> <count>`` (iteration mark; source 1
profiler, 2 optimizer, 3 backward), ``O <ops> <nodes> <python calls>`` (the host work counted on the thread of the
record that follows since its previous call: aten op entries, autograd node evaluations, Python calls; the event's
``host_ops``/``host_nodes``/
``host_py``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulate.trace import OpCalls
from profiling.classify import classify_kernel_name, classify_op

SOURCES = {1: "profiler", 2: "optimizer", 3: "backward"}
HOST_CLOCKS = ("cpu", "wall")
# cudaDataType_t -> families dtype
CUDA_DTYPES = {0: "fp32", 1: "fp64", 2: "fp16", 3: "int8", 10: "int32", 14: "bf16", 28: "fp8_e4m3", 29: "fp8_e5m2"}
# cublasComputeType_t
COMPUTE_TYPES = {64: "16f", 65: "16f_pedantic", 68: "32f", 69: "32f_pedantic", 70: "64f", 71: "64f_pedantic",
                 72: "32i", 73: "32i_pedantic", 74: "32f_fast_16f", 75: "32f_fast_16bf", 77: "32f_fast_tf32"}
CUBLAS_TF32_TENSOR_OP_MATH = 3
# ncclDataType_t
NCCL_DTYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "fp16", 7: "fp32",
               8: "fp64", 9: "bf16", 10: "fp8_e4m3", 11: "fp8_e5m2"}
NCCL_DTYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "fp16": 2, "fp32": 4,
                    "fp64": 8, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
COLLECTIVE_FAMILY_OPS = {"send": "send_recv", "recv": "send_recv", "reduce": "all_reduce", "gather": "all_gather"}


class ShimLogError(ValueError):
    """A log line that does not parse; the message names the file and the line."""


@dataclass
class RankLog:
    """One rank's raw capture: log records in order plus the definitions and the op table."""

    path: Path
    records: list[list[str]] = field(default_factory=list)
    kernels: dict[int, str] = field(default_factory=dict)
    comms: dict[str, tuple[int, int]] = field(default_factory=dict)
    unhandled: list[str] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    sidecar: dict[str, Any] = field(default_factory=dict)
    host_clock: str = "wall"  # the clock of the gaps: "cpu" (thread CPU time) or "wall"


def read_rank_log(path: str | Path) -> RankLog:
    path = Path(path)
    out = RankLog(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ShimLogError(f"{path}: cannot read the capture log ({exc.strerror})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        parts = line.split("\t")
        kind = parts[0]
        if kind == "F":
            out.kernels[int(parts[1])] = parts[2]
        elif kind == "X":
            out.comms[parts[1]] = (int(parts[2]), int(parts[3]))
        elif kind == "U":
            out.unhandled.append(parts[1])
        elif kind == "O":
            if len(parts) != 4:
                raise ShimLogError(f"{path}:{lineno}: expected 'O <ops> <nodes> <python calls>', found {line[:80]!r}")
            out.records.append(parts)
        elif kind == "H":
            if len(parts) > 2:
                if parts[2] not in HOST_CLOCKS:
                    raise ShimLogError(f"{path}:{lineno}: host clock must be one of {HOST_CLOCKS}, found {parts[2]!r}")
                out.host_clock = parts[2]
        elif len(parts) >= 5:
            out.records.append(parts)
        else:
            raise ShimLogError(f"{path}:{lineno}: expected a record with at least 5 fields, found {line[:80]!r}")
    sidecar = path.with_name(path.name + ".ops.json")
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


def _dims(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def _listify(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_listify(v) for v in value]
    return value


def _kernel_spec(op: dict | None, name: str) -> dict | None:
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


def gemm_fields(parts: list[str]) -> dict[str, Any]:
    """The G record's fields (cuBLAS column-major m, n, k) and the derived data type names."""
    ta, tb, m, n, k, batch, at, bt, ct, compute, math, epilogue = (int(v) for v in parts[8:20])
    a_dtype = CUDA_DTYPES.get(at, str(at))
    tf32 = a_dtype == "fp32" and (compute == 77 or (compute == 68 and (math & 0xF) == CUBLAS_TF32_TENSOR_OP_MATH))
    return {"m": m, "n": n, "k": k, "batch": batch, "transa": "NTC"[ta] if 0 <= ta < 3 else ta,
            "transb": "NTC"[tb] if 0 <= tb < 3 else tb, "dtype_a": a_dtype, "dtype_b": CUDA_DTYPES.get(bt, str(bt)),
            "dtype_c": CUDA_DTYPES.get(ct, str(ct)), "compute": COMPUTE_TYPES.get(compute, str(compute)),
            "tf32": tf32, "epilogue": epilogue}


def gemm_spec(g: dict[str, Any]) -> dict[str, Any]:
    """Estimator row of a cuBLAS call. cuBLAS is column-major: torch's row-major C[M, N] is cuBLAS's C^T, so
    the logical m is cuBLAS's n and vice versa."""
    dtype = "tf32" if g["tf32"] else g["dtype_a"]
    return {"family": "gemm", "dtype": dtype, "m": g["n"], "n": g["m"], "k": g["k"], "batch": g["batch"]}


def collective_bytes(op: str, count: int, dtype: str, ranks: int, rank: int | None, root: int) -> int:
    """Per-rank bytes: the larger of the send and the receive buffer (nccl-tests 'size')."""
    unit = NCCL_DTYPE_BYTES.get(dtype, 4) * count
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return unit * max(ranks, 1)
    if op == "gather" and rank == root:
        return unit * max(ranks, 1)
    return unit


def collective_event(f: list[str], stream: Any, comms: dict[str, tuple[int, int]], comm_sizes: dict[str, int],
                     ranks_per_node: int, torch_op: str | None) -> dict[str, Any]:
    """The trace-v1 collective of an N record's fields ``f`` (from the stream on: stream, op, comm id, comm seq,
    comm size, peer/root, count, ncclDataType_t, group), for the shim's log and the driver's (which holds the
    same text: emulate/csrc/nccl_driver.c). ``stream`` maps the log's stream id to the trace's; ``comms``: the
    log's communicators (id -> (size, rank))."""
    coll, comm, seq, peer, count = f[1], f[2], int(f[3]), int(f[5]), int(f[6])
    dtype = NCCL_DTYPES.get(int(f[7]), f[7])
    ranks = comm_sizes.get(comm) or max(int(f[4]), 1)
    my_rank = comms.get(comm, (0, -1))[1]
    nbytes = collective_bytes(coll, count, dtype, ranks, my_rank, peer)
    return {"kind": "collective", "stream": stream(f[0]), "op": coll, "comm": comm, "comm_seq": seq,
            "ranks": ranks, "peer": peer if peer >= 0 else None,
            "comm_rank": my_rank if my_rank >= 0 else None, "count": count, "dtype": dtype,
            "bytes": nbytes, "group": int(f[8]) or None, "torch_op": torch_op,
            "spec": {"family": "collective", "dtype": dtype if dtype in ("fp32", "fp16", "bf16", "fp64")
                     else "fp32", "op": COLLECTIVE_FAMILY_OPS.get(coll, coll), "bytes": nbytes,
                     "ranks": ranks, "ranks_per_node": min(ranks, ranks_per_node)}}


def rank_events(log: RankLog, *, comm_sizes: dict[str, int], ranks_per_node: int) -> list[dict[str, Any]]:
    """Trace-v1 events of one rank, in host order, renumbered; iteration events from the best mark source."""
    ops = log.ops
    marks = [int(p[5]) for p in log.records if p[0] == "I"]
    source = min(marks) if marks else None
    events: list[dict[str, Any]] = [{"kind": "iteration", "step": 0, "source": SOURCES.get(source), "t_ns": 0,
                                     "gap_ns": 0, "thread": 0}]
    stream_ids: dict[int, int] = {0: 0}
    op_parts = OpCalls()
    launches = pending = node = carried_gap = 0
    work: dict[str, int] = {}  # host work counted before the next record (an 'O' line)
    for p in log.records:
        kind = p[0]
        if kind == "O":
            work = {"host_ops": int(p[1]), "host_nodes": int(p[2]), "host_py": int(p[3])}
            continue
        if kind == "L":  # a graph launch: its nodes follow
            launches, pending, node, carried_gap = launches + 1, int(p[7]), 0, carried_gap + int(p[2])
            continue
        op_id = int(p[4])
        op = ops[op_id] if 0 <= op_id < len(ops) else None
        base: dict[str, Any] = {"t_ns": int(p[1]), "gap_ns": int(p[2]), "thread": int(p[3])}
        if kind == "I":
            if int(p[5]) == source:
                events.append({"kind": "iteration", "step": int(p[6]), "source": SOURCES[source], **base})
            continue

        def stream(text: str) -> int:
            raw = int(text)
            return stream_ids.setdefault(raw, len(stream_ids)) if raw > 0 else max(raw, 0)

        ctx = {"op": op["op"] if op else None, "op_shapes": _listify(op["shapes"]) if op else None,
               "op_dtypes": _listify(op["dtypes"]) if op else None}
        if kind == "K":
            name = demangle(log.kernels.get(int(p[6]), f"kernel_{p[6]}"))
            ev = {"kind": "kernel", "stream": stream(p[5]), "name": name, "grid": _dims(p[7]), "block": _dims(p[8]),
                  "shmem": int(p[9]), "lib": None, **ctx, "spec": _kernel_spec(op, name)}
            if len(p) > 12 and (p[10] != "0" or p[11] != "0"):  # what its launcher said it reads and writes
                ev["bytes_read"], ev["bytes_written"] = int(p[10]), int(p[11])
            if ev["spec"] and len(p) > 10 and int(p[-1]):  # the op call, last
                op_parts.mark(ev, (op_id, int(p[-1])))
        elif kind == "G":
            g = gemm_fields(p)
            ev = {"kind": "kernel", "stream": stream(p[5]), "name": p[7], "grid": None, "block": None, "shmem": 0,
                  "lib": p[6], **ctx, "gemm": g, "spec": gemm_spec(g)}
        elif kind == "C":
            ev = {"kind": "memcpy", "stream": stream(p[5]), "bytes": int(p[6]), "direction": p[7],
                  "blocking": p[8] == "1", "op": ctx["op"]}
        elif kind == "S":
            ev = {"kind": "memset", "stream": stream(p[5]), "bytes": int(p[6]), "op": ctx["op"]}
        elif kind == "M":
            if p[7] != "1":
                ev = {"kind": "malloc", "ptr": None, "bytes": int(p[6]), "failed": True}
            else:
                ev = {"kind": "malloc", "ptr": int(p[5]), "bytes": int(p[6])}
        elif kind == "f":
            ev = {"kind": "free", "ptr": int(p[5]), "bytes": int(p[6])}
        elif kind == "R":
            ev = {"kind": "event_record", "event": int(p[5]), "stream": stream(p[6])}
        elif kind == "W":
            ev = {"kind": "stream_wait_event", "stream": stream(p[5]), "event": int(p[6])}
        elif kind == "E":
            ev = {"kind": "event_sync", "event": int(p[5])}
        elif kind == "Y":
            ev = {"kind": "stream_sync", "stream": stream(p[5])}
        elif kind == "D":
            ev = {"kind": "device_sync"}
        elif kind == "N":
            ev = collective_event(p[5:], stream, log.comms, comm_sizes, ranks_per_node, ctx["op"])
        else:
            raise ShimLogError(f"{log.path}: unknown record kind {kind!r}")
        if pending:
            ev["graph_launch"], ev["graph_node"] = launches, node
            pending, node = pending - 1, node + 1
        if carried_gap:
            base["gap_ns"] += carried_gap
            carried_gap = 0
        if work:
            base.update(work)
            work = {}
        events.append({**ev, **base})
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


def comm_sizes(logs: list[RankLog]) -> dict[str, int]:
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
    """Largest sum of live cudaMalloc'd bytes over the trace (the device memory the run needed)."""
    live = peak = 0
    for ev in events:
        if ev["kind"] == "malloc" and not ev.get("failed"):
            live += ev["bytes"]
            peak = max(peak, live)
        elif ev["kind"] == "free":
            live -= ev["bytes"]
    return peak


__all__ = ["HOST_CLOCKS", "RankLog", "ShimLogError", "read_rank_log", "rank_events", "comm_sizes", "demangle",
           "gemm_spec", "collective_bytes", "collective_event", "peak_device_bytes"]
