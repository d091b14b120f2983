"""The predicted timeline as a Chrome trace-event JSON file (opens in ui.perfetto.dev and chrome://tracing).

One process per rank ("rank N"); in it one track for the host thread (iterations and the time it spends blocked in
synchronising calls) and one track per device stream (kernels, copies, collectives; a collective that waits for
peer ranks shows the wait as a separate "wait for peers" slice). Times are microseconds, as the format expects.
Kernel slices are named by :func:`short_kernel_name` (templates and argument lists elided: demangled names run to
thousands of characters); the whole name is in the slice's ``args.kernel``.

Which ranks: by default those that ran. A sparse run's copies (``--run-ranks``) repeat their twins' programs, and
writing them all would make a 256-rank run's file tens of GB that no viewer opens; ``ranks`` names others.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Collection, Iterator

from stepcast.profiling.atomic import atomic_text
from stepcast.emulate.sim.program import (
    COLLECTIVE, DEVICE_SYNC, EVENT_SYNC, MEMCPY, MEMCPY_BLOCKING, MEMSET, STREAM_SYNC, RankProgram,
)

HOST_TID = 0
SHORT_NAME_MAX = 96
_SYNC_NAMES = {EVENT_SYNC: "event_sync", STREAM_SYNC: "stream_sync", DEVICE_SYNC: "device_sync",
               MEMCPY_BLOCKING: "blocking memcpy"}


def short_kernel_name(name: str) -> str:
    """``void at::native::elementwise_kernel<128, 4, ...>(int, ...)`` -> ``at::native::elementwise_kernel``: the
    qualified function name without return type, template arguments or parameter list."""
    text = name.replace("(anonymous namespace)", "{anon}")
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            if ch == "(":
                break            # the parameter list
            out.append(ch)
    short = "".join(out).strip()
    if " " in short:             # a return type ("void ...")
        short = short.rsplit(" ", 1)[-1]
    short = short.replace("{anon}", "(anonymous)")
    if not short:
        short = name
    return short if len(short) <= SHORT_NAME_MAX else short[:SHORT_NAME_MAX - 3] + "..."


def stream_tid(index: int) -> int:
    """Track id of a stream (dense stream index) inside its rank's process."""
    return 1 + index


def ran(prog: RankProgram) -> bool:
    """Whether a rank's program was captured (not a sparse run's copy of its twin's)."""
    return prog.meta.get("copied_from") is None


def timeline_events(result, ranks: Collection[int] | None = None) -> Iterator[dict[str, Any]]:
    """Trace events of a :class:`emulate.simulate.SimulationResult`, for ``ranks`` (default: the ranks that ran)."""
    from stepcast.emulate.report import iteration_spans

    for r, (prog, tl) in enumerate(zip(result.programs, result.timelines)):
        if not (ran(prog) if ranks is None else prog.rank in ranks):
            continue
        pid = prog.rank
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": HOST_TID, "args": {"name": f"rank {pid}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": HOST_TID, "args": {"sort_index": pid}}
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": HOST_TID, "args": {"name": "host"}}
        for idx, sid in enumerate(prog.stream_ids):
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": stream_tid(idx),
                   "args": {"name": f"stream {sid}"}}
        for n, (a, b) in enumerate(iteration_spans(prog, tl).tolist()):
            yield {"ph": "X", "name": f"iteration {n}", "cat": "iteration", "pid": pid, "tid": HOST_TID, "ts": a,
                   "dur": max(b - a, 0.0)}
        yield from _device_slices(prog, tl, result.durations.measured[r])
        for i, code in enumerate(prog.kind):
            if code in _SYNC_NAMES and code != MEMCPY_BLOCKING and tl.end[i] > tl.start[i]:
                yield {"ph": "X", "name": _SYNC_NAMES[code], "cat": "sync", "pid": pid, "tid": HOST_TID,
                       "ts": float(tl.start[i]), "dur": float(tl.end[i] - tl.start[i])}
            elif code == MEMCPY_BLOCKING and tl.end[i] > tl.host_recorded[i]:
                issued = tl.host_recorded[i]
                yield {"ph": "X", "name": _SYNC_NAMES[code], "cat": "sync", "pid": pid, "tid": HOST_TID,
                       "ts": float(issued), "dur": float(tl.end[i] - issued)}


def _device_slices(prog: RankProgram, tl, measured) -> Iterator[dict[str, Any]]:
    pid = prog.rank
    events, kind, stream = prog.events, prog.kind, prog.stream
    start, end = tl.start, tl.end
    for i in prog.device_index.tolist():
        ev = events[i]
        code = kind[i]
        tid = stream_tid(stream[i])
        if code == COLLECTIVE:
            name = f"{ev.get('op', 'collective')} {ev.get('comm', '')}".strip()
            cat = "collective"
            if i in tl.arrival and start[i] > tl.arrival[i]:
                yield {"ph": "X", "name": "wait for peers", "cat": "collective_wait", "pid": pid, "tid": tid,
                       "ts": float(tl.arrival[i]), "dur": float(start[i] - tl.arrival[i])}
        elif code in (MEMCPY, MEMCPY_BLOCKING):
            name, cat = f"memcpy {ev.get('direction', '')}".strip(), "memcpy"
        elif code == MEMSET:
            name, cat = "memset", "memset"
        else:
            name, cat = short_kernel_name(str(ev.get("name") or "kernel")), "kernel"
        args = {"seq": i, "duration": "measured" if measured[i] else "predicted"}
        if cat == "kernel" and ev.get("name"):
            args["kernel"] = ev["name"]
        if ev.get("op"):
            args["op"] = ev["op"]
        yield {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": float(start[i]),
               "dur": float(end[i] - start[i]), "args": args}


def write_timeline(result, path: Path, ranks: Collection[int] | None = None) -> Path:
    """Write the timeline of ``ranks`` (default: the ranks that ran) atomically (temporary file in the same folder,
    then rename)."""
    with atomic_text(path) as f:
        f.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        for n, ev in enumerate(timeline_events(result, ranks)):
            if n:
                f.write(",\n")
            f.write(json.dumps(ev, separators=(",", ":")))
        f.write("\n]}\n")
    return Path(path)
