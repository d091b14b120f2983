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

import functools
import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiling.hardware import HardwareSpec, UnknownHardwareError, load_catalog, lookup, normalise_name


class TraceFormatError(ValueError):
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

def read_trace(path: str | Path) -> KinetoTrace:
    """Read one Kineto trace (``.json`` or ``.json.gz``). A malformed file raises TraceFormatError naming it."""
    path = Path(path)
    document = _load_json(path)
    if isinstance(document, list):  # a bare Chrome trace: the event list alone
        raw_events, meta = document, {}
    elif isinstance(document, dict) and isinstance(document.get("traceEvents"), list):
        raw_events, meta = document["traceEvents"], document
    else:
        raise TraceFormatError(f"{path}: not a Chrome trace (expected an object with a 'traceEvents' list)")
    try:
        events = events_frame(raw_events)
    except (TypeError, AttributeError, ValueError) as exc:
        raise TraceFormatError(f"{path}: malformed trace events ({exc.__class__.__name__}: {exc})") from None
    if events.empty:
        raise TraceFormatError(f"{path}: 'traceEvents' holds no complete events (ph 'X'): an empty trace")
    device_properties = meta.get("deviceProperties") or []
    distributed_info = meta.get("distributedInfo") or {}
    if not isinstance(device_properties, list) or not isinstance(distributed_info, dict):
        raise TraceFormatError(f"{path}: 'deviceProperties' must be a list and 'distributedInfo' an object")
    schema = "old" if any(e.get("cat") in ("Operator", "Kernel") for e in raw_events[:5000] if isinstance(e, dict)) \
        else "new"
    return KinetoTrace(path, events, device_properties, distributed_info, schema)


def _load_json(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            magic = fh.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as fh:
            return json.loads(fh.read())
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: unreadable ({exc.__class__.__name__}: {exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None


def events_frame(raw_events: list[dict[str, Any]]) -> pd.DataFrame:
    """Complete events (``ph == "X"``) as a frame with EVENT_COLUMNS, sorted by ts, with a fresh RangeIndex."""
    xs = [e for e in raw_events if e.get("ph") == "X"]
    args = [e.get("args") or {} for e in xs]
    data: dict[str, Any] = {
        "name": [e.get("name") for e in xs],
        "cat": [e.get("cat") for e in xs],
        "ts": np.array([e.get("ts", np.nan) for e in xs], dtype="float64"),
        "dur": np.array([e.get("dur", 0.0) for e in xs], dtype="float64"),
        "pid": [e.get("pid") for e in xs],
        "tid": [e.get("tid") for e in xs],
    }
    for key, column in ARG_COLUMNS.items():
        values = [a.get(key) for a in args]
        if column in data:  # both spellings present (old schema mixes them): fill the gaps only
            data[column] = [v if v is not None else old for v, old in zip(values, data[column])]
        else:
            data[column] = values
    df = pd.DataFrame(data)
    df["cat"] = df["cat"].replace(CATEGORY_ALIASES)
    for column in ("pid", "tid"):
        df[column] = _to_int(df[column])
    for column in INT_COLUMNS:
        if column not in ("pid", "tid"):
            df[column] = pd.to_numeric(df[column], errors="coerce").astype("Int64")
    gpu = df["cat"].isin(GPU_CATEGORIES)
    df.loc[gpu & df["stream"].isna(), "stream"] = df.loc[gpu & df["stream"].isna(), "tid"]
    df = df[df["ts"].notna()].sort_values("ts", kind="stable").reset_index(drop=True)
    return df


def _to_int(column: pd.Series) -> pd.Series:
    """pid/tid as Int64: numbers pass, strings like "stream 7" or "25738" keep their trailing integer."""
    numeric = pd.to_numeric(column, errors="coerce")
    text = column[numeric.isna() & column.notna()].astype(str)
    if len(text):
        numeric.loc[text.index] = pd.to_numeric(text.str.extract(r"(-?\d+)\s*$")[0], errors="coerce")
    return numeric.astype("Int64")


# ---- derived frames -----------------------------------------------------------------------------------------------

def profiler_steps(events: pd.DataFrame) -> pd.DataFrame:
    """ProfilerStep#N spans: step, ts, dur, end, pid, tid (host side; both schemas)."""
    host = events[events["cat"].isin(("user_annotation", "cpu_op"))]
    step = host["name"].str.extract(_PROFILER_STEP, expand=False)
    spans = host.loc[step.notna(), ["ts", "dur", "pid", "tid"]].copy()
    spans.insert(0, "step", step.dropna().astype(int))
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
    """
    gpu = events[events["cat"].isin(categories)].copy()
    gpu["event_index"] = gpu.index
    launches = events.loc[events["cat"].isin(LAUNCH_CATEGORIES) & events["correlation"].notna(),
                          ["correlation", "name", "ts", "dur", "pid", "tid", "external_id"]]
    launches = launches.drop_duplicates("correlation").rename(columns={
        "name": "runtime_name", "ts": "runtime_ts", "dur": "runtime_dur", "pid": "launch_pid", "tid": "launch_tid",
        "external_id": "runtime_external_id"})
    gpu = gpu.merge(launches, on="correlation", how="left").set_index("event_index", drop=False)
    gpu.index.name = None

    ops = events[events["cat"].isin(HOST_OP_CATEGORIES) & ~events["name"].str.match(_PROFILER_STEP.pattern)]
    op_index = _ops_by_external_id(gpu, ops).copy()
    missing = op_index < 0
    if missing.any():
        op_index[missing] = _ops_by_containment(gpu.loc[missing], ops)
    gpu["op_index"] = op_index
    op_columns = ["name", "ts", "dur", "external_id", "input_dims", "input_types", "input_strides", "concrete_inputs"]
    op_rows = events[op_columns].add_prefix("op_").reindex(op_index)  # -1 is no label: an all-NA row
    gpu[op_rows.columns] = op_rows.to_numpy(dtype=object)
    gpu = gpu.astype({"op_ts": "float64", "op_dur": "float64", "op_external_id": "Int64"})
    gpu["step"] = _step_of(gpu["runtime_ts"].fillna(gpu["ts"]), profiler_steps(events))
    return gpu.drop(columns=["event_index"]).reset_index(drop=True)


def _ops_by_external_id(gpu: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Op row per activity through External id, kept only where the op's span contains the launch."""
    wanted = pd.DataFrame({"external_id": gpu["external_id"].fillna(gpu["runtime_external_id"]).to_numpy(),
                           "launch_ts": gpu["runtime_ts"].to_numpy(), "launch_tid": gpu["launch_tid"].to_numpy()})
    candidates = ops.loc[ops["external_id"].notna(), ["external_id", "ts", "dur", "tid"]]
    candidates = candidates.reset_index(names="op_row").drop_duplicates("external_id")
    matched = wanted.merge(candidates, on="external_id", how="left")  # left merge keeps row order
    found = matched["op_row"].notna() & wanted["external_id"].notna()
    contains = (matched["ts"] <= matched["launch_ts"]) & (matched["launch_ts"] <= matched["ts"] + matched["dur"]) \
        & (matched["tid"] == matched["launch_tid"])
    # No runtime record (launch not captured): trust the id alone.
    keep = found & (contains.fillna(False).astype(bool) | matched["launch_ts"].isna())
    return np.where(keep, matched["op_row"].fillna(-1), -1).astype(np.int64)


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
