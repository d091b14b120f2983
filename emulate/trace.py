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
  communicator), ``ranks`` (communicator size), ``peer`` (send/recv) , ``count``, ``dtype``, ``bytes`` (per rank, the
  larger of send and receive buffer), ``spec`` (family ``collective`` row).
- ``iteration``: ``step`` (marks the start of a training iteration: profiler step, optimizer step or backward).

Streams are integers: 0 is the legacy default stream; others are the handles the runtime gave out, renumbered 1, 2...
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "version": VERSION, "rank": rank, "world_size": world_size, "hardware": hardware,
           "meta": meta or {}, "events": events}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with _open(Path(tmp) if path.suffix != ".gz" else Path(tmp + ".gz"), "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        if path.suffix == ".gz":
            os.replace(tmp + ".gz", path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        for p in (tmp, tmp + ".gz"):
            if os.path.exists(p):
                os.unlink(p)
        raise
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
