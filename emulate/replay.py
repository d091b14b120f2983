"""Replay real PyTorch profiler (Kineto) traces, or the traces a capture wrote, through the simulator.

    stepcast replay rank0.json.gz rank1.json.gz [--durations measured|predicted] [--hardware ID]
                             [--report report.json] [--trace timeline.json]

``--durations measured`` replays the recorded kernel durations: a check of the simulator itself (the predicted
step time should match the measured ProfilerStep durations, reported beside it per rank). ``predicted`` replaces
them with the estimators' predictions on ``--hardware`` (default: the trace's own GPU): a what-if on other
hardware. Conversion: :mod:`emulate.kineto_to_trace`; simulation: :mod:`emulate.simulate`.

A stepcast trace (``rankN.trace.json[.gz]`` of ``stepcast run --trace-dir``) is read as it is. The traces of a
sparse run (``--run-ranks``) are replayed with the copies the run described beside them (``copies.json``): each
absent rank is simulated as its twin's program on its own communicators, as the run itself simulated it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import TaskID

from stepcast.emulate.kineto_to_trace import ConvertProgress, convert_file
from stepcast.emulate.simulate import DURATION_MODES, publish, simulate
from stepcast.estimator.base import KernelEstimator
from stepcast.profiling.hardware import lookup
from stepcast.profiling.kineto import TraceFormatError as KinetoFormatError
from stepcast.profiling.progress import make_progress, stage_line
from stepcast.errors import InputError, StepcastError, cli_main
from stepcast.preflight import Preflight, refuse_bad_environment

PROGRESS_EVERY_S = 5.0  # seconds between two progress lines when stderr is not a terminal


def replay(paths: list[Path], durations: str | None = None, hardware: str | None = None,
           report_path: Path | None = None, timeline_path: Path | None = None,
           estimator: KernelEstimator | str | None = None, quiet: bool = False, console=None) -> dict[str, Any]:
    """Convert, simulate, print the summary (unless ``quiet``), write the report and timeline; return the report.
    ``durations`` None: measured where the traces recorded kernel durations (real profiles), else predicted (a
    capture records none); ``measured`` asked of a capture is a one-line :class:`InputError`."""
    paths = [Path(p) for p in paths]
    with StageProgress(enabled=not quiet) as progress:
        docs = []
        for k, p in enumerate(paths):
            prefix = f"{p.name} ({k + 1}/{len(paths)}): " if len(paths) > 1 else f"{p.name}: "
            docs.append(_load(p, lambda stage, done, total: progress.update(prefix + stage, done, total)))
        copies = copies_beside(paths, docs)
        durations = durations_for(docs, paths, durations)
        target = hardware or _own_hardware(docs)
        if target is None and durations == "predicted":
            raise InputError(f"{paths[0]}: the trace does not name a GPU of the hardware catalog: pass --hardware")
        if target is not None:
            target = lookup(target).id
        progress.update(f"simulating {sum(len(d['events']) for d in docs):,} events", 0, 1)
        result = simulate(docs, target, durations=durations, estimator=estimator, sources=[str(p) for p in paths],
                          copies=copies)
        source_hardware = sorted({d["hardware"] for d in docs})
        del docs[:]  # the programs hold the events now
        progress.update("simulating", 1, 1)
    extra: dict[str, Any] = {"source_hardware": source_hardware}
    if copies:
        from stepcast.emulate.roles import copy_summary, summary_line

        extra.update(copy_summary([int(r) for r in sorted({p.rank for p in result.programs} - set(copies))], copies))
        result.warnings = [*(result.warnings or []), summary_line(extra)]
    return publish(result, paths, report_path, timeline_path, quiet=quiet, console=console, extra=extra)


def durations_for(docs: list[dict[str, Any]], paths: list[Path], asked: str | None) -> str:
    """The durations a replay uses: what was asked, else measured when every trace records kernel durations (a real
    profile) and predicted when none does (a stepcast capture: nothing was measured, and a replay of it labelled
    'measured durations' would be a claim it cannot make)."""
    timed = [_records_durations(d) for d in docs]
    if asked == "measured":
        bare = next((p for p, t in zip(paths, timed) if not t), None)
        if bare is not None:
            raise InputError(f"{bare}: --durations measured: the trace records no kernel durations (a stepcast "
                             "capture measures none): use --durations predicted")
        return asked
    if asked is not None:
        return asked
    return "measured" if all(timed) else "predicted"


def _records_durations(doc: dict[str, Any]) -> bool:
    """Whether a trace's device events carry measured durations (``duration_us``)."""
    events = doc["events"]
    columns = getattr(events, "columns", None)
    if columns is not None:  # an EventTable: the column exists when some event has the field
        return "duration_us" in columns
    return any(ev.get("duration_us") is not None for ev in events)


def is_stepcast_trace(path: Path) -> bool:
    """Whether a file is a stepcast trace (its first field names the format) rather than a Kineto trace."""
    from stepcast.emulate.trace import FORMAT, _open_binary

    try:
        with _open_binary(path) as f:
            head = f.read(64)
    except (OSError, EOFError):
        return False
    return FORMAT.encode() in head


def copies_beside(paths: list[Path], docs: list[dict[str, Any]]) -> dict[int, dict[str, Any]] | None:
    """The copies of a sparse capture (``copies.json`` in the folder of its traces), when the traces are fewer than
    the job's ranks and every copy's twin is among them; else None (the traces are replayed as they are)."""
    from stepcast.emulate.collate import COPIES_FILE, read_copies

    folders = {p.resolve().parent for p in paths}
    if len(folders) != 1 or not docs:
        return None
    path = next(iter(folders)) / COPIES_FILE
    world = int(docs[0].get("world_size") or 0)
    if not path.is_file() or len(docs) >= world:
        return None
    copies = read_copies(path)
    ranks = {int(d["rank"]) for d in docs}
    missing = sorted({int(c["twin"]) for c in copies.values()} - ranks)
    if missing or len(ranks) + len(copies) != world:
        raise InputError(f"{path}: the copies of this sparse capture need the traces of rank(s) {missing or '?'} "
                         f"and {world} ranks in all: replay every rankN.trace.json of the capture folder")
    return copies


class StageProgress:
    """How far a replay is: reading (bytes of the file), converting (device ops), simulating; one task per stage
    of :func:`profiling.progress.make_progress` on stderr: a transient bar on a terminal, otherwise nothing for
    the first ``every_s`` seconds (a short replay says only its result), then a line when a stage starts and every
    ``every_s`` seconds within it, so that a long replay is never silent."""

    def __init__(self, enabled: bool = True, every_s: float | None = None, stream: TextIO | None = None,
                 terminal: bool | None = None) -> None:
        every = PROGRESS_EVERY_S if every_s is None else every_s
        stream = stream or sys.stderr
        console = Console(file=stream, force_terminal=stream.isatty() if terminal is None else terminal)
        self.bar = make_progress(console, enabled, interval_s=every, quiet_s=every, line=stage_line, transient=True)
        self.task: TaskID | None = None
        self.label: str | None = None

    def __enter__(self) -> "StageProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.stop()

    def update(self, label: str, done: int, total: int) -> None:
        if label != self.label:
            if self.task is not None:
                self.bar.update(self.task, completed=self.bar.tasks[self.task].total)
            self.task, self.label = self.bar.add_task(label, total=max(total, 1)), label
        self.bar.update(self.task, completed=done, total=max(total, 1))


def _load(path: Path, progress: ConvertProgress | None = None) -> dict[str, Any]:
    """One trace as trace v1: a stepcast trace as written, a Kineto trace converted."""
    if is_stepcast_trace(path):
        from stepcast.emulate.trace import read_trace

        return read_trace(path)
    return _convert(path, progress)


def _convert(path: Path, progress: ConvertProgress | None = None) -> dict[str, Any]:
    """One Kineto trace as trace v1. A file the importer cannot read (an empty trace, an event it does not expect)
    is bad input, said in one line naming the file, whatever the importer raised (the importer's own exception is
    kept as the cause)."""
    try:
        return convert_file(path, progress=progress)
    except StepcastError:
        raise
    except Exception as exc:  # the importer's own failure on an unexpected file: still the file's fault here
        raise KinetoFormatError(f"{path}: not a profiler trace the importer can read ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no message'})") from exc


def _own_hardware(docs: list[dict[str, Any]]) -> str | None:
    known = [d["hardware"] for d in docs if d["hardware"] != "unknown"]
    return known[0] if known else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", type=Path,
                        help="Kineto traces (.json or .json.gz) or a capture's rankN.trace.json, one per rank")
    parser.add_argument("--durations", choices=DURATION_MODES, default=None,
                        help="measured: the recorded kernel durations (default for profiler traces); predicted: the "
                             "estimators' on --hardware (default for stepcast captures, which record none)")
    parser.add_argument("--hardware", default=None, help="target hardware id (default: the trace's own GPU)")
    parser.add_argument("--estimator", default=None,
                        help="stepcast.estimator.load source (default: the shipped models)")
    parser.add_argument("--report", type=Path, default=None, help="write the report JSON here")
    parser.add_argument("--trace", type=Path, default=None, help="write the predicted timeline (Perfetto JSON)")
    parser.set_defaults(func=run_command)


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``replay`` subcommand to ``python -m stepcast.emulate``'s subparsers."""
    parser = subparsers.add_parser("replay", help="replay Kineto profiler traces through the simulator",
                                   description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Bad input is a :class:`StepcastError` (one line, exit 2): unreadable traces, unknown hardware, collectives
    the ranks disagree on (:class:`emulate.sim.collate.CollectiveMismatch`) and traces that deadlock in simulation;
    a trace that cannot be read or an output that cannot be written is refused before any trace is read."""
    check = Preflight()
    for path in args.traces:
        check.input_file("traces", path)
    check.output_file("--report", args.report)
    check.output_file("--trace", args.trace)
    refused = check.refuse()
    if refused is not None:
        return refused
    replay(args.traces, durations=args.durations, hardware=args.hardware, report_path=args.report,
           timeline_path=args.trace, estimator=args.estimator)
    return 0


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate.replay", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    refused = refuse_bad_environment()
    return refused if refused is not None else args.func(args)


if __name__ == "__main__":
    sys.exit(main())
