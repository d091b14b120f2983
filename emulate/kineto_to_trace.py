"""Convert a PyTorch profiler (Kineto) trace into a stepcast trace (format v1) with measured durations.

    python -m emulate.kineto_to_trace rank0.json.gz out/rank0.trace.json.gz

Reading is :mod:`profiling.kineto`'s job (both schemas, gzip, kernels joined to launches and ops); this module
decides what the simulator must see:

- host order: every runtime call that put work on the device (launches, copies, memsets, graph launches) and every
  synchronising call, from all launching threads merged by start time. A non-blocking call's own duration belongs
  to the host gap before the next event; after a blocking call the next gap starts at the call's return.
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
  CUDA graph, another process on the GPU, launch latency above the median). The simulator holds the op that long.
- ``meta.launch_latency_us``: the median time from launch call to kernel start when the stream was idle.
- kernels get a ``spec`` from :func:`profiling.classify.classify_op` (op name, Input Dims, Input type) when the
  op context is recorded and the kernel's name does not contradict the family; of the kernels one op call
  launched, the first of each family takes it and the others are ``op_part`` (a split-K GEMM's reduction, a
  cuBLASLt epilogue: the estimators time the op as a whole).
"""
from __future__ import annotations

import argparse
import bisect
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiling.errors import report
from emulate.trace import FORMAT, VERSION, OpCalls, write_trace
from profiling import kineto
from profiling.classify import canonical_dtype, classify_kernel_name, classify_op
from profiling.families import dtype_bytes

SYNC_CALLS = {"cudaDeviceSynchronize": "device_sync", "cudaStreamSynchronize": "stream_sync",
              "cudaEventSynchronize": "stream_sync"}
BLOCKING_COPY_CALLS = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol")
COPY_DIRECTIONS = {"htod": "h2d", "dtoh": "d2h", "dtod": "d2d", "htoh": "h2h", "ptop": "d2d"}
NCCL_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "sendrecv": "send_recv",
            "send": "send", "recv": "recv"}
DEPENDENCY_SLACK_US = 10.0   # an op may start this long after the dependency that released it (scheduling)
DELAY_TOLERANCE_US = 1.0     # starts later than the model allows by less than this are jitter, not dependencies


def convert(trace: kineto.KinetoTrace, hardware: str | None = None, stalls: bool = True) -> dict[str, Any]:
    """The trace-v1 document (as :func:`emulate.trace.read_trace` returns) of one Kineto trace. ``stalls=False``
    leaves out the unexplained holds (``stall_us``): an ablation that shows how much of a replay's fidelity they
    carry."""
    ops = _device_ops(trace)
    latency = _launch_latency(ops)
    syncs = _sync_calls(trace, ops)
    dependencies, stall = _dependencies(ops, latency)
    if not stalls:
        stall[:] = 0.0
    items = _host_items(ops, stall, syncs, trace)
    items.extend(dependencies)
    steps = trace.profiler_steps()
    host_end = max((it["end"] for it in items), default=0.0)
    device_end = float((ops["ts"] + ops["dur"]).max()) if len(ops) else host_end
    if len(steps):
        for row in steps.itertuples():
            items.append({"ts": float(row.ts), "end": float(row.ts), "order": -1.0,
                          "ev": {"kind": "iteration", "step": int(row.step)}})
        last = steps.iloc[-1]
        items.append({"ts": float(last.end), "end": float(last.end), "order": -1.0,
                      "ev": {"kind": "iteration", "step": int(last.step) + 1, "end": True}})
        measured = steps["dur"].astype(float).tolist()
    else:
        first = min((it["ts"] for it in items), default=0.0)
        items.append({"ts": first, "end": first, "order": -2.0, "ev": {"kind": "iteration", "step": 0}})
        final = max(host_end, device_end)
        items.append({"ts": host_end, "end": final, "order": 1e18, "blocking": True,
                      "ev": {"kind": "device_sync"}})
        items.append({"ts": final, "end": final, "order": 2e18, "ev": {"kind": "iteration", "step": 1, "end": True}})
        measured = [final - first]
    events = _sequence(items)
    meta = {
        "source": str(trace.path), "importer": "emulate.kineto_to_trace", "schema": trace.schema,
        "device_name": trace.device_name, "launch_latency_us": latency, "measured_iterations_us": measured,
        "profiler_steps": steps["step"].astype(int).tolist() if len(steps) else [],
        # the host gaps below hold the real runtime calls' own cost; the trace's first event on the profiler's
        # clock, which the ranks of one node share (emulate.sim.host keeps their offsets)
        "call_costs_in_gaps": True, "clock_origin_us": _clock_origin(items),
    }
    return {"format": FORMAT, "version": VERSION, "rank": trace.rank, "world_size": trace.world_size,
            "hardware": hardware or trace.hardware_id or "unknown", "meta": meta, "events": events}


def _clock_origin(items: list[dict[str, Any]]) -> float:
    """The profiler-clock time (us) of the trace's first event, as :func:`_sequence` counts from it."""
    return float(min((it["ts"] for it in items), default=0.0))


def convert_file(path: str | Path, hardware: str | None = None, stalls: bool = True) -> dict[str, Any]:
    return convert(kineto.read_trace(path), hardware, stalls)


# ---- device ops ---------------------------------------------------------------------------------------------------

def _device_ops(trace: kineto.KinetoTrace) -> pd.DataFrame:
    """GPU activities in host launch order, with ``launch`` (the runtime call's start) and ``call_end``.

    An activity whose launch was not recorded (a thread outside the trace, a graph node) was launched after the
    activity before it on its stream and before it started: it takes that predecessor's launch time, which keeps
    it ahead of everything launched later in host order. Without such a predecessor it was queued before the
    profiler started (a GPU running behind its host): it counts as launched when the trace begins."""
    k = trace.kernels()
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


def _device_event(row: Any, comm_seq: dict[str, int], op_rows: pd.DataFrame | None,
                  world_size: int) -> dict[str, Any]:
    cat, name = row.cat, str(row.name)
    if cat == "gpu_memcpy":
        token = name.split()[1].lower() if len(name.split()) > 1 else ""
        direction = COPY_DIRECTIONS.get(token, "d2d")
        blocking = bool(row.runtime_name in BLOCKING_COPY_CALLS or
                        (isinstance(row.runtime_name, str) and row.call_end >= row.ts + row.dur))
        return {"kind": "memcpy", "stream": int(row.stream), "bytes": _int(row.bytes), "direction": direction,
                "blocking": blocking, "duration_us": float(row.dur)}
    if cat == "gpu_memset":
        return {"kind": "memset", "stream": int(row.stream), "bytes": _int(row.bytes), "duration_us": float(row.dur)}
    if name.startswith("nccl"):
        return _collective_event(row, comm_seq, op_rows, world_size)
    ev = {"kind": "kernel", "stream": int(row.stream), "name": name, "grid": _triple(row.grid),
          "block": _triple(row.block), "shmem": None, "lib": None, "op": _str(row.op_name),
          "op_shapes": _list(row.op_input_dims), "op_dtypes": _list(row.op_input_types),
          "spec": _kernel_spec(row), "duration_us": float(row.dur)}
    return ev


def _collective_event(row: Any, comm_seq: dict[str, int], op_rows: pd.DataFrame | None,
                      world_size: int) -> dict[str, Any]:
    name = str(row.name)
    token = name.split("_")[1].lower() if "_" in name else ""
    info = op_rows.loc[row.op_index] if op_rows is not None and row.op_index >= 0 else None

    def field(column: str) -> Any:
        value = info[column] if info is not None and column in info.index else None
        return None if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA else value

    op = NCCL_OPS.get(str(field("collective_name") or "").replace("_", "").lower()) or NCCL_OPS.get(token)
    comm = str(field("process_group_name") or "default")
    seq = comm_seq.get(comm, 0)
    comm_seq[comm] = seq + 1
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
        if kind == "stream_sync":
            stream = _awaited_stream(by_stream, ts, end)
            if stream is None:
                continue  # nothing was running: the call did not block
            item["ev"]["stream"] = stream
        out.append(item)
    return out


def _awaited_stream(by_stream: dict[int, tuple[np.ndarray, np.ndarray]], ts: float, end: float) -> int | None:
    """The stream whose work launched before ``ts`` finished last, but not after the call returned."""
    best, best_end = None, -np.inf
    for s, (launch, done) in by_stream.items():
        j = np.searchsorted(launch, ts, side="right") - 1
        if j < 0:
            continue
        finish = done[j]
        if finish <= end + DELAY_TOLERANCE_US and finish > best_end:
            best, best_end = s, finish
    return best


def _host_items(ops: pd.DataFrame, stall: np.ndarray, syncs: list[dict[str, Any]],
                trace: kineto.KinetoTrace) -> list[dict[str, Any]]:
    items = list(syncs)
    op_rows = trace.events if "collective_name" in trace.events.columns else None
    comm_seq: dict[str, int] = {}
    op_parts = OpCalls()
    for row, held in zip(ops.itertuples(), stall.tolist()):
        ev = _device_event(row, comm_seq, op_rows, trace.world_size)
        if ev.get("spec") and ev["kind"] == "kernel" and row.op_index >= 0:
            first = op_parts.mark(ev, int(row.op_index))
            if first is not None:
                first["op_duration_us"] = first.get("op_duration_us", first["duration_us"]) + ev["duration_us"]
        if held > 0:
            ev["stall_us"] = round(held, 3)
        items.append({"ts": float(row.launch), "end": float(row.call_end), "order": float(row.order),
                      "blocking": ev.get("blocking", False), "ev": ev})
    return items


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
    return items, stall


def _sequence(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Host-ordered trace events with seq, t_ns and gap_ns (gaps start at the previous call's start, or at its
    return when it blocked)."""
    items.sort(key=lambda it: (it["ts"], it["order"]))
    events = []
    t0 = items[0]["ts"] if items else 0.0
    free = t0
    for seq, it in enumerate(items):
        ts = it["ts"]
        ev = {"seq": seq, "kind": it["ev"]["kind"], "t_ns": int(round((ts - t0) * 1e3)),
              "gap_ns": int(round(max(0.0, ts - free) * 1e3))}
        ev.update((k, v) for k, v in it["ev"].items() if k != "kind" and v is not None)
        events.append(ev)
        free = max(free, it["end"] if it.get("blocking") else ts)
    return events


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate.kineto_to_trace", description=__doc__.split("\n\n")[0])
    parser.add_argument("kineto", type=Path, help="Kineto/Chrome trace (.json or .json.gz)")
    parser.add_argument("output", type=Path, help="stepcast trace to write (.json or .json.gz)")
    parser.add_argument("--hardware", default=None, help="catalog id, when the trace does not name its GPU")
    args = parser.parse_args(argv)
    try:
        doc = convert_file(args.kineto, args.hardware)
    except (kineto.TraceFormatError, OSError) as exc:
        return report(exc)
    write_trace(args.output, rank=doc["rank"], world_size=doc["world_size"], hardware=doc["hardware"],
                events=doc["events"], meta=doc["meta"])
    print(f"{args.output}: {len(doc['events'])} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
