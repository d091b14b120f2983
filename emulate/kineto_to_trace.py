"""Convert a PyTorch profiler (Kineto) trace into a stepcast trace (format v1) with measured durations.

    python -m stepcast.emulate.kineto_to_trace rank0.json.gz out/rank0.trace.json.gz

Reading is :mod:`profiling.kineto`'s job (both schemas, gzip, kernels joined to launches and ops); this module
decides what the simulator must see:

- host order: every runtime call that put work on the device (launches, copies, memsets, graph launches) and every
  synchronising call, from all launching threads merged by start time. A non-blocking call's own duration belongs
  to the host gap before the next event; after a blocking call the next gap starts when what it waited for was done
  (the rest of the call, waking the thread, is host time the simulator would otherwise lose at every sync).
- device ops on their streams in launch order, each with ``duration_us`` = its measured duration. NCCL kernels
  become ``collective`` events (op, communicator, bytes and ranks from the ``record_param_comms`` op around them).
- blocking: cudaDeviceSynchronize -> ``device_sync``; cudaStreamSynchronize / cudaEventSynchronize -> ``stream_sync``
  on the stream whose work the call waited for (the stream with the latest work finishing before the call
  returned: Kineto does not say which stream or event); cudaMemcpy, and cudaMemcpyAsync calls that returned only
  after their copy ended (pageable memory), -> blocking ``memcpy``.
- cross-stream dependencies: Kineto does not record which event a cudaStreamWaitEvent waited for, so they are
  inferred from the measurements: an op that started later than its launch and its stream allowed was held by
  another stream; the op on another stream, launched earlier, whose end explains the start is its dependency, and
  an ``event_record`` after that op plus a ``stream_wait_event`` before this one make the simulator hold it too.
- iterations: ``iteration`` markers at the ProfilerStep#N spans' starts and a closing marker (``end: true``) at
  the last span's end; without spans the whole trace is one iteration, closed after all device work drained.
  ``meta.measured_iterations_us`` keeps the measured span durations for the report.
- ``stall_us`` (an optional field of device events, added to format v1 here): what remains of an op's delay when
  its launch, its stream and the inferred dependency are accounted for: waits the trace does not show (nodes of a
  CUDA graph, another process on the GPU, launch latency above the median by more than a microsecond of jitter),
  and all of the gap between an op queued on its stream and its predecessor's end (the GPU's back-to-back gap).
  The simulator holds the op that long.
- ``meta.launch_latency_us``: the median time from launch call to kernel start when the stream was idle.
- kernels get a ``spec`` from :func:`profiling.classify.classify_op` (op name, Input Dims, Input type) when the
  op context is recorded and the kernel's name does not contradict the family; of the kernels one op call
  launched, the first of each family takes it and the others are ``op_part`` (a split-K GEMM's reduction, a
  cuBLASLt epilogue: the estimators time the op as a whole).
"""
from __future__ import annotations

import argparse
import bisect
import dataclasses
import math
import sys
from array import array
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from stepcast.emulate.trace import FORMAT, VERSION, EventTable, EventTableBuilder, OpCalls, write_trace
from stepcast.profiling import kineto
from stepcast.profiling.classify import canonical_dtype, classify_kernel_name, classify_op
from stepcast.profiling.families import dtype_bytes
from stepcast.errors import cli_main
from stepcast.preflight import Preflight

SYNC_CALLS = {"cudaDeviceSynchronize": "device_sync", "cudaStreamSynchronize": "stream_sync",
              "cudaEventSynchronize": "stream_sync"}
BLOCKING_COPY_CALLS = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol")
COPY_DIRECTIONS = {"htod": "h2d", "dtoh": "d2h", "dtod": "d2d", "htoh": "h2h", "ptop": "d2d"}
NCCL_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "sendrecv": "send_recv",
            "send": "send", "recv": "recv"}
DEPENDENCY_SLACK_US = 10.0   # an op may start this long after the dependency that released it (scheduling)
DELAY_TOLERANCE_US = 1.0     # starts later than the model allows by less than this are jitter, not dependencies
# the event arguments the conversion reads (profiling.kineto columns); the others are not kept when reading
READ_ARGUMENTS = ("external_id", "correlation", "stream", "device", "bytes", "grid", "block", "input_dims",
                  "input_types", "collective_name", "in_msg_nelems", "out_msg_nelems", "group_size",
                  "collective_dtype", "process_group_name")
# the events-frame columns that name a collective (on the record_param_comms op around an NCCL kernel)
COLLECTIVE_COLUMNS = ("collective_name", "in_msg_nelems", "out_msg_nelems", "group_size", "collective_dtype",
                      "process_group_name")
# the events-frame columns profiling.kineto.join_kernels needs to give the DEVICE_OP_COLUMNS below, and that the
# sync calls and profiler steps are read from
JOIN_COLUMNS = ("cat", "name", "ts", "dur", "pid", "tid", "correlation", "external_id", "stream", "bytes", "grid",
                "block", "input_dims", "input_types")
PROGRESS_EVERY = 1 << 16     # device ops converted between two progress reports
# what the conversion reads of the kernels frame (profiling.kineto.join_kernels): the rest is dropped at once
DEVICE_OP_COLUMNS = ("cat", "name", "ts", "dur", "stream", "bytes", "grid", "block", "runtime_name", "runtime_ts",
                     "runtime_dur", "op_index", "op_name", "op_input_dims", "op_input_types", "launch", "call_end",
                     "order")


ConvertProgress = Callable[[str, int, int], None]  # (stage, done, total)


def convert(trace: kineto.KinetoTrace, hardware: str | None = None, stalls: bool = True,
            progress: ConvertProgress | None = None) -> dict[str, Any]:
    """The trace-v1 document (as :func:`emulate.trace.read_trace` returns) of one Kineto trace. ``stalls=False``
    leaves out the unexplained holds (``stall_us``): an ablation that shows how much of a replay's fidelity they
    carry. ``progress`` is told how far the conversion is (stage, ops done, ops in all)."""
    return _convert_owned([trace], hardware, stalls, progress)


def _convert_owned(box: list[kineto.KinetoTrace], hardware: str | None, stalls: bool,
                   progress: ConvertProgress | None) -> dict[str, Any]:
    """:func:`convert` of the trace in ``box``, which it takes out: when the caller holds no other reference, the
    trace's events frame is freed as soon as the columns the conversion needs are out of it (a 2M-kernel trace's
    frame is gigabytes; the document built next is of the same order)."""
    trace = box.pop()
    report_stage = progress or (lambda stage, done, total: None)
    report_stage("joining kernels to launches", 0, 1)
    facts = {"rank": trace.rank, "world_size": trace.world_size, "hardware_id": trace.hardware_id,
             "device_name": trace.device_name, "path": str(trace.path), "schema": trace.schema}
    steps = trace.profiler_steps()
    comm_rows = _collective_rows(trace.events)
    # from here on only the columns the kernel join matches on and the conversion reads: a column selection shares
    # the arrays, so the others (the collectives' columns: a few hundred MB for millions of events) are freed now
    # when nobody else holds the trace, before the join makes its copies
    events = trace.events
    trace = dataclasses.replace(trace, events=events[[c for c in events.columns if c in JOIN_COLUMNS]])
    del events
    kineto.release_freed_memory()
    ops = _device_ops(trace)
    syncs = _sync_calls(trace, ops)
    op_rows = _collective_ops(comm_rows, ops)
    del trace, comm_rows  # the events frame goes with it when nobody else holds the trace
    kineto.release_freed_memory()
    latency = _launch_latency(ops)
    report_stage("finding dependencies", 0, 1)
    dependencies, stall = _dependencies(ops, latency)
    if not stalls:
        stall[:] = 0.0
    items = _HostItems()
    for sync in syncs:
        items.add(sync["ts"], sync["end"], sync["order"], True, sync["ev"], satisfied=sync["satisfied"])
    _host_items(items, ops, stall, op_rows, facts["world_size"], report_stage)
    device_end = float((ops["ts"] + ops["dur"]).max()) if len(ops) else None
    del ops, stall
    for dep in dependencies:
        items.add(dep["ts"], dep["end"], dep["order"], False, dep["ev"])
    host_end = items.host_end()
    device_end = host_end if device_end is None else device_end
    if len(steps):
        for row in steps.itertuples():
            items.add(float(row.ts), float(row.ts), -1.0, False, {"kind": "iteration", "step": int(row.step)})
        last = steps.iloc[-1]
        items.add(float(last.end), float(last.end), -1.0, False,
                  {"kind": "iteration", "step": int(last.step) + 1, "end": True})
        measured = steps["dur"].astype(float).tolist()
    else:
        first = items.first_ts()
        items.add(first, first, -2.0, False, {"kind": "iteration", "step": 0})
        final = max(host_end, device_end)
        items.add(host_end, final, 1e18, True, {"kind": "device_sync"})
        items.add(final, final, 2e18, False, {"kind": "iteration", "step": 1, "end": True})
        measured = [final - first]
    clock_origin = items.first_ts()
    report_stage("ordering host events", 0, 1)
    events = items.sequence()
    meta = {
        "source": facts["path"], "importer": "stepcast.emulate.kineto_to_trace", "schema": facts["schema"],
        "device_name": facts["device_name"], "launch_latency_us": latency, "measured_iterations_us": measured,
        "profiler_steps": steps["step"].astype(int).tolist() if len(steps) else [],
        # the host gaps below hold the real runtime calls' own cost; the trace's first event on the profiler's
        # clock, which the ranks of one node share (emulate.sim.host keeps their offsets)
        "call_costs_in_gaps": True, "clock_origin_us": clock_origin,
    }
    return {"format": FORMAT, "version": VERSION, "rank": facts["rank"], "world_size": facts["world_size"],
            "hardware": hardware or facts["hardware_id"] or "unknown", "meta": meta, "events": events}


class _HostItems:
    """Host-ordered items in parallel columns (start, return, tie-break order, blocking) and the trace events,
    appended to an event table as they come (a large trace has millions: no dict is kept per item)."""

    def __init__(self) -> None:
        self.ts, self.end, self.order, self.satisfied = array("d"), array("d"), array("d"), array("d")
        self.blocking = bytearray()
        self.events = EventTableBuilder()

    @property
    def n(self) -> int:
        return len(self.events)

    def add(self, ts: float, end: float, order: float, blocking: bool, ev: dict[str, Any],
            satisfied: float | None = None) -> int:
        """Add an item; returns its row (null fields of ``ev`` are left out). ``satisfied``: for a blocking call,
        when what it waited for was done (the awaited work's end, never before the call; default its return)."""
        self.ts.append(ts)
        self.end.append(end)
        self.satisfied.append(end if satisfied is None else min(end, max(ts, satisfied)))
        self.order.append(order)
        self.blocking.append(bool(blocking))
        return self.events.append(ev, drop_none=True)

    def host_end(self) -> float:
        return float(max(self.end)) if self.n else 0.0

    def first_ts(self) -> float:
        """The profiler-clock time (us) of the trace's first event, as :meth:`sequence` counts from it."""
        return float(min(self.ts)) if self.n else 0.0

    def sequence(self) -> EventTable:
        """Host-ordered trace events with seq, t_ns and gap_ns (gaps start at the previous call's start, or, when it
        blocked, at the moment what it waited for was done).

        Why not at a blocking call's return: the simulator resumes the host when the awaited work ends, so the time
        the real call took beyond that (waking the waiting thread, the call's own cost: a few microseconds a sync)
        belongs to the gap after it. Counted from the return, a loop that syncs every token (decoding) loses that
        much per token."""
        ts, order, satisfied = (np.frombuffer(a, dtype=np.float64) for a in (self.ts, self.order, self.satisfied))
        blocking = np.frombuffer(bytes(self.blocking), dtype=bool)
        idx = np.lexsort((order, ts))  # by (ts, order), stable like a sort by that key
        ts, satisfied, blocking = ts[idx], satisfied[idx], blocking[idx]
        t0 = float(ts[0]) if len(ts) else 0.0
        # the host is free again at each item's start, or when what it waited for was done if it blocked; never
        # earlier than before
        release = np.where(blocking, satisfied, ts)
        free = np.maximum.accumulate(np.concatenate(([t0], release[:-1]))) if len(ts) else ts
        t_ns = np.rint((ts - t0) * 1e3).astype(np.int64)
        gap_ns = np.rint(np.maximum(0.0, ts - free) * 1e3).astype(np.int64)
        table = self.events.finish(order=idx)
        self.events = EventTableBuilder()
        return table.with_columns(seq=np.arange(len(idx), dtype=np.int64), t_ns=t_ns, gap_ns=gap_ns)


def _collective_rows(events: pd.DataFrame) -> pd.DataFrame | None:
    """The collective columns of the events that have any (the ``record_param_comms`` ops); None when the trace
    has no such columns."""
    columns = [c for c in COLLECTIVE_COLUMNS if c in events.columns]
    if "collective_name" not in columns:
        return None
    return events.loc[events[columns].notna().any(axis=1), columns]


def _collective_ops(comm_rows: pd.DataFrame | None, ops: pd.DataFrame) -> pd.DataFrame | None:
    """The collective columns of the host ops around the NCCL kernels, by event row (all null for an op that
    names no collective): they name the collective. None when the trace has no such columns."""
    if comm_rows is None or ops.empty:
        return None
    # each distinct name tested once: a string copy of every device op's name is a large transient at scale
    rows = ops.loc[kineto.match_names(ops["name"], "nccl") & (ops["op_index"] >= 0).to_numpy(), "op_index"]
    return comm_rows.reindex(np.unique(rows.to_numpy(dtype=np.int64)))


def convert_file(path: str | Path, hardware: str | None = None, stalls: bool = True,
                 progress: ConvertProgress | None = None) -> dict[str, Any]:
    """Read and convert one Kineto trace; ``progress`` hears of reading ("reading", bytes, file size) and of the
    conversion's stages."""
    read_progress = (lambda done, total: progress("reading", done, total)) if progress else None
    return _convert_owned([kineto.read_trace(path, read_progress, READ_ARGUMENTS)], hardware, stalls, progress)


# ---- device ops ---------------------------------------------------------------------------------------------------

def _device_ops(trace: kineto.KinetoTrace) -> pd.DataFrame:
    """GPU activities in host launch order, with ``launch`` (the runtime call's start) and ``call_end``.

    An activity whose launch was not recorded (a thread outside the trace, a graph node) was launched after the
    activity before it on its stream and before it started: it takes that predecessor's launch time, which keeps
    it ahead of everything launched later in host order. Without such a predecessor it was queued before the
    profiler started (a GPU running behind its host): it counts as launched when the trace begins."""
    k = trace.kernels()
    k = k[[c for c in DEVICE_OP_COLUMNS if c in k.columns]]  # what the conversion reads: each copy below is smaller
    if k.empty:
        return k.assign(launch=[], call_end=[], order=[])
    k = k[k["stream"].notna()].copy()
    k["stream"] = k["stream"].astype(int)
    k = k.sort_values("ts", kind="stable")
    runtime = k["runtime_ts"].astype(float)
    trace_begins = min(float(runtime.min()), float(k["ts"].min())) if runtime.notna().any() else float(k["ts"].min())
    k["launch"] = np.minimum(runtime.groupby(k["stream"]).ffill().fillna(trace_begins), k["ts"]).to_numpy()
    k["call_end"] = (runtime + k["runtime_dur"].astype(float)).fillna(k["launch"]).to_numpy()
    # Launch order; kernels of one graph launch share the call, and run in their recorded order.
    k = k.sort_values(["launch", "ts"], kind="stable").reset_index(drop=True)
    k["order"] = np.arange(len(k), dtype=np.float64)
    return k


def _launch_latency(ops: pd.DataFrame) -> float:
    """Median launch-to-start time of ops whose stream was idle when they were launched (us)."""
    if ops.empty:
        return 0.0
    delays = []
    for _, g in ops.groupby("stream", sort=False):
        g = g.sort_values("ts")
        prev_end = (g["ts"] + g["dur"]).shift(1).fillna(-np.inf).to_numpy()
        launched = g["runtime_ts"].notna().to_numpy()
        idle = launched & (prev_end < g["launch"].to_numpy())
        delays.append((g["ts"].to_numpy() - g["launch"].to_numpy())[idle])
    d = np.concatenate(delays) if delays else np.zeros(0)
    d = d[d >= 0]
    return float(np.median(d)) if len(d) else 0.0


def _device_event(row: Any, comm_seq: dict[Any, int], op_rows: pd.DataFrame | None,
                  world_size: int, shared: "_SharedValues | None" = None) -> dict[str, Any]:
    cat, name = row.cat, str(row.name)
    if cat == "gpu_memcpy":
        token = name.split()[1].lower() if len(name.split()) > 1 else ""
        direction = COPY_DIRECTIONS.get(token, "d2d")
        blocking = bool(row.runtime_name in BLOCKING_COPY_CALLS or
                        (isinstance(row.runtime_name, str) and row.call_end >= row.ts + row.dur))
        return {"kind": "memcpy", "stream": int(row.stream), "bytes": _int(row.bytes), "direction": direction,
                "blocking": blocking, "duration_us": float(row.dur), **({"peer": True} if token == "ptop" else {})}
    if cat == "gpu_memset":
        return {"kind": "memset", "stream": int(row.stream), "bytes": _int(row.bytes), "duration_us": float(row.dur)}
    if name.startswith("nccl"):
        return _collective_event(row, comm_seq, op_rows, world_size)
    if shared is None:
        shared = _SharedValues()
    ev = {"kind": "kernel", "stream": int(row.stream), "name": name, "grid": shared.as_list(row.grid, _triple),
          "block": shared.as_list(row.block, _triple), "shmem": None, "lib": None, "op": _str(row.op_name),
          "op_shapes": shared.as_list(row.op_input_dims, _list), "op_dtypes": shared.as_list(row.op_input_types, _list),
          "spec": shared.spec(row), "duration_us": float(row.dur)}
    return ev


def _collective_event(row: Any, comm_seq: dict[Any, int], op_rows: pd.DataFrame | None,
                      world_size: int) -> dict[str, Any]:
    name = str(row.name)
    token = name.split("_")[1].lower() if "_" in name else ""
    info = op_rows.loc[row.op_index] if op_rows is not None and row.op_index >= 0 else None

    def field(column: str) -> Any:
        value = info[column] if info is not None and column in info.index else None
        return None if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA else value

    op = NCCL_OPS.get(str(field("collective_name") or "").replace("_", "").lower()) or NCCL_OPS.get(token)
    comm = str(field("process_group_name") or "default")
    counter = (comm, "p2p") if (op or "") in ("send", "recv") else comm   # numbered apart (emulate/trace.py)
    seq = comm_seq.get(counter, 0)
    comm_seq[counter] = seq + 1
    dtype_name = field("collective_dtype")
    dtype = canonical_dtype(str(dtype_name)) if dtype_name else (classify_kernel_name(name) or {}).get("dtype")
    nelems = max(_int(field("in_msg_nelems")) or 0, _int(field("out_msg_nelems")) or 0)
    ranks = _int(field("group_size")) or world_size
    ev: dict[str, Any] = {"kind": "collective", "stream": int(row.stream), "op": op or "all_reduce", "comm": comm,
                          "comm_seq": seq, "ranks": ranks, "name": name, "duration_us": float(row.dur)}
    if nelems and dtype:
        ev["count"], ev["dtype"] = nelems, dtype
        ev["bytes"] = nelems * dtype_bytes(dtype)
    return ev


def _kernel_spec(row: Any) -> dict[str, Any] | None:
    op, dims = _str(row.op_name), _list(row.op_input_dims)
    if not op or dims is None:
        return None
    try:
        spec = classify_op(op, dims, _list(row.op_input_types) or [], kernel_name=str(row.name))
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    if spec is None:
        return None
    by_name = classify_kernel_name(str(row.name))
    if by_name is not None and by_name.get("family") != spec.get("family"):
        return None  # the op launched a helper kernel of another kind (bias add, cast): do not time it as the op
    if by_name is None and spec.get("family") in ("gemm", "attention"):
        return None
    return spec


# ---- host side ----------------------------------------------------------------------------------------------------

def _sync_calls(trace: kineto.KinetoTrace, ops: pd.DataFrame) -> list[dict[str, Any]]:
    """Synchronising runtime calls as host items, with the stream they waited for (see the module docstring)."""
    ev = trace.events
    calls = ev[(ev["cat"] == "cuda_runtime") & ev["name"].isin(list(SYNC_CALLS))]
    out = []
    if ops.empty:
        by_stream: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    else:
        by_stream = {}
        for s, g in ops.groupby("stream", sort=False):
            g = g.sort_values("launch")
            by_stream[int(s)] = (g["launch"].to_numpy(), np.maximum.accumulate((g["ts"] + g["dur"]).to_numpy()))
    for row in calls.itertuples():
        ts, end = float(row.ts), float(row.ts + row.dur)
        kind = SYNC_CALLS[row.name]
        item = {"ts": ts, "end": end, "order": -0.5, "blocking": True, "ev": {"kind": kind}}
        finished = _finished_before(by_stream, ts)
        if kind == "stream_sync":
            stream = _awaited_stream(finished, end)
            if stream is None:
                continue  # nothing was running: the call did not block
            item["ev"]["stream"] = stream
            item["satisfied"] = finished[stream]
        else:
            item["satisfied"] = max(finished.values(), default=ts)
        out.append(item)
    return out


def _finished_before(by_stream: dict[int, tuple[np.ndarray, np.ndarray]], ts: float) -> dict[int, float]:
    """Per stream, when the work launched before ``ts`` had all finished (streams with none left out)."""
    out = {}
    for s, (launch, done) in by_stream.items():
        j = np.searchsorted(launch, ts, side="right") - 1
        if j >= 0:
            out[s] = float(done[j])
    return out


def _awaited_stream(finished: dict[int, float], end: float) -> int | None:
    """The stream whose work launched before the call finished last, but not after the call returned."""
    best, best_end = None, -np.inf
    for s, finish in finished.items():
        if finish <= end + DELAY_TOLERANCE_US and finish > best_end:
            best, best_end = s, finish
    return best


def _host_items(items: "_HostItems", ops: pd.DataFrame, stall: np.ndarray, op_rows: pd.DataFrame | None,
                world_size: int, report_stage: ConvertProgress) -> None:
    """Each device op as a host item (its launch call) of ``items``. Values repeated across millions of kernels
    (spec, grid, block, op shapes) are made once and shared by every event that has them."""
    comm_seq: dict[Any, int] = {}
    op_parts = OpCalls()
    builder = items.events
    shared = _SharedValues()
    total = len(ops)
    for n, (row, held) in enumerate(zip(ops.itertuples(), stall.tolist())):
        if n % PROGRESS_EVERY == 0:
            report_stage("converting device ops", n, total)
        ev = _device_event(row, comm_seq, op_rows, world_size, shared)
        if ev.get("spec") and ev["kind"] == "kernel" and row.op_index >= 0:
            first = op_parts.mark(ev, int(row.op_index), token=items.n)
            if first is not None:
                so_far = builder.number(first, "op_duration_us")
                builder.set_number(first, "op_duration_us",
                                   (builder.number(first, "duration_us") if so_far is None else so_far)
                                   + ev["duration_us"])
        if held > 0:
            ev["stall_us"] = round(held, 3)
        items.add(float(row.launch), float(row.call_end), float(row.order), ev.get("blocking", False), ev,
                  satisfied=float(row.ts + row.dur) if ev.get("blocking") else None)
    report_stage("converting device ops", total, total)


class _SharedValues:
    """One object per distinct value: a kernel's spec (classifying an op is the slow part of the conversion, and
    a training step repeats the same few hundred ops), its grid and block, its op's shapes and dtypes. The reader
    already shares equal lists (:mod:`profiling.kineto`), so identity is the key, and the frame holding those
    lists outlives this table."""

    def __init__(self) -> None:
        self.specs: dict[tuple, dict[str, Any] | None] = {}
        self.lists: dict[int, list | None] = {}

    def spec(self, row: Any) -> dict[str, Any] | None:
        key = (row.op_name if isinstance(row.op_name, str) else None, id(row.op_input_dims),
               id(row.op_input_types), row.name)
        if key not in self.specs:
            self.specs[key] = _kernel_spec(row)
        return self.specs[key]

    def as_list(self, value: Any, convert: Callable[[Any], list | None]) -> list | None:
        key = id(value)
        if key not in self.lists:
            self.lists[key] = convert(value)
        return self.lists[key]


def _dependencies(ops: pd.DataFrame, latency: float) -> tuple[list[dict[str, Any]], np.ndarray]:
    """event_record / stream_wait_event pairs for ops held back by another stream, and each op's stall: the
    part of its delay that nothing in the trace explains (module docstring)."""
    stall = np.zeros(len(ops))
    if ops.empty:
        return [], stall
    start = ops["ts"].to_numpy(dtype=float)
    end = start + ops["dur"].to_numpy(dtype=float)
    launch = ops["launch"].to_numpy(dtype=float)
    stream = ops["stream"].to_numpy()
    order = ops["order"].to_numpy()
    prev_end = np.full(len(ops), -np.inf)
    for _, idx in ops.groupby("stream", sort=False).indices.items():
        idx = np.asarray(idx)[np.argsort(start[idx], kind="stable")]
        prev_end[idx[1:]] = np.maximum.accumulate(end[idx])[:-1]
    allowed = np.maximum(launch + latency, prev_end)
    delayed = np.flatnonzero(start > allowed + DELAY_TOLERANCE_US)
    by_end = np.argsort(end, kind="stable")
    sorted_end = end[by_end]
    items = []
    handle = 0
    for i in delayed.tolist():
        released = allowed[i]
        j = bisect.bisect_right(sorted_end, start[i] + DELAY_TOLERANCE_US) - 1
        while j >= 0 and sorted_end[j] > allowed[i] - DELAY_TOLERANCE_US:
            x = by_end[j]
            if stream[x] != stream[i] and order[x] < order[i] and start[i] - end[x] <= latency + DEPENDENCY_SLACK_US:
                handle += 1
                items.append({"ts": float(launch[x]), "end": float(launch[x]), "order": order[x] + 0.5,
                              "ev": {"kind": "event_record", "event": handle, "stream": int(stream[x])}})
                items.append({"ts": float(launch[i]), "end": float(launch[i]), "order": order[i] - 0.25,
                              "ev": {"kind": "stream_wait_event", "stream": int(stream[i]), "event": handle}})
                released = max(released, end[x])
                break
            j -= 1
        if start[i] - released > DELAY_TOLERANCE_US:
            stall[i] = start[i] - released
    # an op queued behind its stream's previous one starts a little after it ends (the GPU's gap between dependent
    # kernels, about a microsecond): systematic, not jitter around the median launch latency, so every bit of it is
    # kept (a decode step of a few hundred short kernels is otherwise replayed short by that much per kernel)
    queued = (prev_end >= launch + latency) & (start > prev_end) & (start <= allowed + DELAY_TOLERANCE_US)
    stall[queued] = start[queued] - prev_end[queued]
    return items, stall


# ---- small conversions --------------------------------------------------------------------------------------------

def _int(value: Any) -> int | None:
    try:
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _list(value: Any) -> list | None:
    return list(value) if isinstance(value, (list, tuple)) else None


def _triple(value: Any) -> list[int] | None:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else None


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate.kineto_to_trace",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("kineto", type=Path, help="Kineto/Chrome trace (.json or .json.gz)")
    parser.add_argument("output", type=Path, help="stepcast trace to write (.json or .json.gz)")
    parser.add_argument("--hardware", default=None, help="catalog id, when the trace does not name its GPU")
    args = parser.parse_args(argv)
    check = Preflight()
    check.input_file("kineto", args.kineto)
    check.output_file("output", args.output)
    refused = check.refuse()
    if refused is not None:
        return refused
    doc = convert_file(args.kineto, args.hardware)
    write_trace(args.output, rank=doc["rank"], world_size=doc["world_size"], hardware=doc["hardware"],
                events=doc["events"], meta=doc["meta"])
    print(f"{args.output}: {len(doc['events'])} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
