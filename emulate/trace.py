"""The captured-trace format (``stepcast-trace`` version 1): one file per rank, written by capture or by the Kineto
importer, read by the simulator. Every stage reads and writes it through this module.

File: JSON (gzip when the name ends in ``.gz``)::

    {"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 2, "hardware": "h100-sxm",
     "meta": {...free-form: script, torch version, capture host...},
     "events": [ {event}, ... ]}           # in host order

Every event has ``seq`` (0, 1, ...), ``kind``, ``t_ns`` (host time since the trace began, ns) and ``gap_ns`` (host
time spent between the previous intercepted call's return and this call: framework/Python overhead). Optional on
every device event: ``duration_us`` (a measured duration; replay of real traces uses it).

Kinds and their fields:

- ``kernel``: ``stream``, ``name`` (device function name), ``grid`` [x, y, z], ``block`` [x, y, z], ``shmem`` bytes,
  ``lib`` (null for a plain launch; "cublas", "cublasLt", "cudnn" for library calls), ``op`` (enclosing aten op or
  null), ``op_shapes`` (list of input shapes), ``op_dtypes``, ``spec`` (a kernel row for the estimators: ``family``,
  ``dtype`` and the family's key columns of :mod:`profiling.families`, or null when the kernel is not classified).
- ``memcpy``: ``stream``, ``bytes``, ``direction`` ("h2d" | "d2h" | "d2d" | "h2h"), ``blocking`` (bool);
  optional ``peer`` (bool): one end is another GPU's memory (a peer-to-peer copy over NVLink).
- ``memset``: ``stream``, ``bytes``.
- ``malloc`` / ``free``: ``ptr``, ``bytes`` (device memory as the CUDA runtime sees it).
- ``event_record``: ``event`` (handle), ``stream``.   ``stream_wait_event``: ``stream``, ``event``.
- ``event_sync``: ``event``.   ``stream_sync``: ``stream``.   ``device_sync``.
- ``collective``: ``stream``, ``op`` (all_reduce | all_gather | reduce_scatter | all_to_all | broadcast | reduce |
  send | recv), ``comm`` (communicator id, same string on every member), ``comm_seq`` (n-th collective on that
  communicator; sends and receives, which involve two members only, are numbered apart), ``ranks`` (communicator size),
  ``peer`` (send/recv: the other rank, numbered within the communicator as NCCL takes it; a global rank when the trace
  has no ``comm_rank``), ``comm_rank`` (optional: this rank's number within the communicator), ``count``, ``dtype``,
  ``bytes`` (per rank, the larger of send and receive buffer), ``spec`` (family ``collective`` row).
- ``iteration``: ``step`` (marks the start of a training iteration: profiler step, optimizer step or backward).

Streams are integers: 0 is the legacy default stream; others are the handles the runtime gave out, renumbered 1, 2...

Optional fields written by ``stepcast run`` (compatible extensions of version 1; readers may ignore them):

- every event: ``thread`` (host thread, 0 = the first thread that called the runtime; autograd's backward runs on
  another). The trace starts at the first intercepted call (its ``t_ns`` and ``gap_ns`` are 0). ``host_ops``,
  ``host_nodes`` and ``host_py`` (absent: 0): the host work the capture counted on the event's thread between the
  previous call and this one, as aten op entries, autograd node evaluations and Python function calls (what the
  counted host model times; present when ``meta.host_work`` is set).
- ``kernel``: ``op`` is the innermost aten op (``aten.mm.default``); ``op_shapes``/``op_dtypes`` hold one entry per
  positional argument of its schema (``[]``/``""`` for non-tensors, a list for tensor lists), the form
  :func:`profiling.classify.classify_op` reads. Library calls (``lib`` set) have ``grid``/``block`` null and
  ``gemm``: ``m``, ``n``, ``k``, ``batch``, ``transa``, ``transb`` (cuBLAS column-major, as passed), ``dtype_a``,
  ``dtype_b``, ``dtype_c``, ``compute`` (cublasComputeType, e.g. ``32f``, ``32f_fast_tf32``), ``tf32`` (bool),
  ``epilogue`` (cublasLt epilogue enum); their ``spec`` is the row-major GEMM (m = rows of torch's output).
- ``kernel``: ``op_part: true`` on a further kernel of an op call whose first kernel of the same family carries
  the op's ``spec`` (its ``spec`` is then null): the estimators time ops as a whole (every source times the op's
  kernels together), so the op's time goes to its first kernel and this one adds none when durations are predicted
  (a FlashAttention backward launches three kernels, a layer-norm backward two, a split-K GEMM a reduction).
- ``kernel``: ``bytes_read`` and ``bytes_written``, what the kernel's launcher said it reads and writes in device
  memory (Inductor's Triton kernels: their tensor arguments by role, emulate/triton_bytes.py); absent when unknown.
  The simulator times such a kernel as a memory-bound op of that many bytes (``classify_triton_kernel``).
- device events, event records and waits replayed by a CUDA graph launch (captured work, logged again at each
  launch): ``graph_launch`` (the n-th graph launch of the rank, from 1) and ``graph_node`` (the event's position in
  that launch, from 0); the launch call's host gap and cost go to node 0, the others have none of their own.
- ``memcpy``/``memset``: ``op``.  ``malloc``: ``failed: true`` (and ``ptr`` null) for an allocation the device
  refused (out of memory).
- ``collective``: ``count`` and ``dtype`` as passed to NCCL (all_gather: per-rank send count; reduce_scatter:
  per-rank receive count), ``group`` (id of the ncclGroupStart/End batch it was issued in, or null), ``torch_op``
  (the c10d op, e.g. ``c10d.allreduce_.default``). ``ranks`` of a split communicator is the number of rank traces
  that hold it.
- ``iteration``: ``source`` ("profiler" | "optimizer" | "backward": which marks cut the trace; null when the
  script had none and the whole run is one iteration). Step 0 starts the trace; step k starts after the k-th mark.

Optional fields written by the Kineto importer (:mod:`emulate.kineto_to_trace`, for ``stepcast replay``):

- ``kernel``: ``op_part`` as above (an op call is the Kineto ``cpu_op`` that launched the kernel); the op call's
  first kernel carries ``op_duration_us``, the measured time of all its kernels of that family (what the
  estimators predict for the op).
- device events: ``stall_us``, device time the recorded timeline shows before the op that nothing in the trace
  explains (launch, stream order and the dependencies found all allow an earlier start: e.g. work of a CUDA graph
  or of another process); the simulator holds the op that long before it starts.
- ``iteration``: ``end: true`` closes the last iteration without opening a new one.
- ``collective``: ``op`` may be ``send_recv`` (a grouped send/recv kernel) and carries the kernel's ``name``.
- ``meta``: ``launch_latency_us``, ``measured_iterations_us`` (the ProfilerStep durations), ``profiler_steps``,
  ``source``, ``importer``, ``schema``, ``device_name``; ``clock_origin_us`` (the profiler-clock time of the first
  event: ranks of one node share that clock, so replay keeps their start offsets) and ``call_costs_in_gaps: true``
  (the gaps already hold the real runtime calls' host cost, which the simulator adds to captured gaps otherwise).

In memory, a trace's events are an :class:`EventTable` (what :func:`read_trace` and the Kineto importer return, and
what the simulator reads): the fields that differ from event to event (``seq``, ``t_ns``, ``gap_ns``,
``duration_us``, ``stall_us``, ``op_duration_us``, ``comm_seq``) as numpy columns, everything else (kind, stream,
kernel name, shapes, spec...) as one dict shared by every event that has the same values: a training trace repeats
a few thousand distinct launches millions of times, so a 2M-event trace holds a few thousand such dicts and about
60 bytes per event, where a dict per event took about 700. ``table[i]`` is the event as a plain dict (built on
access; changing it does not change the table). The table holds no rank: ranks that run the same work can share
one table (and its slices, which are views).

Host-model fields any producer may set (read by :mod:`emulate.sim.host`): ``meta.call_costs_in_gaps`` (default
false: a captured trace's gaps lack the cost of the intercepted calls), ``meta.clock_origin_us``,
``meta.host_clock`` ("cpu" | "wall": how the capture measured gaps), ``meta.host_work`` ("record_function" |
"dispatch_mode": how the capture counted ``host_ops``/``host_nodes``; absent when it did not).
"""
from __future__ import annotations

import bisect
import gzip
import json
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stepcast.profiling.atomic import atomic_path
from stepcast.errors import InputError

FORMAT = "stepcast-trace"
VERSION = 1

EVENT_KINDS = frozenset({
    "kernel", "memcpy", "memset", "malloc", "free", "event_record", "stream_wait_event", "event_sync",
    "stream_sync", "device_sync", "collective", "iteration",
})
DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset", "collective"})


class TraceFormatError(InputError):
    """A trace file that does not follow the format; the message names the file and the field."""


#: fields kept as numeric columns, since they differ from event to event; every other field goes to the dict that
#: the events with the same values share (:class:`EventTable`)
COLUMN_FIELDS = ("seq", "t_ns", "gap_ns", "duration_us", "stall_us", "op_duration_us", "comm_seq", "host_ops",
                 "host_nodes", "host_py")
_LEADING = ("seq", "kind", "t_ns", "gap_ns")  # the order a dict view starts with (the format's)
_EXACT = 2 ** 53  # integers up to this survive a float64 column; larger ones stay in the shared dict
_ITER_CHUNK = 1 << 15


class EventTable(Sequence):
    """A trace's events, compactly (module docstring): ``shapes`` (the distinct dicts of every field but the
    columns), ``shape_index`` (each event's shape, int32) and ``columns`` (field -> (values,
    present, floats): int64 or float64 values; a bool mask of the events that have the field, None when all have
    it; in a float64 column that also holds integers, a bool mask of the float ones, else None).

    Read-only: ``table[i]`` and iteration give each event as a new plain dict, ``table[a:b]`` a table of views
    on the same arrays. :meth:`field` and :meth:`number` give one field of every event at numpy speed (the
    simulator's way in)."""

    __slots__ = ("shapes", "shape_index", "columns")

    def __init__(self, shapes: list[dict[str, Any]], shape_index: np.ndarray,
                 columns: dict[str, tuple[np.ndarray, np.ndarray | None, np.ndarray | None]]) -> None:
        self.shapes, self.shape_index, self.columns = shapes, shape_index, columns

    @classmethod
    def from_dicts(cls, events: Iterable[dict[str, Any]]) -> "EventTable":
        """The table of trace-v1 event dicts (a list, or any iterable: nothing is kept of them but their values).
        Raises TypeError for an event that is not a dict."""
        builder = EventTableBuilder()
        for ev in events:
            builder.append(ev)
        return builder.finish()

    def __len__(self) -> int:
        return len(self.shape_index)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return EventTable(self.shapes, self.shape_index[i],
                              {k: tuple(None if c is None else c[i] for c in col) for k, col in self.columns.items()})
        n = len(self.shape_index)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"event {i} of {n}")
        values = {k: v[i].item() if f is None or f[i] else int(v[i])
                  for k, (v, p, f) in self.columns.items() if p is None or p[i]}
        return _assemble(self.shapes[self.shape_index[i]], values)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        shapes = self.shapes
        for a in range(0, len(self.shape_index), _ITER_CHUNK):
            b = a + _ITER_CHUNK
            cols = [(k, _values(v[a:b], None if f is None else f[a:b]), None if p is None else p[a:b].tolist())
                    for k, (v, p, f) in self.columns.items()]
            for j, s in enumerate(self.shape_index[a:b].tolist()):
                yield _assemble(shapes[s], {k: v[j] for k, v, p in cols if p is None or p[j]})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (EventTable, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventTable({len(self)} events, {len(self.shapes)} distinct shapes)"

    def field(self, name: str, default: Any = None) -> list[Any]:
        """``name`` of every event (``default`` where absent), as a list."""
        per_shape = [s.get(name, default) for s in self.shapes]
        values = list(map(per_shape.__getitem__, self.shape_index.tolist()))
        if name in self.columns:
            v, p, f = self.columns[name]
            where = np.arange(len(v)) if p is None else np.flatnonzero(p)
            for j, x in zip(where.tolist(), _values(v[where], None if f is None else f[where])):
                values[j] = x
        return values

    def number(self, name: str, missing: float = np.nan) -> np.ndarray:
        """``name`` of every event as float64: ``missing`` where absent, NaN where null. Raises ValueError when
        some event has a value that is not a number."""
        per_shape = np.empty(len(self.shapes), dtype=np.float64)
        for j, s in enumerate(self.shapes):
            x = s.get(name, missing)
            if x is not None and (not isinstance(x, (int, float)) or isinstance(x, bool)):
                raise ValueError(f"{name}: not a number: {x!r}")
            per_shape[j] = np.nan if x is None else x
        out = per_shape[self.shape_index] if len(self.shapes) else np.full(len(self), missing, dtype=np.float64)
        if name in self.columns:
            v, p, _ = self.columns[name]
            if p is None:
                out = v.astype(np.float64)
            else:
                out[p] = v[p]
        return out

    def with_columns(self, **columns: np.ndarray) -> "EventTable":
        """This table with column fields set for every event (int64 or float64 arrays); the arrays are shared."""
        for name, values in columns.items():
            if name not in COLUMN_FIELDS or len(values) != len(self):
                raise ValueError(f"{name}: expected one of {COLUMN_FIELDS} with {len(self)} values")
        return EventTable(self.shapes, self.shape_index, {**self.columns, **{k: (np.asarray(v), None, None)
                                                                            for k, v in columns.items()}})

    def kinds(self) -> list[Any]:
        """Every event's ``kind``."""
        return self.field("kind")


def _values(v: np.ndarray, floats: np.ndarray | None) -> list[Any]:
    """Column values as Python numbers, the integers of a mixed column as ints."""
    out = v.tolist()
    if floats is not None:
        for j in np.flatnonzero(~floats).tolist():
            out[j] = int(out[j])
    return out


def _assemble(shape: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """One event as a dict: the format's leading fields first, then the shared ones, then the other columns."""
    ev = {k: values.pop(k) if k in values else shape[k] for k in _LEADING if k in values or k in shape}
    ev.update(shape)
    ev.update(values)
    return ev


class EventTableBuilder:
    """Builds an :class:`EventTable` one event dict at a time, sharing equal values: each list or dict value is
    replaced by the first equal one seen (so JSON-read events, whose lists are all distinct objects, share them
    too), then the event's non-column fields by the first equal dict of them."""

    def __init__(self) -> None:
        self.shapes: list[dict[str, Any]] = []
        self._shape_of: dict[tuple, int] = {}
        self._canonical: dict[Any, Any] = {}     # frozen value -> the object that stands for every equal one
        self._token_of: dict[int, tuple] = {}   # id of such an object (kept alive by _canonical) -> its token
        self._index = array("i")
        # column fields, sparsely: the rows that have each, its values there, whether each value is a float
        self._rows = {name: array("q") for name in COLUMN_FIELDS}
        self._values = {name: array("d") for name in COLUMN_FIELDS}
        self._floats = {name: bytearray() for name in COLUMN_FIELDS}
        self._updates: dict[str, dict[int, float]] = {name: {} for name in COLUMN_FIELDS}  # set_number's

    def __len__(self) -> int:
        return len(self._index)

    def append(self, ev: dict[str, Any], drop_none: bool = False) -> int:
        """Add one event (without its null fields when ``drop_none``); returns its row."""
        if not isinstance(ev, dict):
            raise TypeError(f"event {len(self._index)}: expected a dict, found {type(ev).__name__}")
        row = len(self._index)
        shape: dict[str, Any] = {}
        key: list[Any] = []
        for k, v in ev.items():
            t = type(v)
            if v is None and drop_none:
                continue
            if k in self._values and (t is float or (t is int and -_EXACT <= v <= _EXACT)):
                self._rows[k].append(row)
                self._values[k].append(v)
                self._floats[k].append(t is float)
                continue
            if t is list or t is dict:
                v, frozen = self._share(v)
            elif t is float or t is bool:
                frozen = (t, v)
            else:
                frozen = v
            shape[k] = v
            key.append((k, frozen))
        try:
            s = self._shape_of.setdefault(tuple(key), len(self.shapes))
        except TypeError:  # a value no JSON has (a set...): this event's shape is its own
            s = len(self.shapes)
        if s == len(self.shapes):
            self.shapes.append(shape)
        self._index.append(s)
        return row

    def set_number(self, row: int, name: str, value: float) -> None:
        """Set column field ``name`` of an appended event (the importer adds an op's later kernels' time to its
        first kernel)."""
        self._updates[name][row] = value

    def number(self, row: int, name: str) -> float | None:
        """Column field ``name`` of an appended event, None when it has none."""
        if row in self._updates[name]:
            return self._updates[name][row]
        rows = self._rows[name]
        j = bisect.bisect_left(rows, row)
        return self._values[name][j] if j < len(rows) and rows[j] == row else None

    def _share(self, v: Any) -> tuple[Any, Any]:
        """The object that stands for every value equal to list or dict ``v``, and its token in shape keys (a
        small tuple: hashing it is cheap, where hashing the frozen value would walk it on every event)."""
        token = self._token_of.get(id(v))
        if token is not None:
            return v, token
        try:
            c = self._canonical.setdefault(_freeze(v), v)
        except TypeError:
            return v, ("unshared", id(v), v)
        if c is v:
            token = self._token_of[id(v)] = (_SHARED, len(self._token_of))
            return v, token
        return c, self._token_of[id(c)]

    def finish(self, order: np.ndarray | None = None) -> EventTable:
        """The table, its events in ``order`` (rows of this builder; default: as appended)."""
        n = len(self._index)
        index = np.frombuffer(self._index, dtype=np.int32) if n else np.zeros(0, np.int32)
        columns: dict[str, tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = {}
        for name in COLUMN_FIELDS:
            rows, updates = self._rows[name], self._updates[name]
            if not len(rows) and not updates:
                continue
            values, present, floats = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
            if len(rows):
                at = np.frombuffer(rows, dtype=np.int64)
                values[at] = np.frombuffer(self._values[name], dtype=np.float64)
                present[at] = True
                floats[at] = np.frombuffer(bytes(self._floats[name]), dtype=bool)
            for r, x in updates.items():
                values[r], present[r], floats[r] = x, True, type(x) is float
            if order is not None:
                values, present, floats = values[order], present[order], floats[order]
            if not floats.any():
                values, floats = values.astype(np.int64), None
            elif floats.sum() == present.sum():
                floats = None
            columns[name] = (values, None if present.all() else present, floats)
        index = index[order] if order is not None else index.copy()
        shapes, self.shapes = self.shapes, []
        self._shape_of.clear(), self._canonical.clear(), self._token_of.clear()
        self._index, self._rows, self._values, self._floats, self._updates = array("i"), {}, {}, {}, {}
        return EventTable(shapes, index, columns)


_SHARED = object()  # first item of a shared value's token: equal to no JSON value


def _freeze(v: Any) -> Any:
    """A hashable form of a JSON value that tells 1, 1.0 and True apart."""
    t = type(v)
    if t is list:
        return (list, tuple(map(_freeze, v)))
    if t is dict:
        return (dict, tuple((k, _freeze(x)) for k, x in v.items()))
    if t is float or t is bool:
        return (t, v)
    return v


def as_table(events: EventTable | Iterable[dict[str, Any]]) -> EventTable:
    """``events`` as a table (a table is returned as it is)."""
    return events if isinstance(events, EventTable) else EventTable.from_dicts(events)


def write_trace(path: str | Path, *, rank: int, world_size: int, hardware: str,
                events: EventTable | Iterable[dict[str, Any]], meta: dict[str, Any] | None = None) -> Path:
    """Write atomically (temporary file in the same folder, then rename); ``events`` is a table or event dicts,
    written one at a time."""
    path = Path(path)
    head = {"format": FORMAT, "version": VERSION, "rank": rank, "world_size": world_size, "hardware": hardware,
            "meta": meta or {}}
    with atomic_path(path) as tmp:
        with (gzip.open(tmp, "wt") if path.suffix == ".gz" else open(tmp, "w")) as f:
            f.write(json.dumps(head, separators=(",", ":"))[:-1] + ',"events":[')
            encode = json.JSONEncoder(separators=(",", ":")).encode
            chunk: list[str] = []
            for n, ev in enumerate(events):
                chunk.append(encode(ev) if n == 0 else "," + encode(ev))
                if len(chunk) >= 4096:
                    f.write("".join(chunk))
                    chunk.clear()
            f.write("".join(chunk) + "]}")
    return path


def read_trace(path: str | Path) -> dict[str, Any]:
    """Read and check one rank's trace; its ``events`` are an :class:`EventTable`. The event list is read as a
    stream (:class:`profiling.kineto.JsonStream`), each event going into the table as it is decoded, so neither
    the file's text nor a dict per event is ever held whole."""
    from stepcast.profiling.kineto import JsonStream

    path = Path(path)
    doc: dict[str, Any] = {}
    builder = EventTableBuilder()
    bad: list[tuple[int, Any]] = []

    def add(ev: Any) -> None:
        if not isinstance(ev, dict) or ev.get("kind") not in EVENT_KINDS:
            if not bad:
                bad.append((len(builder), ev.get("kind") if isinstance(ev, dict) else ev))
            ev = {"kind": None}  # keeps the positions of the events after it
        builder.append(ev)

    try:
        with _open_binary(path) as body:
            stream = JsonStream(body, lambda: None)
            if stream.peek() != "{":
                stream.value()  # invalid JSON is said as such
                raise TraceFormatError(f"{path}: field 'format': expected '{FORMAT}'")
            for key in stream.keys():
                if key == "events" and stream.peek() == "[":
                    stream.each_item(add)
                    doc[key] = builder
                else:
                    doc[key] = stream.value()
            stream.end()
    except (OSError, json.JSONDecodeError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: cannot read trace ({str(exc).splitlines()[0] if str(exc) else exc!r})") \
            from None
    if doc.get("format") != FORMAT:
        raise TraceFormatError(f"{path}: field 'format': expected '{FORMAT}'")
    if doc.get("version") != VERSION:
        raise TraceFormatError(f"{path}: field 'version': expected {VERSION}, found {doc.get('version')!r}")
    for field in ("rank", "world_size", "hardware", "events"):
        if field not in doc:
            raise TraceFormatError(f"{path}: field '{field}' is missing")
    if doc["events"] is not builder:
        raise TraceFormatError(f"{path}: field 'events': expected a list, found {type(doc['events']).__name__}")
    if bad:
        i, found = bad[0]
        raise TraceFormatError(f"{path}: events[{i}].kind: expected one of {sorted(EVENT_KINDS)}, found {found!r}")
    doc["events"] = builder.finish()
    return doc


def _open_binary(path: Path):
    """The file's bytes, gunzipped when its name ends in ``.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


class OpCalls:
    """Gives an op call's spec to its first kernel of each family only: the estimators time an op as a whole (every
    data source times all the kernels of an op call together), so its further kernels of that family become
    ``op_part`` kernels, which add no predicted time (trace format: the module docstring)."""

    def __init__(self) -> None:
        self.first: dict[tuple[Any, str], Any] = {}

    def mark(self, ev: dict[str, Any], call: Any, token: Any = None) -> Any:
        """Mark ``ev`` (a kernel with a spec) of op call ``call``; returns the call's first kernel (or the
        ``token`` it was marked with, e.g. its row in an :class:`EventTableBuilder`) when ``ev`` became an
        ``op_part``, else None."""
        key = (call, ev["spec"]["family"])
        first = self.first.get(key, _UNSEEN)
        if first is _UNSEEN:
            self.first[key] = ev if token is None else token
            return None
        ev["spec"], ev["op_part"] = None, True
        return first


_UNSEEN = object()
