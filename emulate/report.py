"""The prediction report: what ``stepcast run`` and ``replay`` print and write to ``--report``.

Fields::

    hardware, world_size, durations ("predicted" | "measured"), estimator,
    iteration_time_ms      median of the steady-state iterations of the slowest rank
    iterations_ms          per iteration index, the slowest rank's time (steady-state and warm-up alike)
    steady_iterations      which iteration indices of the slowest rank count as steady state
    determinism            {steady_iterations, spread, captured_host_ms, captured_host_spread, host_interference,
                           uncounted_host_ms} of the slowest rank: how many steady iterations the median is over
                           and the spread ((max - min) / median) of their simulated times; then, for a capture,
                           what its host measured: the median steady iteration's recorded host CPU time (gaps
                           only), the spread of that over the steady iterations, and the share of it the per-call
                           minimum discarded as interference (emulate.sim.host.CapturedHost). The simulated steady
                           iterations share one set of host gaps, so a host-bound rank's ``spread`` is near 0
                           however disturbed the capture was: those two say how much to trust it (null for real
                           traces). uncounted_host_ms: under the counted model, the host time of one steady
                           iteration that no count saw and a clock reading gave (emulate.sim.host.uncounted), the
                           part of the answer that may move with the emulating machine (null when not counted)
    host_model             how host gaps were timed: "counted" (the work a capture counted, at the reference
                           costs), "measured" (the capture's clock) or "recorded" (real traces' gaps); with
                           "counted" the captured-host figures above describe the capture, not the answer
    reference_host         under "counted", the host --host-speed 1 stands for (emulate/host_call_costs.json
                           reference_host: the median of KernelBench's GPU servers); null otherwise
    warnings               what the simulation had to assume (too few iterations, ranks not aligned ...)
    launch_queue_depth, ranks_aligned   the host model's settings (emulate.config, emulate.sim.host)
    peak_memory_bytes      largest over ranks (device memory from the traces' malloc/free; null without any)
    breakdown_ms           {compute, communication, exposed_communication, host_bound, idle} of the slowest rank
    mfu                    model FLOP utilisation, or null when no kernel has a GEMM/attention spec
    per_rank               [{rank, iteration_time_ms, iterations_ms, device_busy_ms, host_ms,
                             waiting_on_peers_ms, peak_memory_bytes, breakdown_ms,
                             measured_iteration_time_ms (when the trace recorded it)}]
                           device_busy_ms / host_ms: per iteration, the time some device op ran and the host's own
                           work (its gaps, without waits); waiting_on_peers_ms: the steady iteration's time a
                           collective had reached its stream and waited for other ranks (= breakdown idle)
    fallback_kernels       kernels timed without a learned model (analytical estimate or launch floor), over the whole
                           capture (warm-up, autotuning's benchmark launches and the steady iterations alike)
    fallback_kernels_steady  those of them inside the steady iterations (every rank's, summed over its steady
                           iterations): the kernels without a model that the reported iteration time is made of
    fallback_reasons       those kernels by reason
    predicted_event_timings  what the script's event timings (cudaEventElapsedTime, as autotuners time their
                           candidates) answered during the capture (emulate/event_timing.py): {queries, predicted,
                           nominal, callers (who asked, e.g. triton.autotune, inductor.select_algorithm), choices
                           (the configs / algorithms autotuners kept on predicted times)}, summed over ranks; null
                           when no rank timed events (or the traces were not captured here)

Iterations of a rank are device-inclusive: the boundary at an ``iteration`` marker is the later of the marker's
host time and the end of all device work the host issued before it, so an iteration is never shorter than its
device work, however far the host ran ahead (a host that never synchronises is throttled by the launch queue
in the simulation too). The last iteration ends at a closing marker (``end: true``). Without a closing marker, the
stretch after the last marker is not an iteration (it runs into whatever the script does after training) unless
it is the only one; then it ends when the rank's host and devices are done. A trace without markers is one
iteration. Steady state (:func:`emulate.sim.program.steady_iterations`): among all iterations but the first
(warm-up), those that repeat the most common event sequence, so that a second iteration still growing the
allocator or autotuning is left out; when no sequence repeats, all but the first. Of those, leading iterations more
than 10 % slower than their median are left out too (:func:`settled`: still warming up with the same events).

Breakdown, per rank, over its steady-state window W (first steady iteration's start to last one's end). Device time
in W is partitioned into four disjoint parts:

- ``compute``: some kernel, memcpy or memset runs on some stream;
- ``exposed_communication``: a collective runs and nothing of the above does;
- ``idle``: nothing runs, and a collective has reached its stream but waits for peer ranks (load imbalance);
- ``host_bound``: nothing runs and nothing waits: the device waits for the host to issue work.

and ``communication`` is the time some collective runs (overlapped or not; not part of the sum). Each term is its
share of W times the rank's iteration time, so that compute + exposed_communication + idle + host_bound equals
the reported iteration time exactly.

MFU = (sum over ranks of model FLOPs per iteration / the kernel's dtype peak) / (world size x iteration time):
the fraction of peak the job would need to run its GEMM and attention FLOPs in the predicted time. FLOPs come
from the kernels' specs: 2mnk per GEMM (x batch); attention 4 b h s_q s_kv d forward (halved when causal), 2.5x
that backward.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from stepcast.emulate.config import MIN_ITERATIONS_FOR_STEADY_STATE
from stepcast.emulate.sim.contention import merge_spans
from stepcast.emulate.sim.copies import twin_indices
from stepcast.emulate.sim.engine import RankTimeline
from stepcast.emulate.sim.host import CapturedHost, captured_host
from stepcast.profiling.atomic import atomic_text
from stepcast.emulate.sim.program import COLLECTIVE, KERNEL, RankProgram, iteration_bounds, steady_iterations
from stepcast.profiling.hardware import HardwareSpec

BREAKDOWN_TERMS = ("compute", "communication", "exposed_communication", "host_bound", "idle")
WARMUP_MIN_ITERATIONS = 2  # with at least this many iterations, the first one is warm-up


def build_report(result) -> dict[str, Any]:
    """The report dict of a :class:`emulate.simulate.SimulationResult` (fields: module docstring)."""
    hw: HardwareSpec | None = result.hardware
    per_rank = []
    ideal_per_iteration = 0.0
    twin = twin_indices(result.programs)
    done: dict[int, tuple[dict[str, Any], float]] = {}   # twin index -> its entry and ideal time per iteration
    for r, (prog, tl) in enumerate(zip(result.programs, result.timelines)):
        shared = done.get(twin[r])
        if shared is not None and result.timelines[twin[r]] is tl:
            # a copy sharing its twin's program and timeline (emulate.sim.copies): the twin's figures
            per_rank.append(_as_rank(shared[0], prog.rank))
            ideal_per_iteration += shared[1]
            continue
        spans = iteration_spans(prog, tl)
        times = spans[:, 1] - spans[:, 0]
        steady = settled(steady_iterations(prog), times)
        it_us = float(statistics.median(times[steady])) if len(steady) else 0.0
        window = (float(spans[steady[0], 0]), float(spans[steady[-1], 1])) if len(steady) else (0.0, 0.0)
        parts = breakdown_us(prog, tl, window)
        width = window[1] - window[0]
        scale = it_us / width if width > 0 else 0.0
        ideal = ideal_compute_us(prog, tl, window, hw) if hw is not None else 0.0
        ideal = ideal / len(steady) if len(steady) else 0.0
        ideal_per_iteration += ideal
        busy, host = iteration_activity(prog, tl, spans)
        breakdown = {k: v * scale / 1e3 for k, v in parts.items()}
        entry: dict[str, Any] = {
            "rank": prog.rank,
            "iteration_time_ms": it_us / 1e3,
            "steady_iterations": steady.tolist(),
            "iterations_ms": (times / 1e3).tolist(),
            "device_busy_ms": (busy / 1e3).tolist(),
            "host_ms": (host / 1e3).tolist(),
            "waiting_on_peers_ms": breakdown["idle"],
            "peak_memory_bytes": prog.peak_memory_bytes,
            "breakdown_ms": breakdown,
        }
        measured = prog.meta.get("measured_iterations_us")
        if measured:
            m = np.asarray(measured, dtype=np.float64)
            ms = steady_indices(len(m))
            entry["measured_iteration_time_ms"] = float(statistics.median(m[ms])) / 1e3
            entry["measured_iterations_ms"] = (m / 1e3).tolist()
        per_rank.append(entry)
        if twin[r] == r:
            done[r] = (entry, ideal)

    slowest_index = max(range(len(per_rank)), key=lambda r: per_rank[r]["iteration_time_ms"])
    slowest = per_rank[slowest_index]
    n_it = min(len(e["iterations_ms"]) for e in per_rank)
    iteration_ms = slowest["iteration_time_ms"]
    flops_time_ms = ideal_per_iteration / 1e3
    mfu = flops_time_ms / (len(per_rank) * iteration_ms) if iteration_ms > 0 and flops_time_ms > 0 else None
    times = result.durations
    steady_slowest = np.asarray(slowest["iterations_ms"])[slowest["steady_iterations"]]
    spread = float((steady_slowest.max() - steady_slowest.min()) / np.median(steady_slowest)) \
        if len(steady_slowest) and np.median(steady_slowest) > 0 else 0.0
    warnings = list(result.warnings or [])
    if n_it < MIN_ITERATIONS_FOR_STEADY_STATE:
        warnings.append(f"only {n_it} iteration(s): no steady state to measure (the first iteration is warm-up); "
                        f"run at least {MIN_ITERATIONS_FOR_STEADY_STATE} (mark them with prof.step(), optimizer "
                        "steps or backward passes)")
    if all(len(p.iteration_index) <= 1 and p.end_marker is None for p in result.programs):
        warnings.append("no iteration marks (profiler steps, optimizer steps or backward passes): the whole run "
                        "was taken as one iteration")
    matched = getattr(result, "collectives_matched", None)   # a sparse run's: its groups are its twins'
    return {
        "hardware": hw.id if hw is not None else prog_hardware(result.programs),
        "world_size": result.world_size,
        "ranks_simulated": len(per_rank),
        "nodes": result.nodes,
        "durations": result.mode,
        "estimator": times.estimator_label,
        "host_speed": result.host_speed,
        "host_model": result.host_model,
        "reference_host": getattr(result, "reference_host", None),
        "iteration_time_ms": iteration_ms,
        "iterations_ms": [max(e["iterations_ms"][j] for e in per_rank) for j in range(n_it)],
        "steady_iterations": slowest["steady_iterations"],
        "determinism": determinism_note(len(steady_slowest), spread, captured_host(result.programs)[slowest_index],
                                        (result.uncounted_ms or [None] * len(per_rank))[slowest_index]),
        "warnings": warnings,
        "launch_queue_depth": result.queue_depth,
        "ranks_aligned": result.aligned,
        "peak_memory_bytes": max((e["peak_memory_bytes"] for e in per_rank if e["peak_memory_bytes"] is not None),
                                 default=None),
        "breakdown_ms": dict(slowest["breakdown_ms"]),
        "mfu": mfu,
        "per_rank": per_rank,
        "fallback_kernels": times.fallback_kernels,
        "fallback_kernels_steady": steady_fallback_kernels(result.programs, times.fallback),
        "fallback_reasons": dict(times.fallback_reasons),
        "collectives_matched": len(result.groups) if matched is None else matched,
        "predicted_event_timings": predicted_event_timings(result.programs),
    }


#: a leading steady iteration more than this many times the steady iterations' median is still warming up
WARMING = 1.1


def settled(steady: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The steady iterations (``steady``: indices into ``times``) less leading ones slower than :data:`WARMING` x
    their median, keeping at least two. An iteration that repeats the common event sequence can still be warming up
    (host work read from the clock, a first NCCL or autotuning wait on another rank); the median iteration time
    shrugs it off, but a breakdown over a window that holds it takes in its waits (torchtitan's MoE with Float8
    experts: 17.9 ms of idle over iterations 1-3, none over 2-3)."""
    if len(steady) < 3:
        return steady
    median = float(np.median(times[steady]))
    k = 0
    while len(steady) - k > 2 and times[steady[k]] > WARMING * median:
        k += 1
    return steady[k:]


def steady_fallback_kernels(programs: list[RankProgram], fallback: list[np.ndarray]) -> int | None:
    """Kernels without a learned model inside the steady iterations, summed over ranks (a sparse run's copies count
    as their twins, as in ``fallback_kernels``); None when the durations carry no per-event marks."""
    if len(fallback) != len(programs):
        return None
    total = 0
    for prog, marks in zip(programs, fallback):
        bounds = iteration_bounds(prog)
        total += sum(int(marks[bounds[k][0]:bounds[k][1]].sum()) for k in steady_iterations(prog).tolist())
    return total


def predicted_event_timings(programs: list[RankProgram]) -> dict[str, Any] | None:
    """The capture's event-timing summaries (``rank<k>.log.events.json`` beside each rank's trace, written by
    emulate/event_timing.py) summed over ranks; choices listed once each. None when there is none."""
    total: dict[str, Any] = {"queries": 0, "predicted": 0, "nominal": 0, "callers": {}, "choices": []}
    seen: set[str] = set()
    found = False
    for prog in programs:
        trace = Path(str(prog.source))
        if not trace.is_file():  # an in-memory trace: no capture folder
            continue
        path = trace.parent / f"rank{prog.rank}.log.events.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found = True
        for key in ("queries", "predicted", "nominal"):
            total[key] += int(doc.get(key) or 0)
        for caller, n in (doc.get("callers") or {}).items():
            total["callers"][caller] = total["callers"].get(caller, 0) + int(n)
        for choice in doc.get("choices") or []:
            key = json.dumps({k: v for k, v in choice.items() if k != "predicted_ms"}, sort_keys=True)
            if key not in seen:
                seen.add(key)
                total["choices"].append(choice)
        if doc.get("failure") and "failure" not in total:
            total["failure"] = doc["failure"]
    return total if found else None


def _as_rank(entry: dict[str, Any], rank: int) -> dict[str, Any]:
    """A copy of a per-rank entry for another rank (lists and dicts copied: entries never share objects)."""
    out = {k: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v for k, v in entry.items()}
    out["rank"] = rank
    return out


def determinism_note(steady: int, spread: float, host: CapturedHost | None,
                     uncounted_ms: float | None = None) -> dict[str, Any]:
    """The report's ``determinism`` field (module docstring)."""
    return {"steady_iterations": int(steady), "spread": spread,
            "captured_host_ms": host.recorded_median_ms if host else None,
            "captured_host_spread": host.recorded_spread if host else None,
            "host_interference": host.interference if host else None,
            "uncounted_host_ms": uncounted_ms}


def prog_hardware(programs: list[RankProgram]) -> str:
    """The traces' own hardware label (used when no catalogued target was given)."""
    return ", ".join(sorted({p.hardware for p in programs}))


def steady_indices(n: int) -> np.ndarray:
    """Iteration indices that count as steady state: all but the first when there are at least two."""
    return np.arange(1 if n >= WARMUP_MIN_ITERATIONS else 0, n)


def iteration_spans(prog: RankProgram, tl: RankTimeline) -> np.ndarray:
    """(start, end) in simulated us of each iteration of a rank (:func:`emulate.sim.program.iteration_bounds`),
    with device-inclusive boundaries (module docstring)."""
    bounds = iteration_bounds(prog)
    if bounds[-1][1] == prog.n_events and (prog.end_marker is None):   # the one open stretch: ends with the rank
        start = iteration_boundaries(prog, tl, np.array([bounds[0][0]]))[:1] if len(prog.iteration_index) \
            else np.array([0.0])
        return np.column_stack([start, [tl.end_time]])
    positions = np.array([a for a, _ in bounds] + [bounds[-1][1]])
    marks = iteration_boundaries(prog, tl, positions)
    return np.column_stack([marks[:-1], marks[1:]])


def iteration_boundaries(prog: RankProgram, tl: RankTimeline, positions: np.ndarray) -> np.ndarray:
    """At each marker position: the later of its host time and the end of every device op issued before it."""
    host = tl.host_of(positions)
    device = prog.device_index
    if not len(device):
        return host
    done = np.maximum.accumulate(tl.end[device])
    before = np.searchsorted(device, positions) - 1
    return np.maximum(host, np.where(before >= 0, done[np.maximum(before, 0)], -np.inf))


def iteration_activity(prog: RankProgram, tl: RankTimeline, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: device busy time (some device op runs) and host work (the gaps of the events the host issued
    in it, waits excluded), in us."""
    device = prog.device_index
    s, e = tl.start[device], tl.end[device]
    busy = np.array([union_length(np.clip(s, a, b), np.clip(e, a, b)) for a, b in spans])
    gaps = tl.gap_us if tl.gap_us is not None else np.asarray(prog.gap_ns, dtype=np.float64) * 1e-3
    cumulative = np.concatenate(([0.0], np.cumsum(gaps)))
    bounds = np.array(iteration_bounds(prog))
    host = cumulative[np.minimum(bounds[:, 1] + 1, len(gaps))] - cumulative[bounds[:, 0] + 1]
    return busy, host


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by the intervals [starts, ends) (their union, :func:`emulate.sim.contention.merge_spans`)."""
    keep = ends > starts
    if not keep.any():
        return 0.0
    starts, ends = merge_spans(starts[keep], ends[keep])
    return float((ends - starts).sum())


def breakdown_us(prog: RankProgram, tl: RankTimeline, window: tuple[float, float]) -> dict[str, float]:
    """The breakdown terms in us over ``window`` (unscaled; module docstring)."""
    w0, w1 = window
    if w1 <= w0:
        return {k: 0.0 for k in BREAKDOWN_TERMS}
    kinds = np.asarray(prog.kind, dtype=np.int8)[prog.device_index]
    s = np.clip(tl.start[prog.device_index], w0, w1)
    e = np.clip(tl.end[prog.device_index], w0, w1)
    comm = kinds == COLLECTIVE
    compute = union_length(s[~comm], e[~comm])
    busy = union_length(s, e)
    communication = union_length(s[comm], e[comm])
    if tl.arrival:
        pos = np.fromiter(tl.arrival.keys(), dtype=np.int64)
        a = np.clip(np.fromiter(tl.arrival.values(), dtype=np.float64), w0, w1)
        b = np.clip(tl.start[pos], w0, w1)
        occupied = union_length(np.concatenate([s, a]), np.concatenate([e, b]))
    else:
        occupied = busy
    return {
        "compute": compute,
        "communication": communication,
        "exposed_communication": busy - compute,
        "host_bound": (w1 - w0) - occupied,
        "idle": occupied - busy,
    }


def model_flops(spec: dict[str, Any]) -> float:
    """FLOPs a kernel contributes to MFU (GEMM and attention only, by the usual convention)."""
    family = spec.get("family")
    try:
        if family == "gemm":
            return 2.0 * spec["m"] * spec["n"] * spec["k"] * spec.get("batch", 1)
        if family == "attention":
            fwd = 4.0 * spec["batch"] * spec["heads_q"] * spec["seq_q"] * spec["seq_kv"] * spec["head_dim"]
            fwd *= 0.5 if spec.get("causal") else 1.0
            return fwd * (2.5 if spec.get("pass") == "bwd" else 1.0)
    except (KeyError, TypeError):
        return 0.0
    return 0.0


def ideal_compute_us(prog: RankProgram, tl: RankTimeline, window: tuple[float, float], hw: HardwareSpec) -> float:
    """Sum over kernels starting inside ``window`` of FLOPs / peak FLOP/s of their dtype (us)."""
    total = 0.0
    w0, w1 = window
    start = tl.start
    kind = prog.kind
    for i in prog.device_index.tolist():
        if kind[i] != KERNEL or not (w0 <= start[i] < w1):
            continue
        spec = prog.events[i].get("spec")
        if spec:
            flops = model_flops(spec)
            if flops:
                total += flops / hw.peak_flops(str(spec.get("dtype", "fp32"))) * 1e6
    return total


def write_report(report: dict[str, Any], path: Path) -> Path:
    """Write the report JSON atomically (temporary file in the same folder, then rename)."""
    with atomic_text(path) as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    return Path(path)


def print_summary(report: dict[str, Any], console=None) -> None:
    """The summary table (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"Predicted iteration on {report['hardware']} ({report['durations']} durations)",
                  show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    table.add_row("world size (ranks simulated)", f"{report['world_size']} ({report['ranks_simulated']})")
    table.add_row("iteration time", f"{report['iteration_time_ms']:.3f} ms")
    measured = [r["measured_iteration_time_ms"] for r in report["per_rank"] if "measured_iteration_time_ms" in r]
    if measured:
        m = max(measured)
        err = (report["iteration_time_ms"] - m) / m * 100 if m else float("nan")
        table.add_row("measured iteration time", f"{m:.3f} ms ({err:+.1f}%)")
    table.add_row("iterations", ", ".join(f"{t:.2f}" for t in report["iterations_ms"][:8])
                  + (" ..." if len(report["iterations_ms"]) > 8 else "") + " ms")
    peak = report["peak_memory_bytes"]
    table.add_row("peak memory", "n/a (no allocations traced)" if peak is None else f"{peak / 2**30:.2f} GiB")
    for term, value in report["breakdown_ms"].items():
        table.add_row(f"  {term.replace('_', ' ')}", f"{value:.3f} ms")
    table.add_row("MFU", "n/a" if report["mfu"] is None else f"{report['mfu'] * 100:.1f}%")
    steady = report.get("fallback_kernels_steady")
    table.add_row("kernels without a learned model", str(report["fallback_kernels"])
                  + ("" if steady is None else f" ({steady} in the steady iterations)"))
    if report.get("estimator"):
        table.add_row("estimator", report["estimator"])
    routing = report.get("moe_routing")
    if routing:
        busiest = max(routing.get("routers") or [], key=lambda r: r["experts"], default=None)
        table.add_row("MoE routing", f"{routing['routing']}" + ("" if routing.get("stated") else " (not stated)")
                      + ("" if busiest is None else f"; busiest expert {busiest['busiest_expert_routes']} routes "
                         f"of a mean {busiest['mean_expert_routes']:.0f} ({busiest['tokens']} tokens, top-"
                         f"{busiest['topk']} of {busiest['experts']})"))
    events = report.get("predicted_event_timings")
    if events:
        tuned = Counter(c.get("tuner", "?") for c in events["choices"])
        table.add_row("event timings predicted", f"{events['predicted']} of {events['queries']}"
                      + "".join(f"; {n} {tuner} choice(s)" for tuner, n in tuned.items()))
    det = report.get("determinism")
    if det:
        value = f"{det['steady_iterations']} ({det['spread'] * 100:.1f}%)"
        if report.get("host_model") == "counted":
            value += "; host time: counted work"
            if (det.get("uncounted_host_ms") or 0.0) >= 0.005:
                value += f" + {det['uncounted_host_ms']:.2f} ms read from the clock"
            value += f", at {report.get('host_speed') or 1.0:g}x the reference host"
        elif det.get("captured_host_ms") is not None:
            value += (f"; captured host: spread {det['captured_host_spread'] * 100:.0f}%, interference "
                      f"{det['host_interference'] * 100:.0f}%")
        table.add_row("steady iterations (spread)", value)
    console.print(table)
    for line in report.get("warnings") or []:
        console.print(f"[yellow]warning:[/yellow] {line}")
