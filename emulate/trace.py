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
- ``memcpy``: ``stream``, ``bytes``, ``direction`` ("h2d" | "d2h" | "d2d" | "h2h"), ``blocking`` (bool).
- ``memset``: ``stream``, ``bytes``.
- ``malloc`` / ``free``: ``ptr``, ``bytes`` (device memory as the CUDA runtime sees it).
- ``event_record``: ``event`` (handle), ``stream``.   ``stream_wait_event``: ``stream``, ``event``.
- ``event_sync``: ``event``.   ``stream_sync``: ``stream``.   ``device_sync``.
- ``collective``: ``stream``, ``op`` (all_reduce | all_gather | reduce_scatter | all_to_all | broadcast | reduce |
  send | recv), ``comm`` (communicator id, same string on every member), ``comm_seq`` (n-th call on that
  communicator), ``ranks`` (communicator size), ``peer`` (send/recv: the other rank, numbered within the
  communicator as NCCL takes it; a global rank when the trace has no ``comm_rank``), ``comm_rank`` (optional: this
  rank's number within the communicator), ``count``, ``dtype``, ``bytes`` (per rank, the
  larger of send and receive buffer), ``spec`` (family ``collective`` row).
- ``iteration``: ``step`` (marks the start of a training iteration: profiler step, optimizer step or backward).

Streams are integers: 0 is the legacy default stream; others are the handles the runtime gave out, renumbered 1, 2...

Optional fields written by ``python -m emulate run`` (compatible extensions of version 1; readers may ignore them):

- every event: ``thread`` (host thread, 0 = the first thread that called the runtime; autograd's backward runs on
  another). The trace starts at the first intercepted call (its ``t_ns`` and ``gap_ns`` are 0).
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

Optional fields written by the Kineto importer (:mod:`emulate.kineto_to_trace`, for ``python -m emulate replay``):

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

Host-model fields any producer may set (read by :mod:`emulate.sim.host`): ``meta.call_costs_in_gaps`` (default
false: a captured trace's gaps lack the cost of the intercepted calls), ``meta.clock_origin_us``,
``meta.host_clock`` ("cpu" | "wall": how the capture measured gaps).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from profiling.atomic import atomic_path

FORMAT = "stepcast-trace"
VERSION = 1

EVENT_KINDS = frozenset({
    "kernel", "memcpy", "memset", "malloc", "free", "event_record", "stream_wait_event", "event_sync",
    "stream_sync", "device_sync", "collective", "iteration",
})
DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset", "collective"})


class TraceFormatError(ValueError):
    """A trace file that does not follow the format; the message names the file and the field."""


def _open(path: Path, mode: str):
    return gzip.open(path, mode + "t") if path.suffix == ".gz" else open(path, mode)


def write_trace(path: str | Path, *, rank: int, world_size: int, hardware: str, events: list[dict[str, Any]],
                meta: dict[str, Any] | None = None) -> Path:
    """Write atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    doc = {"format": FORMAT, "version": VERSION, "rank": rank, "world_size": world_size, "hardware": hardware,
           "meta": meta or {}, "events": events}
    with atomic_path(path) as tmp:
        with (gzip.open(tmp, "wt") if path.suffix == ".gz" else open(tmp, "w")) as f:
            json.dump(doc, f, separators=(",", ":"))
    return path


def read_trace(path: str | Path) -> dict[str, Any]:
    """Read and check one rank's trace."""
    path = Path(path)
    try:
        with _open(path, "r") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise TraceFormatError(f"{path}: cannot read trace ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceFormatError(f"{path}: field 'format': expected '{FORMAT}'")
    if doc.get("version") != VERSION:
        raise TraceFormatError(f"{path}: field 'version': expected {VERSION}, found {doc.get('version')!r}")
    for field in ("rank", "world_size", "hardware", "events"):
        if field not in doc:
            raise TraceFormatError(f"{path}: field '{field}' is missing")
    for i, ev in enumerate(doc["events"]):
        if ev.get("kind") not in EVENT_KINDS:
            raise TraceFormatError(f"{path}: events[{i}].kind: expected one of {sorted(EVENT_KINDS)}, "
                                   f"found {ev.get('kind')!r}")
    return doc


class OpCalls:
    """Gives an op call's spec to its first kernel of each family only: the estimators time an op as a whole (every
    data source times all the kernels of an op call together), so its further kernels of that family become
    ``op_part`` kernels, which add no predicted time (trace format: the module docstring)."""

    def __init__(self) -> None:
        self.first: dict[tuple[Any, str], dict[str, Any]] = {}

    def mark(self, ev: dict[str, Any], call: Any) -> dict[str, Any] | None:
        """Mark ``ev`` (a kernel with a spec) of op call ``call``; returns the call's first kernel when ``ev`` became
        an ``op_part``, else None."""
        first = self.first.setdefault((call, ev["spec"]["family"]), ev)
        if first is ev:
            return None
        ev["spec"], ev["op_part"] = None, True
        return first
