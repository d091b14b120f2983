"""The host side of the model: how much host time each event costs, where each rank's clock starts, and where
ranks are aligned after warm-up. Everything here is settled before the simulation runs.

- **Counted host time (the default).** A capture also counts, before each call, the framework work its thread did
  since the previous one: aten op entries, autograd node evaluations and Python function calls (``host_ops``,
  ``host_nodes``, ``host_py``; torch's RecordFunction, the hook its profiler uses, and a Python profile function). The
  counted model times each gap as ``call + op * host_ops + node * host_nodes + py * host_py`` with costs fitted once
  on a reference machine (:mod:`emulate.host_costs`, ``work_ns``): the same script then has the same host time
  whatever else runs on the emulating machine, which a clock cannot give (a loaded 2-core VM read up to 2x more CPU
  time for the same calls). What counting cannot see is host work inside one call (a numpy or tokenizer call over a
  large batch, a CPU-side computation, cuDNN choosing an engine). Such work shows as a gap that reads far above its
  counted time, but a reading depends on how fast the emulating machine ran at that moment (a 2-core VM here ran the
  same ordinary gaps 3-8x above their counted time, from one capture to the next and from one iteration to the next).
  So each reading is first brought to the reference machine's speed: divided by its iteration's slowdown, the median
  ratio of measured to counted time over that iteration's gaps weighted by their counted time
  (:func:`capture_slowdown`; the counted costs were fitted so that this ratio was 1 on the reference machine, and
  counting Python calls moved it by under 5 %), then its steady-state minimum is taken (below). A capture whose
  counted time sits mostly in gaps that also hold uncounted work cannot tell its speed that way, and its uncounted
  work is then under-read. What such a reading shows beyond its counted time is uncounted work, in full where the
  reading exceeds ``UNCOUNTED_RATIO[1]`` times its counted time by ``UNCOUNTED_NS[1]``, not at all below
  ``UNCOUNTED_RATIO[0]`` or ``UNCOUNTED_NS[0]``, in a linear share between (:func:`uncounted`): ordinary gaps read up
  to about 7x their counted time at the reference speed (one cost per op tells a cheap op from an expensive one only
  on average; ``python -m stepcast.emulate.host_costs`` prints how far the counted time of each reference workload is
  from its measured one), and a reading near a line then moves the answer by little. This is the one part of a counted
  answer that depends on the emulating machine: one whose ordinary gaps read higher than this VM's may cross a line
  where it does not (a CI machine read 0.08 ms of the README example's 6.7 ms step where this VM read none).
  ``STEPCAST_HOST_MODEL=measured`` (:data:`emulate.config.HOST_MODEL`) times gaps with the capture's clock instead, as
  below; traces without counts (real profiler traces, older captures, synthetic traces) always use their gaps.
- **Measured host gaps.** A captured gap is the capturing thread's CPU time between two intercepted calls (the emulated
  driver's clock), so being descheduled by another process costs nothing. CPU time still picks up
  interference (page faults, cache and TLB misses caused by other processes, allocator first touches): the steady
  iterations of a capture repeat the same calls, and so do SPMD ranks, so each call's gap is taken as its smallest
  over the steady iterations of every rank that match event for event (the cost of the work itself; more is
  interference, as ``timeit`` takes the best of its repeats). The emulated driver answers each call at once, so the cost
  of the real runtime call (:mod:`emulate.host_costs`) is added per event kind; the nodes of a CUDA graph launch
  (``graph_node``) after the first cost nothing, since one call launched them all. Real profiler traces hold those
  costs in their gaps (``meta.call_costs_in_gaps``), and their gaps are what happened, so neither applies to them. All
  of it is then divided by the host-speed factor (:data:`emulate.config.HOST_SPEED`).
- **What the minimum cannot remove.** Processes that share the emulating machine's caches and memory slow cache-heavy
  host code (PyTorch's dispatcher, FSDP's hooks) for as long as they run, and in CPU time too: a descheduled thread
  resumes with cold caches (on the 2-core VM, a gap right after a resume ran at a median 1.4x its minimum, falling to
  1.06x after 2-3 ms of CPU). When that lasts the whole capture, every call is slower by about one factor and no
  choice among its samples can tell (FSDP2 example at load 10-30: per-call minima of six captures 6.59-8.02 ms, 20 %;
  divided by each capture's median ratio to the cross-capture minimum, 6.51-6.92 ms). The report says how disturbed a
  capture was (:class:`CapturedHost`: the recorded steady host time, its spread, the share the minimum discarded); a
  host-bound prediction is as stable as the machine's speed while it captured.
- **Start offsets.** Ranks of one node replayed from real profiler traces keep the recorded offsets between their
  first events (``meta.clock_origin_us``: Kineto clocks of one node agree): an early rank's first collective then
  waits for the late ones, as it did.
- **Alignment after warm-up.** Captured ranks start together but their warm-up host time differs (one-time set-up,
  compilation, cache misses): that skew is an artefact of capture, not of the job. At the first steady-state
  iteration boundary every rank waits for its own device work and for every other rank (a barrier), so the skew
  never shows up as steady-state idle time. Replays of real traces are not aligned: their skew is real.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stepcast.emulate.host_costs import WorkCosts
from stepcast.emulate.sim.copies import twin_indices
from stepcast.emulate.sim.program import ITERATION, KIND_CODES, MEMCPY_BLOCKING, RankProgram, iteration_bounds, \
    steady_iterations

#: meta fields of the trace format (emulate/trace.py) read here
CLOCK_ORIGIN = "clock_origin_us"
COSTS_IN_GAPS = "call_costs_in_gaps"
HOST_WORK = "host_work"


@dataclass(frozen=True)
class RankSetup:
    """Per-rank inputs of the simulation besides the trace and the durations."""

    latency_us: float
    gap_ns: list[float]          # effective host gap before each event (ns)
    start_us: float = 0.0        # when the rank's first event may happen on the common clock
    align_at: int = -1           # position of the iteration marker where ranks are aligned (-1: none)


@dataclass
class HostPlan:
    setups: list[RankSetup]
    aligned: bool
    warnings: list[str] = field(default_factory=list)
    #: how the host gaps were timed: "counted" (some capture's counted work), "measured" (captures' clock
    #: readings) or "recorded" (real or synthetic traces: their gaps as they are)
    host_model: str = "recorded"
    #: per rank, the host time (ms) of one steady iteration that the counts did not see and a clock reading gave
    #: (:func:`uncounted`, over the host-speed factor); None where the rank's gaps are not counted
    uncounted_ms: list[float | None] = field(default_factory=list)
    #: the host ``host_speed`` is relative to where some gap was counted: the counted costs' reference host (their
    #: measuring machine where the cost file names none); None otherwise
    reference_host: str | None = None


def captured(prog: RankProgram) -> bool:
    """A captured trace (whose gaps lack the runtime calls' costs), as opposed to a real or synthetic one."""
    return not prog.meta.get(COSTS_IN_GAPS)


def steady_spans(prog: RankProgram) -> list[tuple[int, int]]:
    """Event ranges of the rank's steady iterations (they repeat one event sequence)."""
    bounds = iteration_bounds(prog)
    return [bounds[k] for k in steady_iterations(prog).tolist()]


def _signature(prog: RankProgram, span: tuple[int, int]) -> tuple:
    a, b = span
    return (prog.kind_array[a:b].tobytes(), tuple(ev.get("op") or ev.get("name") for ev in prog.events[a:b]))


def steady_gaps(programs: list[RankProgram], gaps: list[np.ndarray]) -> list[np.ndarray]:
    """``gaps`` (one array per rank) with each position of the steady iterations replaced by its minimum over every
    steady iteration of every rank that repeats the same event sequence (module docstring: SPMD ranks do the same
    host work, so what differs between them, like what differs between iterations, is interference). Other
    iterations, and ranks whose steady iteration is their own, keep their own gaps."""
    groups: dict[tuple, list[tuple[int, list[tuple[int, int]]]]] = {}
    for r, prog in enumerate(programs):
        spans = steady_spans(prog)
        if len(spans) >= 1 and len({b - a for a, b in spans}) == 1:
            groups.setdefault(_signature(prog, spans[0]), []).append((r, spans))
    out = [g.copy() for g in gaps]
    for members in groups.values():
        samples = [gaps[r][a:b] for r, spans in members for a, b in spans]
        if len(samples) < 2:
            continue
        smallest = np.min(np.stack(samples), axis=0)
        for r, spans in members:
            for a, b in spans:
                out[r][a:b] = smallest
    return out


def smoothed_capture_gaps(programs: list[RankProgram],
                          counted_ns: dict[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """Per captured rank (index into ``programs``), its recorded gaps with the steady-state minimum applied
    (:func:`steady_gaps` over the captured ranks); real and synthetic traces are left out (their gaps are what
    happened). The readings of the ranks in ``counted_ns`` (their :func:`counted_gaps`) are first brought to the
    reference speed (:func:`at_reference_speed`). A sparse run's copy adds no sample of its own (its gaps are its
    twin's): it shares its twin's array (:func:`emulate.sim.copies.twin_indices`)."""
    twin = twin_indices(programs)
    captures = [r for r, p in enumerate(programs) if captured(p) and twin[r] == r]
    counted_ns = counted_ns or {}
    raw = [at_reference_speed(programs[r], counted_ns[r]) if r in counted_ns
           else np.asarray(programs[r].gap_ns, dtype=np.float64) for r in captures]
    own = dict(zip(captures, steady_gaps([programs[r] for r in captures], raw)))
    return {r: own[twin[r]] for r, p in enumerate(programs) if twin[r] in own}


@dataclass(frozen=True)
class CapturedHost:
    """A captured rank's steady-iteration host time, as recorded and as the simulation uses it (the gaps alone,
    before runtime-call costs and the host-speed factor). The per-call minimum keeps the work and discards what
    interference added, so ``interference`` says how disturbed the capture was, and ``recorded_spread`` how much
    the recorded iterations disagreed: the simulated steady iterations share one set of gaps, so their own spread
    cannot show either."""

    recorded_ms: tuple[float, ...]   # per steady iteration, the sum of its recorded gaps
    used_ms: float                   # the median steady iteration's gaps after the per-call minimum

    @property
    def recorded_median_ms(self) -> float:
        return float(np.median(self.recorded_ms))

    @property
    def recorded_spread(self) -> float:
        med = self.recorded_median_ms
        return (max(self.recorded_ms) - min(self.recorded_ms)) / med if med > 0 else 0.0

    @property
    def interference(self) -> float:
        """The share of the median recorded steady iteration's host time that the per-call minimum discarded."""
        med = self.recorded_median_ms
        return max(0.0, 1.0 - self.used_ms / med) if med > 0 else 0.0


def captured_host(programs: list[RankProgram]) -> list[CapturedHost | None]:
    """Per rank, its :class:`CapturedHost`; None for real and synthetic traces and for ranks without steady
    iterations."""
    smoothed = smoothed_capture_gaps(programs)
    twin = twin_indices(programs)
    out: list[CapturedHost | None] = [None] * len(programs)
    for r, used in smoothed.items():
        if twin[r] != r:   # a copy: its twin's (frozen, shared)
            out[r] = out[twin[r]]
            continue
        spans = steady_spans(programs[r])
        if not spans:
            continue
        raw = np.asarray(programs[r].gap_ns, dtype=np.float64)
        out[r] = CapturedHost(recorded_ms=tuple(float(raw[a:b].sum()) / 1e6 for a, b in spans),
                              used_ms=float(np.median([used[a:b].sum() for a, b in spans])) / 1e6)
    return out


def counted(prog: RankProgram) -> bool:
    """A capture that counted its host work (``meta.host_work``; module docstring)."""
    return captured(prog) and bool(prog.meta.get(HOST_WORK))


def work_counts(prog: RankProgram) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(aten op entries, autograd node evaluations, Python calls) counted before each event; 0 where the trace has
    none."""
    return tuple(np.nan_to_num(prog.events.number(name, 0.0)) for name in ("host_ops", "host_nodes", "host_py"))


def call_mask(prog: RankProgram) -> np.ndarray:
    """The events that are a call of their own: every event but iteration marks and the further nodes of a CUDA
    graph launch (one call launched them all)."""
    return (prog.kind_array != ITERATION) & ~(np.nan_to_num(prog.events.number("graph_node", 0.0)) > 0)


#: An iteration with at least this many counted gaps gauges the capturing machine's speed on its own; else the
#: capture's gaps do, and a capture with fewer is taken as it reads
ORDINARY_MIN_GAPS = 16
#: A reading at the reference speed holds uncounted work from the first ratio to its counted time, in full past the
#: second (ordinary gaps reach up to about 7x, in captures of torchtitan, ResNet-50 and GPT here; module docstring)...
UNCOUNTED_RATIO = (8.0, 16.0)
#: ...and from the first excess over its counted time (ns), in full past the second
UNCOUNTED_NS = (5e4, 2.5e5)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


def capture_slowdown(prog: RankProgram, counted: np.ndarray) -> np.ndarray:
    """Per event, how much slower than the counted model (``counted``: the rank's :func:`counted_gaps`) the capturing
    machine ran there: per iteration, the median
    ratio of measured to counted time over its gaps, each weighted by its counted time (a bare call's reading is
    mostly the clock's own noise; the longer gaps say more, but one iteration may have only a few dozen of them),
    so that a few gaps of uncounted work do not move it; an iteration with fewer than ``ORDINARY_MIN_GAPS`` gaps
    takes the capture's, and a capture with fewer is taken as it reads (1; module docstring)."""
    measured = np.asarray(prog.gap_ns, dtype=np.float64)
    has = counted > 0
    out = np.ones(len(measured))
    if has.sum() < ORDINARY_MIN_GAPS:
        return out
    ratio = measured / np.maximum(counted, 1.0)
    out[:] = _weighted_median(ratio[has], counted[has])
    for a, b in iteration_bounds(prog):
        if has[a:b].sum() >= ORDINARY_MIN_GAPS:
            out[a:b] = _weighted_median(ratio[a:b][has[a:b]], counted[a:b][has[a:b]])
    return np.where(out > 0, out, 1.0)


def at_reference_speed(prog: RankProgram, counted: np.ndarray) -> np.ndarray:
    """The capture's gap readings (ns) as the reference machine would have read them: each over its iteration's
    :func:`capture_slowdown` (``counted``: the rank's :func:`counted_gaps`)."""
    return np.asarray(prog.gap_ns, dtype=np.float64) / capture_slowdown(prog, counted)


def uncounted(readings: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """Host work (ns) the counts did not see, from ``readings`` at the reference speed: what a reading shows beyond
    its counted time, in a share rising linearly from 0 to 1 between the ``UNCOUNTED_RATIO`` and between the
    ``UNCOUNTED_NS`` lines (continuous, so a reading near them moves the answer by little)."""
    excess = np.maximum(np.asarray(readings, dtype=np.float64) - counted, 0.0)
    (r0, r1), (e0, e1) = UNCOUNTED_RATIO, UNCOUNTED_NS
    by_ratio = np.clip((readings / np.maximum(counted, 1.0) - r0) / (r1 - r0), 0.0, 1.0)
    by_size = np.clip((excess - e0) / (e1 - e0), 0.0, 1.0)
    return excess * by_ratio * by_size


def counted_gaps(prog: RankProgram, work: WorkCosts) -> np.ndarray:
    """Host gap before each event (ns) from the work counted before it (module docstring); :func:`plan` adds the
    :func:`uncounted` work the readings show."""
    return work.gaps(call_mask(prog).astype(np.float64), *work_counts(prog))


def effective_gaps(prog: RankProgram, host_speed: float, costs_us: dict[str, float],
                   gaps: np.ndarray | None = None) -> list[float]:
    """Host gap before each event in ns: for captures, the recorded gap (``gaps``: its steady-state minimum, when
    given) plus the real runtime call's cost; for real and synthetic traces the recorded gap; over the host-speed
    factor."""
    if host_speed <= 0:
        raise ValueError(f"host_speed: expected a positive factor, found {host_speed}")
    if gaps is None:
        gaps = np.asarray(prog.gap_ns, dtype=np.float64)
    if captured(prog) and costs_us:
        per_code = np.zeros(max(KIND_CODES.values()) + 1)
        for kind, us in costs_us.items():
            if kind in KIND_CODES:
                per_code[KIND_CODES[kind]] = us * 1e3
        per_code[MEMCPY_BLOCKING] = 0.0  # a blocking copy's call is its wait, which the simulator models
        # a CUDA graph launch is one call: its first node pays it, the others were not called one by one
        gaps = gaps + np.where(call_mask(prog), per_code[prog.kind_array], 0.0)
    if host_speed != 1.0:
        gaps = gaps / host_speed
    return gaps.tolist()


def plan(programs: list[RankProgram], *, host_speed: float, latency_us: list[float],
         costs_us: dict[str, float], align: bool | None = None, work: WorkCosts | None = None) -> HostPlan:
    """Per-rank setups. ``align``: None decides from the traces (align captures, keep replays' recorded
    offsets). ``work``: the counted host model's costs, applied to the captures that counted their work (None:
    every gap as measured); their time is divided by ``host_speed`` times the reference host's speed over the
    machine the costs were measured on (``work.host_speed``), every other gap by ``host_speed`` alone."""
    warnings: list[str] = []
    origins = [p.meta.get(CLOCK_ORIGIN) for p in programs]
    recorded = all(isinstance(o, (int, float)) for o in origins)
    starts = [float(o) - float(min(origins)) for o in origins] if recorded and len(programs) > 1 else \
        [0.0] * len(programs)
    if align is None:
        align = not recorded
    twin = twin_indices(programs)   # a sparse run's copies: their twins' gaps, computed once (emulate.sim.copies)
    distinct = sorted(set(twin))
    counts = [len(iteration_bounds(programs[t])) if t == r else 0 for r, t in enumerate(twin)]
    counts = [counts[t] for t in twin]
    align_at = [-1] * len(programs)
    if align and len(programs) > 1:
        if len(set(counts)) > 1:
            warnings.append("ranks disagree on their number of iterations ("
                            + ", ".join(f"rank {p.rank}: {c}" for p, c in zip(programs, counts))
                            + "): ranks are not aligned after warm-up, so warm-up skew may show as idle time")
            align = False
        elif counts[0] >= 2:
            # at the start of the first iteration that is steady on every rank
            first = max(int(steady_iterations(programs[t])[0]) for t in distinct)
            at = {t: iteration_bounds(programs[t])[first][0] for t in distinct}
            align_at = [at[t] for t in twin]
        else:
            align = False
    # under the counted model, a counting capture's readings serve only to show its uncounted work
    base = {t: counted_gaps(programs[t], work) for t in distinct if work is not None and counted(programs[t])}
    smoothed_gaps = smoothed_capture_gaps(programs, base)
    host_gaps = {t: smoothed_gaps.get(t, np.asarray(programs[t].gap_ns, dtype=np.float64)) for t in distinct}
    model = "counted" if base else "measured" if smoothed_gaps else "recorded"
    extra_ms: dict[int, float] = {}
    # counted time is in the measuring machine's units: the reference host's speed over it turns it into that host's
    speed = {t: host_speed * (work.host_speed if t in base else 1.0) for t in distinct}
    for t, counted_ns in base.items():
        extra = uncounted(smoothed_gaps[t], counted_ns)
        host_gaps[t] = counted_ns + extra
        spans = steady_spans(programs[t])
        a, b = spans[0] if spans else (0, len(extra))
        extra_ms[t] = float(extra[a:b].sum()) / 1e6 / speed[t]
    gaps = {t: effective_gaps(programs[t], speed[t], costs_us, host_gaps[t]) for t in distinct}
    setups = [RankSetup(latency_us=lat, gap_ns=gaps[t], start_us=s, align_at=a)
              for t, lat, s, a in zip(twin, latency_us, starts, align_at)]
    return HostPlan(setups=setups, aligned=any(a >= 0 for a in align_at), warnings=warnings, host_model=model,
                    uncounted_ms=[extra_ms.get(t) for t in twin],
                    reference_host=(work.host or work.reference) if base else None)


def default_costs() -> dict[str, float]:
    from stepcast.emulate.host_costs import load_costs

    return load_costs()


def default_work() -> WorkCosts | None:
    """The counted host model's costs, or None when the measured model is chosen (:data:`config.HOST_MODEL`)."""
    from stepcast.emulate import config
    from stepcast.emulate.host_costs import load_work_costs

    return load_work_costs() if config.HOST_MODEL == "counted" else None


__all__ = ["RankSetup", "HostPlan", "CapturedHost", "captured_host", "effective_gaps", "plan", "default_costs",
           "default_work", "counted", "counted_gaps", "capture_slowdown", "at_reference_speed", "uncounted",
           "work_counts", "call_mask", "CLOCK_ORIGIN", "COSTS_IN_GAPS", "HOST_WORK"]
