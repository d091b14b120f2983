"""How long every device op takes: measured, predicted by the estimator (one batched call), or a fallback.

Order of preference for each op (``mode`` is "measured" or "predicted"):

1. ``mode == "measured"`` and the event carries ``duration_us``: that duration.
2. kernels and collectives with a ``spec`` (collectives without one get a spec built from op/bytes/ranks): the
   estimator's prediction on the target hardware. All ranks' rows go to ONE ``predict_frame`` call. Rows the
   estimator answers with its analytical fallback (label ``roofline@...``) are counted as fallbacks.
   Inductor's Triton kernels carry no spec; they get one from their launch (``classify_triton_kernel``: the
   bytes it read and wrote when the capture recorded them, else its grid), FlexAttention's templates the attention
   row of their shapes (:func:`inductor_spec`), other Triton kernels (a library's or a user's) the memory-bound row
   of the tensors their launch passed (``classify_launch_bytes``).
3. ``op_part`` kernels (further kernels of an op call whose first kernel carries the op's spec): 0, the op's
   predicted time covers them. Other kernels without a spec: the measured duration scaled by the ratio of memory
   bandwidths (source -> target hardware; most unclassified kernels are memory bound) when one was recorded, else
   the elementwise copy of the bytes their aten op's tensors hold (``classify_memory_op``: FSDP2's copy-in and
   copy-out, gathers, index kernels), else a launch floor. Counted.
   Collectives without op/bytes keep their recorded duration.
4. memcpy / memset: bandwidth model from the catalog: host<->device over PCIe, device copies read and write HBM,
   copies to or from a peer GPU (``peer``) cross NVLink (:func:`peer_copy_bandwidth`); a copy across a link moves
   :data:`LINK_COPY_EFFICIENCY` of its rated bandwidth.

Every kernel counted in ``fallback_kernels`` is also marked in ``fallback`` (per rank, per event), so that the
report can count those of the steady iterations apart from warm-up and autotuning's benchmark launches.

Predicted kernel times are then scaled by the in-step calibration of the target GPU when it has one
(:mod:`emulate.sim.instep`: one factor per family, fitted on per-operator times measured inside whole-model runs;
``STEPCAST_INSTEP=off`` turns it off; fitted once per estimator version and data, then read from the cache); the
report's estimator label names the factors.

GEMM rows carry the launch cuBLAS recorded (``kernel_name`` and ``grid`` "x,y,z", the columns
:mod:`estimator.kernel_labels` reads; a kernel-configuration estimator then uses the kernel that ran instead of asking
the heuristic) only when the target is the device the trace was captured on (``prog.hardware``): cuBLAS chose that
kernel for that device, and another GPU's cuBLAS would choose another, which the estimator's heuristic asks for.
Only names :func:`estimator.kernel_config.parse_name` reads as a GEMM kernel are recorded (a convolution call's
layout transform or a library call's entry point is not the GEMM); rows of the same spec but another recorded launch
are distinct rows.

Attention kernels built for an older SM generation than the target's (FlashAttention-2 on Hopper or Blackwell) take
longer by the tensor-core rate their older instructions lose, on their compute-bound share
(:mod:`estimator.legacy_isa`).

cuDNN convolution forwards timed as an implicit GEMM (a ``gemm`` row on a convolution op) are then scaled by the
factor of the cuDNN kernel family the call ran (:mod:`estimator.conv_families`: the call's first kernel and its
``op_part`` kernels name the engine) when the estimator's bundle ships that table.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from stepcast.emulate.sim.copies import twin_indices
from stepcast.emulate.sim.program import COLLECTIVE, KERNEL, MEMCPY, MEMCPY_BLOCKING, MEMSET, RankProgram
from stepcast.emulate.trace import EventTable, TraceFormatError
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.kernel_config import PATHS, parse_name
from stepcast.estimator.memory_latency import MEMORY_FAMILIES, accesses_in_flight, latency_bound_us
from stepcast.profiling.classify import (
    classify_flex_attention_kernel,
    classify_launch_bytes,
    classify_memory_op,
    classify_triton_kernel,
    flex_attention_pass,
    tensor_dtype,
)
from stepcast.profiling.families import FAMILIES
from stepcast.profiling.hardware import HardwareSpec, UnknownHardwareError, lookup
from stepcast.errors import InputError

LAUNCH_FLOOR_US = 2.0          # an unclassified kernel with nothing measured: the smallest kernel a GPU runs
COPY_LATENCY_US = 1.0          # fixed cost of a copy or memset besides its bytes
HOST_COPY_BANDWIDTH = 10e9     # bytes/s for host-to-host copies issued through the runtime
#: what a copy engine moves across a link (NVLink or PCIe), as a share of the link's rated one-way bandwidth: the
#: link's packet headers and flow control, not the engine, set it, and two measurements of two links agree: 380 of
#: 450 GB/s between two H100 SXM over NVLink 4 (CUDA's p2pBandwidthLatencyTest, NVIDIA/nccl#1264, 376 GB/s in a
#: second run quoted there) and 26.3 of 31.5 GB/s between two RTX A6000 over PCIe 4 x16 (nvbandwidth's
#: device_to_device_memcpy_read_ce, NVIDIA/nvbandwidth#50)
LINK_COPY_EFFICIENCY = 0.84

# Trace collective ops -> the ``collective`` family's ops (profiling.families).
COLLECTIVE_FAMILY_OP = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "broadcast", "send": "send_recv",
    "recv": "send_recv", "send_recv": "send_recv",
}


@dataclass
class Durations:
    """Per-rank duration (us) of every event (0 for host events) and where each number came from."""

    us: list[np.ndarray]
    measured: list[np.ndarray]                       # True where the duration is the recorded one
    fallback_kernels: int = 0
    fallback: list[np.ndarray] = field(default_factory=list)  # per rank, True on each kernel counted above
    fallback_reasons: Counter = field(default_factory=Counter)
    estimator_label: str | None = None
    spec_rows: pd.DataFrame | None = None            # the distinct rows sent to the estimator, with predictions
    #: per rank, True on each predicted kernel whose blocks take more than half the GPU's block slots (:func:`fills_gpu`):
    #: the engine lets no two such kernels of a rank progress at once (emulate.sim.engine)
    fills: list[np.ndarray] = field(default_factory=list)


def inductor_spec(ev: dict[str, Any], flex_forward: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The spec of an Inductor Triton kernel, which no aten op describes. A FlexAttention template is the attention
    it computes (:func:`profiling.classify.classify_flex_attention_kernel`); its backward template, launched with no
    op context on a grid of (blocks, batch, key/value heads), takes the row of the rank's latest forward of that
    batch (``flex_forward``, which forwards update), as the pass, with the key/value heads of its grid: a backward
    differentiates a forward of its shapes. Any other kernel is timed from its launch (:func:`classify_triton_kernel`).
    None: no spec (a FlexAttention template whose shapes were not found)."""
    name, grid = ev["name"], ev.get("grid")
    pass_ = flex_attention_pass(name)
    if pass_ == "fwd":
        row = classify_flex_attention_kernel(name, grid, ev.get("op_shapes") or (), ev.get("op_dtypes") or (),
                                             ev.get("bytes_written") or 0)
        if row is not None:
            flex_forward[row["batch"]] = row
        return row
    if pass_ == "bwd":
        forward = flex_forward.get(int(grid[1])) if grid and len(grid) >= 3 else None
        heads_kv = int(grid[2]) if forward else 0
        if not forward or heads_kv <= 0 or forward["heads_q"] % heads_kv:
            return None
        return {**forward, "heads_kv": heads_kv, "pass": "bwd"}
    return classify_triton_kernel(name, grid, ev.get("block"), ev.get("op_shapes") or (), ev.get("op_dtypes") or (),
                                  "Backward" in (ev.get("op") or ""),
                                  (ev.get("bytes_read") or 0) + (ev.get("bytes_written") or 0))


def assign_durations(programs: list[RankProgram], target: HardwareSpec | None, mode: str,
                     estimator: KernelEstimator | None, ranks_per_node: int) -> Durations:
    """Durations of every rank's device ops (module docstring). Identical spec rows (the same GEMM in every
    layer and iteration) are predicted once: the estimator sees each distinct row one time, in one call.

    A sparse run's copy (:func:`emulate.sim.copies.twin_indices`) is timed as its twin, once: its events, and so
    its collectives' specs with the placement recorded at capture, are the twin's; it shares the twin's arrays
    and adds its twin's fallback kernels to the counts."""
    if mode not in ("measured", "predicted"):
        raise ValueError(f"durations '{mode}': expected 'measured' or 'predicted'")
    twin = twin_indices(programs)
    copies_of = Counter(twin)                       # each timed rank counts once per rank it stands for
    out = Durations(us=[], measured=[])
    rows: list[dict[str, Any]] = []               # distinct rows
    row_index: dict[Any, int] = {}                # row key -> position in rows
    uses: list[tuple[int, list[int], list[int], bool]] = []   # (rank, event positions, their rows, kernels?)
    no_spec: list[tuple[int, int, float | None]] = []

    def row_of(spec: dict[str, Any], source: str, i: int, launch: tuple[str, Any] | None = None) -> int:
        try:
            key = (tuple(spec), tuple(spec.values()))  # names and values: cheaper than items() pairs
            if launch is not None:
                key += launch
            j = row_index.get(key)
        except (TypeError, AttributeError):  # unhashable values: predicted on its own
            key, j = None, None
        if j is None:
            j = len(rows)
            row = _row(spec, target.id, source, i)  # a copy: the event's spec is never changed
            if launch is not None:
                row["kernel_name"], row["grid"] = launch[0], _grid_text(launch[1])
            rows.append(row)
            if key is not None:
                row_index[key] = j
        return j

    for r, prog in enumerate(programs):
        if twin[r] != r:
            out.us.append(out.us[twin[r]])
            out.measured.append(out.measured[twin[r]])
            out.fallback.append(out.fallback[twin[r]])
            out.fills.append(out.fills[twin[r]])
            continue
        us = np.zeros(prog.n_events, dtype=np.float64)
        measured = np.zeros(prog.n_events, dtype=bool)
        if mode == "measured":
            dev = prog.device_index
            have = dev[np.isfinite(prog.recorded_us[dev])]
            us[have] = prog.recorded_us[have]
            measured[have] = True
            todo = dev[~measured[dev]]
        else:
            todo = prog.device_index
        events = prog.events
        if len(todo) and target is None:
            i = int(todo[0])
            raise InputError(f"{prog.source}: events[{i}] has no measured duration and no target hardware was "
                             f"given to predict it (pass a hardware id)")
        is_kernel = prog.kind_array[todo] == KERNEL
        kernels = todo[is_kernel].tolist()
        positions, ids = [], []
        known = row_index.get
        # the recorded cuBLAS launch describes the target only when the trace was captured on it (module docstring)
        launches = _recorded_launches(events) \
            if kernels and target is not None and prog.hardware == target.id else None
        flex_forward: dict[int, dict[str, Any]] = {}   # the rank's latest FlexAttention forward by batch
        for i, spec in zip(kernels, map(events.field("spec").__getitem__, kernels)):
            if not spec and events[i]["name"].startswith("triton_"):  # Inductor's: no aten op describes them
                spec = inductor_spec(events[i], flex_forward)
            if not spec and events[i].get("bytes_read") and not events[i].get("op_part"):
                ev = events[i]   # a plain Triton kernel: the tensors its launch passed (emulate/triton_bytes.py)
                spec = classify_launch_bytes(ev.get("op_shapes") or (), ev.get("op_dtypes") or (),
                                             (ev.get("bytes_read") or 0) + (ev.get("bytes_written") or 0))
            if not spec and not events[i].get("op_part") and events[i].get("duration_us") is None:
                ev = events[i]   # no family: a memory-bound kernel of the bytes its op call's tensors hold
                spec = classify_memory_op(ev.get("op"), ev.get("op_shapes") or (), ev.get("op_dtypes") or ())
            if spec:
                launch = launches[i] if launches is not None else None
                try:
                    key = (tuple(spec), tuple(spec.values()))
                    j = known(key if launch is None else key + launch)
                except (TypeError, AttributeError):
                    j = None
                positions.append(i)
                ids.append(j if j is not None else row_of(spec, prog.source, i, launch))
            elif not events[i].get("op_part"):
                no_spec.append((r, i, events[i].get("duration_us")))
            # op_part: timed with its op's first kernel; its duration stays 0
        uses.append((r, positions, ids, True))
        positions, ids = [], []
        for i in todo[~is_kernel].tolist():
            ev = events[i]
            k = prog.kind[i]
            if k == COLLECTIVE:
                spec = _collective_spec(ev, ranks_per_node)
                if spec:
                    positions.append(i)
                    ids.append(row_of(spec, prog.source, i))
                else:
                    no_spec.append((r, i, ev.get("duration_us")))
            else:
                us[i] = copy_duration_us(ev, k, target, prog.source, i)
        uses.append((r, positions, ids, False))
        out.us.append(us)
        out.measured.append(measured)
        out.fallback.append(np.zeros(prog.n_events, dtype=bool))
        out.fills.append(fills_gpu(prog, kernels, target))

    if rows:
        if estimator is None:
            raise ValueError("durations 'predicted' need an estimator (estimator.load(...))")
        predicted = estimator.predict_frame(pd.DataFrame.from_records(rows))
        values = predicted["predicted_us"].to_numpy(dtype=np.float64)
        labels = predicted["estimator"].astype(str).to_numpy()
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            r, i = next((r, p) for r, pos, ids, _ in uses for p, j in zip(pos, ids) if j == bad[0])
            raise ValueError(f"{programs[r].source}: events[{i}].spec: the estimator returned "
                             f"{values[bad[0]]} for {rows[bad[0]]}")
        analytical = np.char.startswith(labels.astype(str), "roofline")
        values = np.maximum(values, 0.0)
        in_step = _in_step_scale(rows, target, estimator) if mode == "predicted" else None
        if in_step is not None:
            values = values * in_step[0]
            predicted["predicted_us"] = values
        n_analytical = 0
        conv_table = _conv_table(estimator)
        if mode == "predicted":   # per row, FLOPs and bytes: attention's for legacy_isa_factors, memory kernels' bytes
            flops, moved = row_work(rows, ("attention",))
            memory_moved = row_work(rows, MEMORY_FAMILIES)[1]
        for r, positions, ids, kernels_only in uses:
            if positions:
                j, at = np.asarray(ids, dtype=np.int64), np.asarray(positions, dtype=np.int64)
                out.us[r][at] = values[j]
                if kernels_only and conv_table is not None:
                    out.us[r][at] *= conv_family_factors(programs[r], positions, conv_table)
                if kernels_only and mode == "predicted":
                    out.us[r][at] *= legacy_isa_factors(programs[r], positions, ids, rows, target, flops, moved)
                    out.us[r][at] = np.maximum(out.us[r][at], latency_floors(programs[r], at, j, memory_moved, target))
                if kernels_only:
                    n_analytical += int(analytical[j].sum()) * copies_of[r]
                    out.fallback[r][at[analytical[j]]] = True
        out.fallback_kernels += n_analytical
        if n_analytical:
            out.fallback_reasons["no_learned_model"] += n_analytical
        out.estimator_label = ", ".join(sorted(set(labels.tolist())) + ([in_step[1]] if in_step else []))
        out.spec_rows = predicted

    scale_cache: dict[str, float] = {}
    for r, i, recorded in no_spec:
        prog = programs[r]
        if recorded is not None and prog.kind[i] == COLLECTIVE:
            out.us[r][i] = recorded  # a collective nothing describes: its recorded time (network, not HBM)
            continue
        if recorded is not None:
            if prog.hardware not in scale_cache:
                scale_cache[prog.hardware] = _bandwidth_ratio(prog.hardware, target)
            out.us[r][i] = recorded * scale_cache[prog.hardware]
            reason = "no_spec_scaled_measurement"
        else:
            out.us[r][i] = LAUNCH_FLOOR_US
            reason = "no_spec_launch_floor"
        if prog.kind[i] == KERNEL:
            out.fallback_kernels += copies_of[r]
            out.fallback[r][i] = True
            out.fallback_reasons[reason] += copies_of[r]
    return out


def _in_step_scale(rows: list[dict[str, Any]], target: HardwareSpec,
                   estimator: KernelEstimator) -> tuple[np.ndarray, str] | None:
    """Per row, the in-step factor of its family on ``target`` (:mod:`emulate.sim.instep`; ``STEPCAST_INSTEP``),
    and the line that names it; None when the calibration is off or ``target`` has no in-step rows."""
    from stepcast.emulate.sim import instep
    from stepcast.emulate import config

    if not config.INSTEP_CALIBRATION:
        return None
    fitted = instep.cached_factors(target.id, estimator, config.INSTEP_EXCLUDE_MODELS)
    if not fitted:
        return None
    scale = np.array([fitted.get(row.get("family"), 1.0) for row in rows], dtype=np.float64)
    return scale, instep.describe(target.id, fitted, config.INSTEP_EXCLUDE_MODELS)


def _conv_table(estimator: KernelEstimator) -> Any:
    """The convolution-family table of the estimator's bundle (or of the one a lazy wrapper has loaded), or None."""
    table = getattr(estimator, "conv_families", None)
    return table if table is not None else getattr(getattr(estimator, "model", None), "conv_families", None)


def conv_family_factors(prog: RankProgram, positions: list[int], table: Any) -> np.ndarray:
    """Per kernel position, the factor of its convolution call's cuDNN kernel family
    (:class:`estimator.conv_families.ConvFamilies`); 1 for every kernel that is not a convolution timed as a GEMM
    (depthwise calls are timed by their bytes and keep theirs), or not a forward (:func:`corrects`)."""
    from stepcast.estimator.conv_families import call_kernels, corrects

    factors = np.ones(len(positions), dtype=np.float64)
    events, ops = prog.events, prog.events.field("op")
    conv_ops = {op for op in {ops[i] for i in positions} if corrects(op)}
    if not conv_ops:
        return factors
    specs, names, parts = events.field("spec"), events.field("name"), events.field("op_part")
    kernel = prog.kind_array == KERNEL
    for k, i in enumerate(positions):
        spec = specs[i]
        if ops[i] not in conv_ops or not isinstance(spec, dict) or spec.get("family") != "gemm":
            continue
        factors[k] = table.factor_of(names[n] for n in call_kernels(i, kernel, parts))
    return factors


def legacy_isa_factors(prog: RankProgram, positions: list[int], ids: list[int], rows: list[dict[str, Any]],
                       target: HardwareSpec, flops: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """Per kernel position, the factor on the predicted time of an attention kernel built for an older SM generation
    than the target's (:mod:`estimator.legacy_isa`: FlashAttention-2 on Hopper or Blackwell); 1 for every other
    kernel. ``flops``, ``moved``: per row, its attention work (:func:`row_work`)."""
    from stepcast.estimator.legacy_isa import kernel_generation, time_factor

    factors = np.ones(len(positions), dtype=np.float64)
    names = prog.events.field("name")
    for k, (i, j) in enumerate(zip(positions, ids)):
        row = rows[j]
        if row.get("family") != "attention":
            continue
        cc = kernel_generation(names[i])
        if cc is None:
            continue
        factors[k] = float(time_factor(flops[j:j + 1], moved[j:j + 1], cc, target, str(row.get("dtype")))[0])
    return factors


FILL_SHARE = 0.5    # a kernel whose blocks can take more than half the GPU's block slots leaves no room for another


def fills_gpu(prog: RankProgram, kernels: list[int], target: HardwareSpec | None) -> np.ndarray:
    """True on each of ``kernels`` (positions of kernels whose duration is predicted) whose blocks take more than
    :data:`FILL_SHARE` of the GPU's block slots: SMs x the blocks one SM holds at once, by its threads and shared
    memory (a Hopper GEMM of 128 blocks with 226 KB of shared memory each holds 128 of 132 SMs; an elementwise
    kernel of 128 blocks of 128 threads, 6 % of the slots). An estimator times a kernel alone on the GPU; two such
    kernels on different streams cannot both have the GPU, so the engine shares it between them. Kernels with a
    recorded duration are left out: a real run's durations already include the sharing. The others overlap as
    they are."""
    out = np.zeros(prog.n_events, dtype=bool)
    if target is None or not kernels:
        return out
    sms = target.sm_count
    threads_per_sm = target.max_threads_per_sm
    smem_per_sm = int((target.shared_memory_per_sm_kib or 0) * 1024)
    events = prog.events
    for i, grid, block, shmem in zip(kernels, map(events.field("grid").__getitem__, kernels),
                                     map(events.field("block").__getitem__, kernels),
                                     map(events.field("shmem").__getitem__, kernels)):
        if not grid:
            continue
        per_sm = threads_per_sm // max(math.prod(int(b) for b in block), 1) if block else threads_per_sm
        if shmem and smem_per_sm:
            per_sm = min(per_sm, smem_per_sm // int(shmem))
        out[i] = math.prod(int(g) for g in grid) > FILL_SHARE * sms * max(per_sm, 1)
    return out


def row_work(rows: list[dict[str, Any]], families: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the FLOPs and bytes a kernel of one of ``families`` does (:mod:`estimator.workload`, one frame a
    family); 0 for the rows of other families."""
    from stepcast.estimator.workload import work

    flops, moved = np.zeros(len(rows), dtype=np.float64), np.zeros(len(rows), dtype=np.float64)
    of_row = np.array([row.get("family") for row in rows], dtype=object)
    for family in families:
        at = np.flatnonzero(of_row == family)
        if len(at):
            done = work(family, pd.DataFrame.from_records([rows[j] for j in at]))
            flops[at], moved[at] = done.flops, done.bytes
    return flops, moved


def latency_floors(prog: RankProgram, at: np.ndarray, ids: np.ndarray, moved: np.ndarray,
                   target: HardwareSpec) -> np.ndarray:
    """Per kernel position ``at`` (of rows ``ids``; ``moved``: per row, a memory kernel's bytes, :func:`row_work`
    of :data:`estimator.memory_latency.MEMORY_FAMILIES`), the least time its launch can move its row's bytes in
    (:func:`estimator.memory_latency.latency_bound_us`: threads too few to cover the DRAM latency); 0 for the
    kernels it does not bound, those of no recorded launch or no spec of their own (a row the simulator made of
    their op's tensors is an estimate of the call's bytes), and the first kernel of an op call whose further kernels
    are ``op_part`` (its row's bytes are the whole call's, its launch one of several)."""
    bytes_ = moved[ids]
    threads, accesses = np.zeros(len(at), dtype=np.float64), np.zeros(len(at), dtype=np.float64)
    over_l2 = np.flatnonzero(bytes_ > target.l2_cache_mib * 2**20).tolist()
    names = prog.events.field("name") if over_l2 else []
    heads: set[int] | None = None               # found once, when a listed kernel needs them
    for k in over_l2:
        i = int(at[k])
        listed = accesses_in_flight(names[i])
        if not listed:
            continue
        heads = _op_call_heads(prog) if heads is None else heads
        ev = prog.events[i]
        grid, block = ev.get("grid"), ev.get("block")
        if grid and block and ev.get("spec") and i not in heads:
            threads[k] = math.prod(int(g) for g in grid) * math.prod(int(b) for b in block)
            accesses[k] = listed
    return latency_bound_us(bytes_, threads, accesses, target)


def _op_call_heads(prog: RankProgram) -> set[int]:
    """Positions of the kernels followed by ``op_part`` kernels of their op call: the last kernel with a spec on
    the same host thread before each ``op_part`` kernel."""
    parts = prog.events.field("op_part")
    if not any(parts):
        return set()
    specs, threads = prog.events.field("spec"), prog.events.field("thread")
    last: dict[Any, int] = {}
    heads: set[int] = set()
    for i in np.flatnonzero(prog.kind_array == KERNEL).tolist():
        if parts[i]:
            if threads[i] in last:
                heads.add(last[threads[i]])
        elif specs[i]:
            last[threads[i]] = i
    return heads


def link_copy_bandwidth(gbps: float | None) -> float:
    """Bytes/s of a copy-engine copy across a link rated ``gbps`` one way (PCIe 16 GB/s when the catalog has no
    figure): :data:`LINK_COPY_EFFICIENCY` of it."""
    return (gbps or 16.0) * 1e9 * LINK_COPY_EFFICIENCY


def peer_copy_bandwidth(hw: HardwareSpec) -> float:
    """Bytes/s of a copy between two GPUs of a node (torch's symmetric memory moves async TP's shards so, with the
    copy engines): what a copy moves across the GPU's one-way NVLink bandwidth (catalog), else PCIe's. A copy reads
    one GPU's memory and writes the other's, each at a fraction of its HBM bandwidth, so the link is what limits
    it."""
    return min(link_copy_bandwidth(hw.nvlink_bandwidth_gbps or hw.pcie_bandwidth_gbps), hw.memory_bandwidth / 2.0)


def copy_duration_us(ev: dict[str, Any], code: int, hw: HardwareSpec, source: str, i: int) -> float:
    """Bandwidth model of a memcpy or memset (see the module docstring)."""
    try:
        nbytes = float(ev["bytes"])
    except (KeyError, TypeError, ValueError):
        raise TraceFormatError(f"{source}: events[{i}].bytes: expected a byte count, found {ev.get('bytes')!r}") \
            from None
    if code == MEMSET:
        return COPY_LATENCY_US + nbytes / hw.memory_bandwidth * 1e6
    direction = ev.get("direction")
    if direction in ("h2d", "d2h"):
        bandwidth = link_copy_bandwidth(hw.pcie_bandwidth_gbps)
    elif direction == "d2d" and ev.get("peer"):
        bandwidth = peer_copy_bandwidth(hw)
    elif direction == "d2d":
        bandwidth = hw.memory_bandwidth / 2.0  # read and write
    elif direction == "h2h":
        bandwidth = HOST_COPY_BANDWIDTH
    else:
        raise TraceFormatError(f"{source}: events[{i}].direction: expected h2d, d2h, d2d or h2h, "
                               f"found {direction!r}")
    assert code in (MEMCPY, MEMCPY_BLOCKING)
    return COPY_LATENCY_US + nbytes / bandwidth * 1e6


def ranks_per_node_for(world_size: int, nodes: int, hardware: HardwareSpec | None = None) -> int:
    """Ranks on one NVLink domain, what a collective's ``ranks_per_node`` counts (members past it cross the network):
    the job spread evenly over ``nodes`` hosts, never more than a host of the target holds (``gpus_per_node`` in the
    catalog), times the hosts one NVLink fabric joins (``nvlink_domain_gpus``: one on an 8-GPU HGX board, the 18
    trays of an NVL72 rack). The one place the emulator derives it: capture (``emulate.cli``), replay and the scale
    benchmark all call it."""
    if nodes < 1:
        raise ValueError(f"nodes: expected at least 1, found {nodes}")
    per_host = max(1, math.ceil(world_size / nodes))
    return hardware.ranks_per_nvlink_domain(per_host) if hardware is not None else per_host


def _collective_spec(ev: dict[str, Any], ranks_per_node: int) -> dict[str, Any] | None:
    spec = ev.get("spec")
    ranks = int(ev.get("ranks") or (spec or {}).get("ranks") or 1)
    if spec:
        spec = dict(spec)
    else:
        op = COLLECTIVE_FAMILY_OP.get(ev.get("op"))
        if op is None or ev.get("bytes") is None:
            return None
        spec = {"family": "collective", "op": op, "bytes": int(ev["bytes"]), "ranks": ranks,
                "dtype": _canonical_dtype(ev.get("dtype"))}
    spec.setdefault("ranks", ranks)
    # a trace that knows its communicator's placement (the busiest node's members) keeps it: a 2-rank
    # data-parallel group of ranks 0 and 8 spans two nodes although 2 <= ranks per node
    placed = spec.get("ranks_per_node")
    spec["ranks_per_node"] = min(int(spec["ranks"]), ranks_per_node, int(placed) if placed else ranks_per_node)
    spec.setdefault("dtype", "bf16")
    return spec


def _canonical_dtype(dtype: Any) -> str:
    """A trace's collective dtype (NCCL or torch spelling) as a family dtype; bf16 when none was recorded."""
    if not dtype:
        return "bf16"
    text = str(dtype).lower()
    return tensor_dtype(text) or text


def _recorded_launches(events: EventTable) -> list[tuple[str, Any] | None]:
    """Per event, (kernel name, grid as a tuple) when it is a GEMM spec's launch of a kernel that
    :func:`estimator.kernel_config.parse_name` reads as a GEMM (its path is not "other": a convolution's layout
    transform or a library call's entry point is not); else None. Worked out once per distinct event shape (name,
    grid and spec are shape fields; ``parse_name`` caches each name), so a million launches cost one list."""
    other = PATHS.index("other")
    per_shape: list[tuple[str, Any] | None] = []
    for shape in events.shapes:
        spec, name, grid = shape.get("spec"), shape.get("name"), shape.get("grid")
        launch = None
        if isinstance(spec, dict) and spec.get("family") == "gemm" and isinstance(name, str) \
                and parse_name(name)[0] != other:
            launch = (name, tuple(grid) if isinstance(grid, list) else grid)
        per_shape.append(launch)
    return list(map(per_shape.__getitem__, events.shape_index.tolist()))


def _grid_text(grid: Any) -> str | None:
    """A trace's grid [x, y, z] as the "x,y,z" text ``estimator.kernel_config`` reads; None when it is not three
    integers (a library call records none)."""
    try:
        x, y, z = (int(v) for v in grid)
    except (TypeError, ValueError):
        return None
    return f"{x},{y},{z}"


def _row(spec: Any, hardware: str, source: str, i: int) -> dict[str, Any]:
    if not isinstance(spec, dict) or spec.get("family") not in FAMILIES:
        family = spec.get("family") if isinstance(spec, dict) else spec
        raise TraceFormatError(f"{source}: events[{i}].spec.family: expected one of {', '.join(FAMILIES)}, "
                               f"found {family!r}")
    missing = [c for c in FAMILIES[spec["family"]] if spec.get(c) is None]
    if missing:
        raise TraceFormatError(f"{source}: events[{i}].spec.{missing[0]}: missing (required for family "
                               f"'{spec['family']}')")
    row = dict(spec)
    row["hardware"] = hardware
    row.setdefault("dtype", "fp32")
    return row


def _bandwidth_ratio(source_hw: str, target: HardwareSpec) -> float:
    try:
        return lookup(source_hw).memory_bandwidth / target.memory_bandwidth
    except UnknownHardwareError:
        return 1.0
