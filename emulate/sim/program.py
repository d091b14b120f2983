"""One rank's trace (format v1, :mod:`emulate.trace`) turned into flat columns the simulator loops over.

The simulator's inner loop must touch each event a handful of times at most, so the trace's event table
(:class:`emulate.trace.EventTable`: numeric columns and one shared dict per distinct event shape) is read exactly
once, here, into parallel Python lists of small ints and floats (Python lists index faster than numpy arrays
element by element); fields are taken per shape and spread over the events by numpy indexing, and the table
stays the program's ``events`` (read by the few consumers that need more than the columns). Everything that does not
depend on simulated time is settled here too: stream and event handles are renumbered densely, and device memory
(malloc/free) is accumulated into the rank's peak, which needs no clock at all.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from stepcast.emulate.trace import EventTable, TraceFormatError, as_table

# Event codes, ordered so that the inner loop tests the common cases first: every device op is < COLLECTIVE.
KERNEL, MEMCPY, MEMSET, MEMCPY_BLOCKING, COLLECTIVE = 0, 1, 2, 3, 4
MALLOC, FREE, EVENT_RECORD, STREAM_WAIT_EVENT, EVENT_SYNC, STREAM_SYNC, DEVICE_SYNC, ITERATION = range(5, 13)

KIND_CODES: dict[str, int] = {
    "kernel": KERNEL, "memcpy": MEMCPY, "memset": MEMSET, "collective": COLLECTIVE, "malloc": MALLOC,
    "free": FREE, "event_record": EVENT_RECORD, "stream_wait_event": STREAM_WAIT_EVENT, "event_sync": EVENT_SYNC,
    "stream_sync": STREAM_SYNC, "device_sync": DEVICE_SYNC, "iteration": ITERATION,
}
DEVICE_CODES = frozenset({KERNEL, MEMCPY, MEMSET, MEMCPY_BLOCKING, COLLECTIVE})

# Fields each kind must carry (beyond kind and gap_ns), checked only when the fast path trips over a missing one.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "kernel": ("stream",), "memcpy": ("stream", "bytes", "direction"), "memset": ("stream", "bytes"),
    "collective": ("stream", "op", "comm", "ranks"), "malloc": ("bytes",), "free": (),
    "event_record": ("event", "stream"), "stream_wait_event": ("stream", "event"), "event_sync": ("event",),
    "stream_sync": ("stream",), "device_sync": (), "iteration": (),
}


@dataclass
class RankProgram:
    """The columns of one rank's trace. Index ``i`` is the event's position in the trace (its ``seq``)."""

    source: str
    rank: int
    world_size: int
    hardware: str
    meta: dict[str, Any]
    events: EventTable                 # the trace's events (rank-free: ranks running the same work may share it)
    kind: list[int]
    kind_array: np.ndarray             # the same codes as an int8 array
    gap_ns: list[float]                # host time before each event, as recorded (ns)
    stream: list[int]                  # dense stream index, -1 where the event has no stream
    handle: list[int]                  # dense event-handle index for record/wait/sync, -1 elsewhere
    stream_ids: list[Any]              # dense index -> the trace's stream id
    recorded_us: np.ndarray            # each event's duration_us, NaN where absent
    stall_ns: list[float]              # each device event's stall_us (importer-measured unexplained hold), in ns
    device_index: np.ndarray           # positions of device events (kernel, memcpy, memset, collective)
    iteration_index: np.ndarray        # positions of iteration markers that open an iteration
    end_marker: int | None             # position of an iteration marker with ``end: true`` (closes the last one)
    peak_memory_bytes: int | None     # None when the trace records no allocations (e.g. profiler traces)
    memory_curve: tuple[np.ndarray, np.ndarray] = field(repr=False)  # (event positions, bytes in use after them)

    @property
    def n_events(self) -> int:
        return len(self.kind)

    @functools.cached_property
    def op_codes(self) -> np.ndarray:
        """A small int per event naming its op (kernels: the aten op, else the kernel name; other kinds: their
        op or -1), so that iterations can be compared event for event at numpy speed."""
        ops, _ = pd.factorize(pd.Series(self.events.field("op"), dtype=object))
        names, _ = pd.factorize(pd.Series(self.events.field("name"), dtype=object))
        return np.where(ops >= 0, ops, np.where(names >= 0, names + ops.max() + 1, -1)).astype(np.int32)

    @functools.cached_property
    def steady(self) -> np.ndarray:
        return _steady_iterations(self)


def build_program(doc: dict[str, Any], source: str = "<trace>") -> RankProgram:
    """Columns of one rank's trace (the dict :func:`emulate.trace.read_trace` returns; ``events`` may also be a
    list of event dicts, which become a table here).

    The table gives each field of every event at numpy speed (per distinct shape, then indexed), so the per-event
    work is whole-column passes; kinds that need more than their stream are then visited through numpy-selected
    positions."""
    try:
        events = as_table(doc["events"])
    except TypeError:
        raise TraceFormatError(_first_bad_event(doc["events"], source)) from None
    n = len(events)
    shapes, at = events.shapes, events.shape_index
    try:
        kind_of_shape = np.asarray([KIND_CODES[s["kind"]] for s in shapes], dtype=np.int8)
        kinds = kind_of_shape[at] if n else np.zeros(0, dtype=np.int8)
        gap_column = events.columns.get("gap_ns")
        if n and (gap_column is None or gap_column[1] is not None):
            raise ValueError("gap_ns missing or not a number")
        gap = gap_column[0].tolist() if n else []
        recorded = events.number("duration_us", np.nan)
        stall_us = events.number("stall_us", 0.0)
        stall = (np.nan_to_num(stall_us) * 1e3).tolist() if stall_us.any() else [0.0] * n
        stream_of_shape = [s.get("stream") for s in shapes]
        hash(tuple(stream_of_shape))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise TraceFormatError(_first_bad_event(events, source)) from None
    if n and gap_column[0].min() < 0:
        raise TraceFormatError(_first_bad_event(events, source))
    if (recorded < 0).any() or (stall_us < 0).any():
        raise TraceFormatError(_first_bad_event(events, source))
    # streams numbered densely in order of first use
    stream_ids: list[Any] = []
    dense: dict[Any, int] = {}
    stream_of_code = np.full(len(shapes), -1, dtype=np.int64)
    if n:
        shape_order = np.unique(at, return_index=True)  # each shape's first event
        for s, _ in sorted(zip(shape_order[0].tolist(), shape_order[1].tolist()), key=lambda p: p[1]):
            sid = stream_of_shape[s]
            if sid is not None:
                if sid not in dense:
                    dense[sid] = len(stream_ids)
                    stream_ids.append(sid)
                stream_of_code[s] = dense[sid]
    codes_of_stream = stream_of_code[at] if n else np.zeros(0, dtype=np.int64)
    stream = codes_of_stream.tolist()
    needs_stream = (kinds <= COLLECTIVE) | (kinds == EVENT_RECORD) | (kinds == STREAM_WAIT_EVENT) | \
        (kinds == STREAM_SYNC)
    if (codes_of_stream[needs_stream] < 0).any():
        raise TraceFormatError(_first_bad_event(events, source))

    blocking_shape = np.asarray([bool(s.get("blocking")) for s in shapes], dtype=bool)
    if n and blocking_shape.any():
        kinds[(kinds == MEMCPY) & blocking_shape[at]] = MEMCPY_BLOCKING
    kind = kinds.tolist()

    handle = [-1] * n
    handle_of: dict[Any, int] = {}
    with_handle = np.flatnonzero((kinds == EVENT_RECORD) | (kinds == STREAM_WAIT_EVENT) | (kinds == EVENT_SYNC))
    try:
        for i in with_handle.tolist():
            handle[i] = handle_of.setdefault(shapes[at[i]]["event"], len(handle_of))
    except (KeyError, TypeError):
        raise TraceFormatError(_describe_bad_event(events[i], i, source)) from None

    mem_pos = np.flatnonzero((kinds == MALLOC) | (kinds == FREE))
    mem_delta = np.zeros(len(mem_pos), dtype=np.int64)
    live: dict[Any, int] = {}
    try:
        for j, i in enumerate(mem_pos.tolist()):
            ev = shapes[at[i]]
            if kind[i] == MALLOC:
                if ev.get("failed"):   # the device refused it (out of memory): nothing was allocated
                    continue
                nbytes = int(ev["bytes"])
                live[ev.get("ptr", ("anon", i))] = nbytes
                mem_delta[j] = nbytes
            else:
                nbytes = live.pop(ev.get("ptr"), None)
                mem_delta[j] = -(nbytes if nbytes is not None else int(ev.get("bytes") or 0))
    except (KeyError, TypeError, ValueError):
        raise TraceFormatError(_describe_bad_event(events[i], i, source)) from None

    iteration_index = np.flatnonzero(kinds == ITERATION)
    ends = [i for i in iteration_index.tolist() if shapes[at[i]].get("end")]
    end_marker = ends[-1] if ends else None
    if end_marker is not None:
        if len(ends) > 1 or end_marker != iteration_index[-1]:
            raise TraceFormatError(f"{source}: events[{ends[0]}].end: only the last iteration marker may close "
                                   f"the last iteration")
        iteration_index = iteration_index[:-1]
    in_use = np.cumsum(mem_delta)
    peak = int(max(0, in_use.max())) if len(in_use) else None
    try:
        rank, world_size, hardware = int(doc["rank"]), int(doc["world_size"]), str(doc["hardware"])
    except (KeyError, TypeError, ValueError):
        raise TraceFormatError(f"{source}: fields 'rank' and 'world_size': expected integers") from None
    return RankProgram(
        source=source, rank=rank, world_size=world_size, hardware=hardware,
        meta=dict(doc.get("meta") or {}), events=events, kind=kind, kind_array=kinds, gap_ns=gap, stream=stream,
        handle=handle, stream_ids=stream_ids, recorded_us=recorded, stall_ns=stall,
        device_index=np.flatnonzero(kinds <= COLLECTIVE), iteration_index=iteration_index, end_marker=end_marker,
        peak_memory_bytes=peak, memory_curve=(mem_pos, in_use),
    )


def _first_bad_event(events: list[Any], source: str) -> str:
    for i, ev in enumerate(events):
        message = _check_event(ev, i, source)
        if message:
            return message
    return f"{source}: malformed events"


def _describe_bad_event(ev: Any, i: int, source: str) -> str:
    """The one-line message for what is wrong with event ``i`` (slow path: only runs on bad input)."""
    return _check_event(ev, i, source) or f"{source}: events[{i}]: malformed event {str(ev)[:120]}"


def _check_event(ev: Any, i: int, source: str) -> str | None:
    where = f"{source}: events[{i}]"
    if not isinstance(ev, dict):
        return f"{where}: expected an object, found {type(ev).__name__}"
    if ev.get("kind") not in KIND_CODES:
        return f"{where}.kind: expected one of {sorted(KIND_CODES)}, found {ev.get('kind')!r}"
    gap = ev.get("gap_ns")
    if not isinstance(gap, (int, float)) or isinstance(gap, bool) or gap < 0:
        return f"{where}.gap_ns: expected a non-negative number of nanoseconds, found {gap!r}"
    for name in REQUIRED_FIELDS[ev["kind"]]:
        if ev.get(name) is None:
            return f"{where}.{name}: missing (required for kind '{ev['kind']}')"
    if ev["kind"] in ("malloc", "free") and ev.get("bytes") is not None:
        try:
            int(ev["bytes"])
        except (TypeError, ValueError):
            return f"{where}.bytes: expected an integer, found {ev['bytes']!r}"
    for name in ("duration_us", "stall_us"):
        value = ev.get(name)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0):
            return f"{where}.{name}: expected a non-negative number of microseconds, found {value!r}"
    try:
        hash(ev.get("stream")), hash(ev.get("event")), hash(ev.get("ptr"))
    except TypeError:
        return f"{where}: 'stream', 'event' and 'ptr' must be numbers or strings"
    return None


def iteration_bounds(prog: RankProgram) -> list[tuple[int, int]]:
    """Event positions [start, end) of each iteration of a rank: from one ``iteration`` marker to the next; the
    last ends at a closing marker (``end: true``); without one, the stretch after the last marker is not an
    iteration unless it is the only one (:mod:`emulate.report` has the why)."""
    marks = prog.iteration_index.tolist()
    if prog.end_marker is not None:
        marks.append(prog.end_marker)
    elif len(marks) < 2:
        return [(marks[0] if marks else 0, prog.n_events)]
    return list(zip(marks[:-1], marks[1:]))


def steady_iterations(prog: RankProgram) -> np.ndarray:
    """Indices of a rank's steady-state iterations: among all but the first (warm-up), those that repeat the most
    common event sequence (kinds and ops), so that iterations still growing the allocator, autotuning or
    initialising lazily are left out. When no sequence repeats: all but the first (all, for a single one)."""
    return prog.steady


def _steady_iterations(prog: RankProgram) -> np.ndarray:
    bounds = iteration_bounds(prog)
    n = len(bounds)
    if n < 3:
        return np.arange(1 if n >= 2 else 0, n)
    kinds, ops = prog.kind_array, prog.op_codes
    signatures = [(b - a, kinds[a:b].tobytes(), ops[a:b].tobytes()) for a, b in bounds[1:]]
    counts: dict[tuple, int] = {}
    for sig in signatures:
        counts[sig] = counts.get(sig, 0) + 1
    common = max(counts, key=counts.__getitem__)
    if counts[common] < 2:
        return np.arange(1, n)
    return np.array([k + 1 for k, sig in enumerate(signatures) if sig == common])
