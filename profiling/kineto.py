"""Read PyTorch profiler (Kineto) Chrome traces into pandas frames, the way HolisticTraceAnalysis does.

Two schemas exist in the wild and both are read:

- new (PyTorch >= 1.10): categories ``cpu_op``, ``user_annotation``, ``cuda_runtime`` (and ``cuda_driver``),
  ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``gpu_user_annotation``; ``args["External id"]``; NCCL kernels and
  ``record_param_comms`` ops carry ``Collective name``, ``In/Out msg nelems``, ``Group size``, ``dtype`` and the
  process group; top-level ``deviceProperties`` and ``distributedInfo``.
- old (the kineto ``tb_plugin`` samples, PyTorch 1.9): categories ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``,
  ``Memset``; ``args["external id"]`` (lower case) on runtime calls and kernels; GPU ``tid`` is ``"stream 7"``.

Categories are normalised to the new names (``Operator`` becomes ``cpu_op`` and so on), so the rest of the project
sees one schema. Only complete events (``ph == "X"``) become rows: the flow events (``ac2g``, ``async``) carry the
same link as the ``correlation`` argument, which is what the joins use.

Times are float microseconds (the Chrome trace unit, whatever ``displayTimeUnit`` says).

Usage::

    trace = read_trace("rank0.json.gz")
    trace.events            # every complete event, normalised columns (EVENT_COLUMNS)
    trace.kernels()         # GPU kernels/memcpy/memset + launching runtime call + innermost enclosing cpu_op
    trace.profiler_steps()  # ProfilerStep#N spans on the host
    trace.rank, trace.world_size, trace.device_name, trace.hardware_id
"""
from __future__ import annotations

import codecs
import ctypes
import functools
import gc
import gzip
import json
import re
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

import numpy as np
import pandas as pd

from stepcast.profiling.hardware import HardwareSpec, UnknownHardwareError, load_catalog, lookup, normalise_name
from stepcast.errors import InputError


class TraceFormatError(InputError):
    """A file that is not a readable Kineto/Chrome trace. The message is one line and names the file."""


# Old-schema category -> new-schema category.
CATEGORY_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "cuda_driver": "cuda_driver",
}

GPU_CATEGORIES: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES: tuple[str, ...] = ("cuda_runtime", "cuda_driver")
HOST_OP_CATEGORIES: tuple[str, ...] = ("cpu_op",)

# args key (any schema) -> normalised column. Later keys win when both appear in one event.
ARG_COLUMNS: dict[str, str] = {
    "external id": "external_id",
    "External id": "external_id",
    "correlation": "correlation",
    "stream": "stream",
    "device": "device",
    "Input Dims": "input_dims",
    "Input type": "input_types",
    "Input Strides": "input_strides",
    "Concrete Inputs": "concrete_inputs",
    "grid": "grid",
    "block": "block",
    "bytes": "bytes",
    "Sequence number": "sequence_number",
    "Fwd thread id": "fwd_thread_id",
    "Collective name": "collective_name",
    "In msg nelems": "in_msg_nelems",
    "Out msg nelems": "out_msg_nelems",
    "In split size": "in_split_size",
    "Out split size": "out_split_size",
    "Group size": "group_size",
    "dtype": "collective_dtype",
    "Process Group Name": "process_group_name",
    "Process Group Description": "process_group_desc",
    "Process Group Ranks": "process_group_ranks",
}

INT_COLUMNS: tuple[str, ...] = (
    "pid", "tid", "stream", "correlation", "external_id", "device", "bytes", "sequence_number", "fwd_thread_id",
    "in_msg_nelems", "out_msg_nelems", "group_size",
)

EVENT_COLUMNS: tuple[str, ...] = ("name", "cat", "ts", "dur", "pid", "tid") + tuple(dict.fromkeys(ARG_COLUMNS.values()))

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class KinetoTrace:
    """One rank's trace: the normalised events frame plus the trace-level metadata."""

    path: Path
    events: pd.DataFrame
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    schema: str = "new"  # "new" | "old"

    # ---- metadata -------------------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return int(self.distributed_info.get("rank", 0))

    @property
    def world_size(self) -> int:
        return int(self.distributed_info.get("world_size", 1))

    @property
    def device_name(self) -> str | None:
        """Vendor name of the GPU the kernels ran on (the first listed device), None when not recorded."""
        if not self.device_properties:
            return None
        used = set(self.events.loc[self.events["cat"].isin(GPU_CATEGORIES), "device"].dropna().astype(int))
        for props in self.device_properties:
            if props.get("id") in used:
                return props.get("name")
        return self.device_properties[0].get("name")

    @property
    def hardware_id(self) -> str | None:
        """Catalog id of the GPU, None when the trace does not name it or the catalog lacks it."""
        name = self.device_name
        spec = hardware_from_device_name(name) if name else None
        return spec.id if spec else None

    # ---- derived frames -------------------------------------------------------------------------------------------
    def profiler_steps(self) -> pd.DataFrame:
        """ProfilerStep#N spans on the host: columns step (int), ts, dur, end, pid, tid; sorted by ts."""
        return profiler_steps(self.events)

    def kernels(self, categories: tuple[str, ...] = GPU_CATEGORIES) -> pd.DataFrame:
        """GPU activities joined to their launch and their op (see :func:`join_kernels`)."""
        return join_kernels(self.events, categories)


# ---- reading ------------------------------------------------------------------------------------------------------

READ_CHUNK_BYTES = 1 << 22       # compressed bytes read per refill of the streaming parser
MAX_VALUE_CHARS = 1 << 28        # one JSON value (an event, deviceProperties) larger than this is malformed
Progress = Callable[[int, int], None]  # (bytes of the file read so far, file size)


def read_trace(path: str | Path, progress: Progress | None = None,
               arguments: Collection[str] | None = None) -> KinetoTrace:
    """Read one Kineto trace (``.json`` or ``.json.gz``). A malformed file raises TraceFormatError naming it.

    The file is parsed as a stream (:class:`_JsonStream`): each event is decoded, its columns kept, and the event
    dropped, so neither the text nor a list of event dicts is ever held whole (a 2M-kernel trace is ~8M events).
    ``progress`` is called with the bytes of the file read so far and its size. ``arguments``: the argument
    columns to keep (default: all of ARG_COLUMNS' columns); a reader of millions of events that needs few of them
    saves a column of every row for each one left out."""
    path = Path(path)
    columns = _EventColumns(arguments)
    try:
        meta, schema = _scan(path, columns, progress)
        events = columns.frame()
    except (TypeError, AttributeError, ValueError) as exc:
        if isinstance(exc, TraceFormatError):
            raise
        raise TraceFormatError(f"{path}: malformed trace events ({exc.__class__.__name__}: {exc})") from None
    del columns
    release_freed_memory()  # the columns the frame was built from
    if events.empty:
        raise TraceFormatError(f"{path}: 'traceEvents' holds no complete events (ph 'X'): an empty trace")
    device_properties = meta.get("deviceProperties") or []
    distributed_info = meta.get("distributedInfo") or {}
    if not isinstance(device_properties, list) or not isinstance(distributed_info, dict):
        raise TraceFormatError(f"{path}: 'deviceProperties' must be a list and 'distributedInfo' an object")
    return KinetoTrace(path, events, device_properties, distributed_info, schema)


def release_freed_memory() -> None:
    """Free what is unreachable now (pandas' caches hold frames in reference cycles) and hand the freed heap back
    to the system: glibc keeps freed blocks below its (self-raising) mmap threshold in the heap, where the
    millions of small objects allocated next cannot use them, so the process would grow by a frame's size."""
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): nothing to trim
            pass


def _scan(path: Path, columns: "_EventColumns", progress: Progress | None) -> tuple[dict[str, Any], str]:
    """Stream the document into ``columns``; return its other top-level fields and the schema ("old" when one
    of the first 5000 events has an old-schema category)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            body = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            stream = _JsonStream(body, lambda: progress(raw.tell(), size) if progress else None)
            meta: dict[str, Any] = {}
            first = stream.peek()
            if first == "[":  # a bare Chrome trace: the event list alone
                stream.each_item(columns.add)
            elif first == "{":
                found = False
                for key in stream.keys():
                    if key == "traceEvents" and stream.peek() == "[":
                        stream.each_item(columns.add)
                        found = True
                    else:
                        meta[key] = stream.value()
                if not found:
                    raise TraceFormatError(f"{path}: not a Chrome trace (expected an object with a 'traceEvents' "
                                           f"list)")
            else:
                stream.value()  # valid JSON of another kind, or the decoder's own error
                raise TraceFormatError(f"{path}: not a Chrome trace (expected an object with a 'traceEvents' list)")
            stream.end()
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: unreadable ({exc.__class__.__name__}: {exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    return meta, "old" if columns.old_schema else "new"


class _JsonStream:
    """One JSON document read incrementally: the top-level object's keys and the event array's items are walked
    here, every value is decoded by the standard library's C decoder (``raw_decode``) from a text window refilled
    chunk by chunk. No maintained streaming parser ships with the project's dependencies, and this keeps the
    stdlib decoder's speed (the events are most of the time spent reading)."""

    def __init__(self, fh: Any, on_read: Callable[[], None]) -> None:
        self.fh, self.on_read = fh, on_read
        self.decoder = json.JSONDecoder()
        self.text = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False

    def _fill(self) -> bool:
        """Append the next chunk to the window (dropping what was consumed); False at the end of the file."""
        if self.eof:
            return False
        data = self.fh.read(READ_CHUNK_BYTES)
        self.eof = not data
        self.buf = self.buf[self.pos:] + self.text.decode(data, final=self.eof)
        self.pos = 0
        self.on_read()
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the document), not consumed."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < n or not self._fill():
                return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def _take(self, char: str) -> None:
        if self.peek() != char:
            raise json.JSONDecodeError(f"Expecting '{char}'", self.buf, self.pos)
        self.pos += 1

    def value(self) -> Any:
        """Decode the next value; a value cut by the window's end is retried with more text."""
        self.peek()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if len(self.buf) - self.pos > MAX_VALUE_CHARS or not self._fill():
                    raise
                continue
            if end == len(self.buf) and self._fill():  # a number may go on in the next chunk
                continue
            self.pos = end
            return obj

    def each_item(self, visit: Callable[[Any], None]) -> None:
        """Walk an array, calling ``visit`` on each item as it is decoded."""
        self._take("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            visit(self.value())
            if self.peek() == ",":
                self.pos += 1
                continue
            self._take("]")
            return

    def keys(self) -> Iterator[str]:
        """Walk an object: yields each key with the stream at its value, which the caller must consume."""
        self._take("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise json.JSONDecodeError("Expecting property name", self.buf, self.pos)
            self._take(":")
            yield key
            if self.peek() == ",":
                self.pos += 1
                continue
            self._take("}")
            return

    def end(self) -> None:
        if self.peek() != "":
            raise json.JSONDecodeError("Extra data", self.buf, self.pos)


JsonStream = _JsonStream  # public name: emulate.trace streams its own format's event list with it


class _EventColumns:
    """The columns of the complete events, filled one event at a time. Arguments are stored sparsely (row, value)
    per column, since most events carry few of them; repeated values (names, ids of threads, shape lists) are
    stored once and shared, which keeps millions of rows in little memory."""

    def __init__(self, arguments: Collection[str] | None = None) -> None:
        known = dict.fromkeys(ARG_COLUMNS.values())
        unknown = set(arguments or ()) - set(known)
        if unknown:
            raise ValueError(f"arguments: unknown columns {sorted(unknown)}; expected some of {list(known)}")
        self.kept = [c for c in known if arguments is None or c in arguments]
        self.n = 0
        self.name: list[Any] = []
        self.cat: list[Any] = []
        self.ts = array("d")
        self.dur = array("d")
        self.pid: list[Any] = []
        self.tid: list[Any] = []
        self.args: dict[str, tuple[array, list[Any]]] = {c: (array("q"), []) for c in self.kept
                                                         if c not in INT_COLUMNS}
        # integer columns: plain ints go to typed arrays (8 bytes a value); anything else is kept aside
        self.ints: dict[str, tuple[array, array, array, list[Any]]] = {
            c: (array("q"), array("q"), array("q"), []) for c in INT_COLUMNS if c in self.kept}
        self.shared: dict[Any, Any] = {}
        self.shared_lists: dict[str, Any] = {}
        self.seen = 0
        self.old_schema = False

    def _one(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.shared.setdefault(value, value)
        if isinstance(value, (list, dict)):
            return self.shared_lists.setdefault(repr(value), value)
        return value

    def add(self, e: dict[str, Any]) -> None:
        cat = e.get("cat")
        if self.seen < 5000:
            self.seen += 1
            self.old_schema = self.old_schema or cat in ("Operator", "Kernel")
        if e.get("ph") != "X":
            return
        row, one = self.n, self._one
        self.n += 1
        self.name.append(one(e.get("name")))
        self.cat.append(one(CATEGORY_ALIASES.get(cat, cat) if isinstance(cat, str) else cat))
        ts, dur = e.get("ts"), e.get("dur")
        self.ts.append(np.nan if ts is None else float(ts))
        self.dur.append(0.0 if dur is None else float(dur))
        self.pid.append(one(e.get("pid")))
        self.tid.append(one(e.get("tid")))
        a = e.get("args") or {}
        for key, value in a.items():
            column = ARG_COLUMNS.get(key)
            if column is None or value is None or (key == "external id" and a.get("External id") is not None):
                continue
            if column in self.ints:
                rows, numbers, other_rows, others = self.ints[column]
                if type(value) is int and -(1 << 63) <= value < (1 << 63):
                    rows.append(row)
                    numbers.append(value)
                else:
                    other_rows.append(row)
                    others.append(value)
                continue
            if column not in self.args:
                continue  # a column the caller left out
            rows, values = self.args[column]
            rows.append(row)
            values.append(one(value))

    def frame(self) -> pd.DataFrame:
        """The events frame (EVENT_COLUMNS, sorted by ts, fresh RangeIndex). Each column is put in time order and
        its source released before the next is built, and the frame adopts the arrays without copying them: the
        peak stays near one frame's size."""
        n = self.n
        ts = np.frombuffer(self.ts, dtype="float64")
        order = np.flatnonzero(~np.isnan(ts))
        order = order[np.argsort(ts[order], kind="stable")]
        in_order = len(order) == n and bool((order == np.arange(n)).all())

        def ordered(values: Any) -> Any:
            return values if in_order else values[order]

        data: dict[str, Any] = {}
        for column in ("name", "cat"):
            # object dtype: each row points at its one shared string. pandas' string dtype would copy every
            # string into every row (kernel names are ~250 characters: gigabytes for millions of events)
            data[column] = pd.Series(ordered(_objects(getattr(self, column))), dtype=object, copy=False)
            setattr(self, column, [])
        data["ts"], data["dur"] = ordered(ts.copy()), ordered(np.frombuffer(self.dur, dtype="float64").copy())
        self.ts = self.dur = array("d")
        for column in ("pid", "tid"):
            data[column] = ordered(_to_int(pd.Series(_objects(getattr(self, column)))).array)
            setattr(self, column, [])
        for column in self.kept:
            if column in self.ints:
                rows, given, other_rows, others = self.ints.pop(column)
                numbers, missing = np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
                index = np.frombuffer(rows, dtype=np.int64)
                numbers[index], missing[index] = np.frombuffer(given, dtype=np.int64), False
                if others:  # strings, floats: as pandas converts them (unreadable -> NA)
                    index = np.frombuffer(other_rows, dtype=np.int64)
                    parsed = pd.to_numeric(pd.Series(_objects(others)), errors="coerce").astype("Int64").array
                    numbers[index] = parsed.to_numpy(dtype=np.int64, na_value=0)
                    missing[index] = parsed.isna()
                data[column] = pd.arrays.IntegerArray(ordered(numbers), ordered(missing))
            else:
                rows, values = self.args.pop(column)
                full = np.full(n, None, dtype=object)
                full[np.frombuffer(rows, dtype=np.int64)] = _objects(values)
                data[column] = ordered(full)
        # GPU activities without a stream argument (old schema) run on the stream their tid names
        stream, tid = data.get("stream"), data["tid"]
        fill = np.isin(data["cat"], GPU_CATEGORIES) & stream.isna() & ~tid.isna() if stream is not None else None
        if fill is not None and fill.any():
            numbers, missing = stream.to_numpy(dtype=np.int64, na_value=0), stream.isna()
            numbers[fill], missing[fill] = tid.to_numpy(dtype=np.int64, na_value=0)[fill], False
            data["stream"] = pd.arrays.IntegerArray(numbers, missing)
        return pd.DataFrame(data, copy=False)


def _objects(values: list[Any]) -> np.ndarray:
    """A list as a 1-d object array (lists stay elements: numpy would otherwise make them a dimension)."""
    return np.fromiter(values, dtype=object, count=len(values))


def events_frame(raw_events: list[dict[str, Any]]) -> pd.DataFrame:
    """Complete events (``ph == "X"``) as a frame with EVENT_COLUMNS, sorted by ts, with a fresh RangeIndex."""
    columns = _EventColumns()
    for e in raw_events:
        columns.add(e)
    return columns.frame()


def _to_int(column: pd.Series) -> pd.Series:
    """pid/tid as Int64: numbers pass, strings like "stream 7" or "25738" keep their trailing integer."""
    numeric = pd.to_numeric(column, errors="coerce")
    text = column[numeric.isna() & column.notna()].astype(str)
    if len(text):
        numeric.loc[text.index] = pd.to_numeric(text.str.extract(r"(-?\d+)\s*$")[0], errors="coerce")
    return numeric.astype("Int64")


# ---- derived frames -----------------------------------------------------------------------------------------------

def profiler_steps(events: pd.DataFrame) -> pd.DataFrame:
    """ProfilerStep#N spans: step, ts, dur, end, pid, tid (host side; both schemas).

    The names are matched once per distinct name and only the spans' rows are taken: a host of millions of events
    is never copied whole."""
    host = np.flatnonzero(events["cat"].isin(("user_annotation", "cpu_op")).to_numpy())
    codes, names = pd.factorize(events["name"].to_numpy()[host], use_na_sentinel=False)
    numbers = pd.Series(names, dtype=object).str.extract(_PROFILER_STEP, expand=False)
    is_step = numbers.notna().to_numpy(dtype=bool)[codes]
    rows = host[is_step]
    spans = pd.DataFrame({column: _take(_column(events, column), rows) for column in ("ts", "dur", "pid", "tid")},
                         index=events.index[rows], copy=False)
    spans.insert(0, "step", pd.Series(numbers.to_numpy(dtype=object)[codes[is_step]], dtype=object,
                                      index=spans.index).astype(int))
    spans["end"] = spans["ts"] + spans["dur"]
    return spans.sort_values("ts").reset_index(drop=True)


def op_parents(ops: pd.DataFrame) -> np.ndarray:
    """For host ops (one frame, any threads), the positional index of each op's innermost enclosing op (-1: none).

    Ops nest properly on one thread, so one pass with a stack per thread over ops sorted by (start, -duration)
    finds every parent. The pass is linear in the number of ops.
    """
    order = np.lexsort((-ops["dur"].to_numpy(), ops["ts"].to_numpy(), ops["tid"].fillna(-1).to_numpy(),
                        ops["pid"].fillna(-1).to_numpy()))
    ts = ops["ts"].to_numpy()[order]
    end = ts + ops["dur"].to_numpy()[order]
    pid = ops["pid"].fillna(-1).to_numpy(dtype=np.int64)[order]
    tid = ops["tid"].fillna(-1).to_numpy(dtype=np.int64)[order]
    new_thread = np.ones(len(order), dtype=bool)
    new_thread[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
    parents_sorted = np.full(len(order), -1, dtype=np.int64)
    stack: list[int] = []
    for i in range(len(order)):
        if new_thread[i]:
            stack.clear()
        while stack and end[stack[-1]] < ts[i]:
            stack.pop()
        if stack:
            parents_sorted[i] = stack[-1]
        stack.append(i)
    parents = np.full(len(order), -1, dtype=np.int64)
    parents[order] = np.where(parents_sorted >= 0, order[np.maximum(parents_sorted, 0)], -1)
    return parents


def join_kernels(events: pd.DataFrame, categories: tuple[str, ...] = GPU_CATEGORIES) -> pd.DataFrame:
    """GPU activities with their launching runtime call and the innermost host op that launched them.

    Columns: the activity's event columns, plus ``runtime_name, runtime_ts, runtime_dur, launch_pid, launch_tid``
    (joined on ``correlation``), ``op_index`` (row of ``events``; -1 when none), ``op_name, op_ts, op_dur,
    op_external_id, op_input_dims, op_input_types, op_input_strides, op_concrete_inputs`` (the last two in traces of
    PyTorch >= 2.1 with record_shapes) and ``step`` (the ProfilerStep number the launch falls in;
    NA outside steps).

    The op is found by ``External id`` (the activity's own, else its runtime call's) when an op with that id exists
    and its span contains the launch on the launching thread; otherwise (traces where External id echoes the
    correlation id, launches from threads the id does not match) by time containment: the innermost ``cpu_op`` on
    the launching thread whose span contains the runtime call. ProfilerStep markers never count as the op.

    The joins are lookups of row positions (sorted keys, ``searchsorted``) and each output column is taken once
    from its events column: no intermediate frame of millions of rows is merged or copied (a 2M-kernel trace's
    join would otherwise hold several copies of the kernels' columns at once).
    """
    cat = events["cat"]
    rows = np.flatnonzero(cat.isin(categories).to_numpy())  # positions of the activities
    launch_rows = np.flatnonzero((cat.isin(LAUNCH_CATEGORIES) & events["correlation"].notna()).to_numpy())
    correlation = pd.array(events["correlation"], dtype="Int64")
    launch = _pick(launch_rows, _first_match(correlation[launch_rows].to_numpy(dtype=np.int64), correlation[rows]))
    data: dict[str, Any] = {column: _take(_column(events, column), rows) for column in events.columns}
    for column, source in (("runtime_name", "name"), ("runtime_ts", "ts"), ("runtime_dur", "dur"),
                           ("launch_pid", "pid"), ("launch_tid", "tid"), ("runtime_external_id", "external_id")):
        data[column] = _take(_column(events, source), launch)
    gpu = pd.DataFrame(data, copy=False)
    del data

    host = np.flatnonzero(cat.isin(HOST_OP_CATEGORIES).to_numpy())
    # ProfilerStep markers are never the op
    op_rows = host[~match_names(events["name"].to_numpy()[host], _PROFILER_STEP.pattern)]
    ops = pd.DataFrame({column: _take(_column(events, column), op_rows) for column in ("ts", "dur", "tid",
                                                                                      "external_id")},
                       index=events.index[op_rows], copy=False)
    op_index = _ops_by_external_id(gpu, ops)
    missing = op_index < 0
    if missing.any():
        ops = events[["ts", "dur", "pid", "tid"]].iloc[op_rows]
        op_index[missing] = _ops_by_containment(gpu.loc[missing, ["runtime_ts", "launch_pid", "launch_tid"]], ops)
    del ops
    gpu["op_index"] = op_index
    op_at = events.index.get_indexer(op_index)  # -1 is no label: all NA
    typed = {"op_ts": "float64", "op_dur": "float64", "op_external_id": "Int64"}
    for column in ("name", "ts", "dur", "external_id", "input_dims", "input_types", "input_strides",
                   "concrete_inputs"):
        name = "op_" + column
        values = pd.Series(_take(_column(events, column), op_at) if column in events.columns
                           else np.full(len(op_at), np.nan), copy=False)  # NaN: as reindex gives a missing column
        gpu[name] = values.astype(typed[name]).array if name in typed else values.to_numpy(dtype=object)
    gpu["step"] = _step_of(gpu["runtime_ts"].fillna(gpu["ts"]), profiler_steps(events)).array
    return gpu


def _column(events: pd.DataFrame, column: str) -> Any:
    """A column's values without a copy: the numpy array, or the extension array (Int64) that keeps its NAs."""
    series = events[column]
    return series.array if isinstance(series.dtype, pd.api.extensions.ExtensionDtype) else series.to_numpy()


def _take(values: Any, positions: np.ndarray) -> Any:
    """``values`` at ``positions``; -1 gives the missing value of the dtype (NaN, NA), as a left merge does.
    Object values come as an object Series (a frame would infer a string dtype and copy every string)."""
    taken = pd.api.extensions.take(values, positions, allow_fill=True)
    return pd.Series(taken, dtype=object, copy=False) if taken.dtype == object else taken


def _first_match(have: np.ndarray, want: Any) -> np.ndarray:
    """For each key of ``want`` (an Int64 array), the position in ``have`` (int64 keys) of its first occurrence;
    -1 when ``have`` lacks it or the key is missing."""
    unique, first = np.unique(have, return_index=True)  # the first of equal keys
    if not len(unique):
        return np.full(len(want), -1, dtype=np.int64)
    values = want.to_numpy(dtype=np.int64, na_value=0)
    at = np.minimum(np.searchsorted(unique, values), len(unique) - 1)
    found = ~np.asarray(want.isna(), dtype=bool) & (unique[at] == values)
    return np.where(found, first[at], -1).astype(np.int64)


def _pick(positions: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``positions[at]`` where ``at`` >= 0, else -1."""
    if not len(positions):
        return np.full(len(at), -1, dtype=np.int64)
    return np.where(at >= 0, positions[np.maximum(at, 0)], -1).astype(np.int64)


def match_names(names: Any, pattern: str) -> np.ndarray:
    """Whether each name matches the regular expression ``pattern`` at its start (False for a missing name or a
    value that is not a string), as a numpy bool array. Each distinct name is tested once: millions of events share
    a few thousand names, and a per-row string operation would copy or box every one of them."""
    codes, unique = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    matched = pd.Series(unique, dtype=object).str.match(pattern).fillna(False).to_numpy(dtype=bool)
    return matched[codes]


def _ops_by_external_id(gpu: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Op row per activity through External id, kept only where the op's span contains the launch."""
    result = np.full(len(gpu), -1, dtype=np.int64)
    ids = pd.array(ops["external_id"], dtype="Int64")
    candidates = np.flatnonzero(~np.asarray(ids.isna(), dtype=bool))
    if not len(candidates):
        return result
    wanted = pd.array(gpu["external_id"].fillna(gpu["runtime_external_id"]), dtype="Int64")
    op = _pick(candidates, _first_match(ids[candidates].to_numpy(dtype=np.int64), wanted))  # position in ops
    found = op >= 0
    at = np.maximum(op, 0)
    op_ts = ops["ts"].to_numpy(dtype=np.float64)[at]
    op_end = op_ts + ops["dur"].to_numpy(dtype=np.float64)[at]
    launch_ts = gpu["runtime_ts"].to_numpy(dtype=np.float64)
    same_thread = pd.array(ops["tid"].array[at] == gpu["launch_tid"].array, dtype="boolean")
    with np.errstate(invalid="ignore"):
        contains = (op_ts <= launch_ts) & (launch_ts <= op_end) & same_thread.to_numpy(dtype=bool, na_value=False)
    # No runtime record (launch not captured): trust the id alone.
    keep = found & (contains | np.isnan(launch_ts))
    result[keep] = ops.index.to_numpy()[op[keep]]
    return result


def _ops_by_containment(gpu: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Innermost op on the launching thread whose span contains the launch; -1 when none."""
    result = np.full(len(gpu), -1, dtype=np.int64)
    have = gpu["runtime_ts"].notna().to_numpy() & gpu["launch_tid"].notna().to_numpy()
    if not have.any() or ops.empty:
        return result
    # Enclosing ops before the ops they enclose, also when both start at the same time (longer first).
    ops = ops.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False], kind="stable")
    parents = op_parents(ops)  # positional within ops
    op_ts = ops["ts"].to_numpy()
    op_end = op_ts + ops["dur"].to_numpy()
    query = pd.DataFrame({
        "ts": gpu["runtime_ts"].to_numpy()[have],
        "pid": gpu["launch_pid"].fillna(-1).to_numpy(dtype=np.int64)[have],
        "tid": gpu["launch_tid"].fillna(-1).to_numpy(dtype=np.int64)[have],
        "row": np.flatnonzero(have),
    }).sort_values("ts", kind="stable")
    table = pd.DataFrame({"ts": op_ts, "pid": ops["pid"].fillna(-1).to_numpy(dtype=np.int64),
                          "tid": ops["tid"].fillna(-1).to_numpy(dtype=np.int64), "pos": np.arange(len(ops))})
    # Latest-starting op on the same thread at or before the launch: the innermost candidate.
    matched = pd.merge_asof(query, table.sort_values("ts", kind="stable"), on="ts", by=["pid", "tid"],
                            direction="backward")
    pos = matched["pos"].fillna(-1).to_numpy(dtype=np.int64, copy=True)
    t = matched["ts"].to_numpy()
    # Walk up the nesting until the op contains the launch (depth iterations, vectorised over launches).
    while True:
        live = pos >= 0
        bad = live & ~(op_end[np.maximum(pos, 0)] >= t)
        if not bad.any():
            break
        pos[bad] = parents[pos[bad]]
    positions = ops.index.to_numpy()
    result[matched["row"].to_numpy()] = np.where(pos >= 0, positions[np.maximum(pos, 0)], -1)
    return result


def _step_of(times: pd.Series, steps: pd.DataFrame) -> pd.Series:
    """ProfilerStep number whose span contains each time (NA outside every step)."""
    out = pd.Series(pd.NA, index=times.index, dtype="Int64")
    if steps.empty:
        return out
    starts = steps["ts"].to_numpy()
    i = np.searchsorted(starts, times.to_numpy(dtype="float64"), side="right") - 1
    valid = (i >= 0) & (times.to_numpy(dtype="float64") <= steps["end"].to_numpy()[np.maximum(i, 0)])
    out[valid] = steps["step"].to_numpy()[i[valid]]
    return out


# ---- hardware -----------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def hardware_from_device_name(name: str) -> HardwareSpec | None:
    """Catalog entry for a CUDA device name; also matches names that embed an alias ("NVIDIA A100-PG509-200")."""
    try:
        return lookup(name)
    except UnknownHardwareError:
        pass
    wanted = normalise_name(name)
    best: tuple[int, HardwareSpec] | None = None
    for spec in load_catalog().values():
        for alias in [spec.name, *spec.aliases]:
            key = normalise_name(alias)
            if len(key) >= 4 and key in wanted and (best is None or len(key) > best[0]):
                best = (len(key), spec)
    return best[1] if best else None
