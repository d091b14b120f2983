"""Predict a training iteration from captured (or imported) traces: time every device op, simulate the ranks,
report.

    python -m stepcast.emulate.simulate rank0.json.gz rank1.json.gz --hardware h100-sxm --report report.json --trace
    tl.json

``simulate`` returns the raw :class:`SimulationResult`; ``simulate_traces`` (what ``stepcast run`` calls)
also prints the summary and writes the report and the timeline. Model: :mod:`emulate.sim.engine`; durations:
:mod:`emulate.sim.durations`; report fields: :mod:`emulate.report`.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepcast.emulate.sim.durations import Durations, assign_durations, ranks_per_node_for
from stepcast.emulate import config
from stepcast.emulate.host_costs import WorkCosts
from stepcast.emulate.sim import contention, host as host_model
from stepcast.emulate.sim.collate import CollectiveGroup, collate
from stepcast.emulate.sim.engine import RankTimeline, run
from stepcast.emulate.sim.copies import TwinCollectives, run_shared, run_twins, with_copies
from stepcast.emulate.sim.shared_collate import collate_twins
from stepcast.emulate.sim.program import RankProgram, build_program
from stepcast.emulate.trace import read_trace
from stepcast.estimator.base import KernelEstimator
from stepcast.profiling.hardware import HardwareSpec, load_catalog, lookup
from stepcast import settings
from stepcast.errors import cli_main
from stepcast.preflight import Preflight

DEFAULT_LAUNCH_LATENCY_US = config.DEFAULT_LAUNCH_LATENCY_US
DURATION_MODES = ("predicted", "measured")


@dataclass
class SimulationResult:
    programs: list[RankProgram]
    timelines: list[RankTimeline]
    durations: Durations
    hardware: HardwareSpec | None
    mode: str
    nodes: int
    host_speed: float
    groups: list[CollectiveGroup]
    queue_depth: int = field(default_factory=lambda: config.LAUNCH_QUEUE_DEPTH)
    aligned: bool = False                  # ranks were aligned after warm-up (emulate.sim.host)
    warnings: list[str] | None = None      # what the simulation had to assume, one line each
    host_model: str = "recorded"           # counted | measured | recorded (emulate.sim.host.HostPlan)
    #: collectives matched across every rank; ``groups`` may be fewer: a sparse run's copies share their twins'
    collectives_matched: int | None = None
    #: per rank, the host time of one steady iteration read from a clock under the counted model (HostPlan)
    uncounted_ms: list[float | None] | None = None
    #: the host ``host_speed`` is relative to, where some gap was counted (emulate.host_costs.ReferenceHost)
    reference_host: str | None = None

    @property
    def world_size(self) -> int:
        return self.programs[0].world_size


def simulate(traces: list[dict[str, Any]], hardware: str | None, nodes: int = 1,
             host_speed: float | None = None, durations: str = "predicted",
             estimator: KernelEstimator | str | None = None, sources: list[str] | None = None,
             queue_depth: int | None = None, align_ranks: bool | None = None,
             call_costs_us: dict[str, float] | None = None,
             copies: dict[int, dict[str, Any]] | None = None,
             work: WorkCosts | None | str = "default") -> SimulationResult:
    """Simulate the ranks whose traces (dicts as :func:`emulate.trace.read_trace` returns) are given.

    ``durations``: "predicted" (the estimator on ``hardware``) or "measured" (each event's ``duration_us`` where
    present, predictions elsewhere). ``estimator``: an estimator, a name for :func:`estimator.load`, or None for
    the shipped default (loaded only when some duration must be predicted). ``hardware`` may be None only for
    measured durations of traces that do not name a catalogued GPU (the report then has no MFU).

    Host model (:mod:`emulate.sim.host`): ``host_speed`` divides host time (None: :data:`emulate.config.HOST_SPEED`;
    it must be positive and finite, as ``STEPCAST_HOST_SPEED`` must); ``call_costs_us`` ({event kind: us},
    default: :func:`emulate.host_costs.load_costs`) is added to captured gaps; ``work``: the counted host model's
    costs ("default": the shipped ones unless ``STEPCAST_HOST_MODEL=measured``; None: measured gaps);
    ``align_ranks`` None aligns
    captured ranks after warm-up and keeps the recorded offsets of real traces. ``queue_depth``: the launch queue
    (None: :data:`emulate.config.LAUNCH_QUEUE_DEPTH`). ``copies``: a sparse run's absent ranks, each simulated as its
    twin's program on its own communicators (:mod:`emulate.sim.copies`)."""
    if not traces:
        raise ValueError("no traces to simulate")
    if durations not in DURATION_MODES:
        raise ValueError(f"durations '{durations}': expected one of {', '.join(DURATION_MODES)}")
    host_speed = settings.parse_option("STEPCAST_HOST_SPEED", "host_speed", host_speed)
    queue_depth = settings.parse_option("STEPCAST_LAUNCH_QUEUE_DEPTH", "queue_depth", queue_depth)
    spec = lookup(hardware) if hardware is not None else None
    sources = sources or [f"<trace {i}>" for i in range(len(traces))]
    programs = sorted((build_program(doc, src) for doc, src in zip(traces, sources)), key=lambda p: p.rank)
    if copies:  # a sparse run's absent ranks: their twins' programs, shared (emulate.sim.copies)
        programs = with_copies(programs, copies)
    rpn = ranks_per_node_for(programs[0].world_size, nodes, spec)
    times = assign_durations(programs, spec, durations, _LazyEstimator(estimator), rpn)
    twins = collate_twins(programs, times) if copies else None
    latency = [float(p.meta.get("launch_latency_us", DEFAULT_LAUNCH_LATENCY_US)) for p in programs]
    costs = host_model.default_costs() if call_costs_us is None else call_costs_us
    plan = host_model.plan(programs, host_speed=host_speed, latency_us=latency, costs_us=costs, align=align_ranks,
                           work=host_model.default_work() if work == "default" else work)
    timelines, groups, matched = _timelines(programs, times, twins, plan.setups, queue_depth)
    grown = contention.stretched(programs, times, timelines, spec) if config.COMM_CONTENTION else None
    if grown is not None:  # kernels beside collectives run on the SMs NCCL leaves them: simulated again
        times = grown
        timelines, groups, matched = _timelines(programs, times, twins, plan.setups, queue_depth)
    warnings = [*(plan.warnings or []), *recorded_elsewhere(programs, spec)]
    return SimulationResult(programs, timelines, times, spec, durations, nodes, host_speed, groups,
                            queue_depth=queue_depth, aligned=plan.aligned, warnings=warnings,
                            host_model=plan.host_model, collectives_matched=matched,
                            uncounted_ms=plan.uncounted_ms, reference_host=plan.reference_host)


def recorded_elsewhere(programs: list[RankProgram], spec: Any) -> list[str]:
    """A line when the traces were recorded on another catalogued GPU than the one simulated: their kernels are what
    the libraries chose there (cuBLAS's and cuDNN's picks, Inductor's kernels and split reductions, a Triton
    launch's rereads against that GPU's L2), each timed on the target, not the kernels the target would run."""
    if spec is None:
        return []
    catalog = load_catalog()
    elsewhere = sorted({p.hardware for p in programs if p.hardware in catalog and p.hardware != spec.id})
    if not elsewhere:
        return []
    return [f"traces recorded on {', '.join(elsewhere)}, simulated on {spec.id}: the kernels are those the "
            f"libraries chose for {', '.join(elsewhere)}, timed on {spec.id}; capture on {spec.id} "
            f"(stepcast run --hardware {spec.id}) for the kernels it would run"]


def _timelines(programs: list[RankProgram], times: Durations, twins: TwinCollectives | None,
               setups: list[host_model.RankSetup], queue_depth: int) -> tuple[list[RankTimeline], list, int]:
    """Every rank's timeline, the groups the engine ran and how many collectives the job matches. A sparse run's
    copies share their twins' timelines where they mirror them exactly (:mod:`emulate.sim.copies`): collated on
    the twins alone when that is exact (:mod:`emulate.sim.shared_collate`), else on every rank; otherwise every
    rank is walked."""
    if twins is not None:
        timelines = run_twins(programs, times, twins, setups, queue_depth)
        if timelines is not None:
            return timelines, twins.groups, twins.matched
    group_of, groups = collate(programs, times)
    sparse = any(p.meta.get("copied_from") is not None for p in programs)
    timelines = (run_shared(programs, times, group_of, groups, setups, queue_depth) if sparse else None) \
        or run(programs, times, group_of, groups, setups, queue_depth)
    return timelines, groups, len(groups)


def simulate_traces(trace_paths: list[Path], hardware: str, nodes: int = 1, report_path: Path | None = None,
                    timeline_path: Path | None = None, host_speed: float | None = None,
                    durations: str = "predicted", estimator: KernelEstimator | str | None = None,
                    extra: dict[str, Any] | None = None, console=None,
                    queue_depth: int | None = None) -> dict[str, Any]:
    """Read the trace files, simulate, print the summary table, write the report (atomically) and the timeline.
    Returns the report dict (fields: :func:`emulate.report.build_report`); ``extra`` fields the report does not
    already have are added to it."""

    paths = [Path(p) for p in trace_paths]
    docs = [read_trace(p) for p in paths]
    result = simulate(docs, hardware, nodes=nodes, host_speed=host_speed, durations=durations,
                      estimator=estimator, sources=[str(p) for p in paths], queue_depth=queue_depth)
    return publish(result, paths, report_path, timeline_path, extra=extra, console=console)


def publish(result: SimulationResult, paths: list[Path], report_path: Path | None, timeline_path: Path | None,
            extra: dict[str, Any] | None = None, quiet: bool = False, console=None,
            timeline_ranks: list[int] | None = None) -> dict[str, Any]:
    """Build the report of a simulation, print its summary (unless ``quiet``), write the report (atomically) and
    the timeline (of ``timeline_ranks``, default the ranks that ran: :mod:`emulate.timeline`); return the report.
    ``extra`` fields (capture facts) never replace simulated ones."""
    from stepcast.emulate.report import build_report, print_summary, write_report
    from stepcast.emulate.timeline import write_timeline

    report = build_report(result)
    report["traces"] = [str(p) for p in paths]
    for key, value in (extra or {}).items():
        report.setdefault(key, value)
    if not quiet:
        print_summary(report, console=console)
    if report_path is not None:
        write_report(report, Path(report_path))
    if timeline_path is not None:
        write_timeline(result, Path(timeline_path), timeline_ranks)
    return report


class _LazyEstimator(KernelEstimator):
    """Loads the estimator on first use, so measured replays never import a model they do not need."""

    def __init__(self, source: KernelEstimator | str | None) -> None:
        self._source = source
        self._loaded: KernelEstimator | None = source if isinstance(source, KernelEstimator) else None

    @property
    def model(self) -> KernelEstimator:
        if self._loaded is None:
            import stepcast.estimator as estimators

            self._loaded = estimators.load(self._source)
        return self._loaded

    def predict(self, frame):
        return self.model.predict(frame)

    def in_range(self, frame):
        return self.model.in_range(frame)

    def predict_frame(self, frame):
        return self.model.predict_frame(frame)


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate.simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, help="stepcast trace files, one per rank")
    parser.add_argument("--hardware", required=True, help="target hardware id (conf/hardware/<id>.yaml)")
    parser.add_argument("--nodes", default="1")
    parser.add_argument("--host-speed", help="target host CPU speed relative to the capturing one (default "
                        f"{settings.SETTINGS['STEPCAST_HOST_SPEED'].default}: STEPCAST_HOST_SPEED)")
    parser.add_argument("--launch-queue", help="device ops a host may have pending before a launch blocks "
                        f"(default {settings.SETTINGS['STEPCAST_LAUNCH_QUEUE_DEPTH'].default})")
    parser.add_argument("--durations", choices=DURATION_MODES, default="predicted")
    parser.add_argument("--estimator", default=None, help="stepcast.estimator.load source (default: shipped models)")
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--trace", type=Path, default=None, help="write the predicted timeline (Perfetto JSON)")
    args = parser.parse_args(argv)
    check = Preflight()
    check.environment()
    args.nodes = check.value("--nodes", args.nodes, settings.whole_number(1))
    args.host_speed = check.option("STEPCAST_HOST_SPEED", "--host-speed", args.host_speed)
    args.launch_queue = check.option("STEPCAST_LAUNCH_QUEUE_DEPTH", "--launch-queue", args.launch_queue)
    for path in args.traces:
        check.input_file("traces", path)
    check.output_file("--report", args.report)
    check.output_file("--trace", args.trace)
    refused = check.refuse()
    if refused is not None:
        return refused
    simulate_traces(args.traces, args.hardware, nodes=args.nodes, report_path=args.report,
                    timeline_path=args.trace, host_speed=args.host_speed, durations=args.durations,
                    estimator=args.estimator, queue_depth=args.launch_queue)
    return 0


if __name__ == "__main__":
    sys.exit(main())
