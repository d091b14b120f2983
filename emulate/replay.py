"""Replay real PyTorch profiler (Kineto) traces through the simulator.

    python -m emulate replay rank0.json.gz rank1.json.gz [--durations measured|predicted] [--hardware ID]
                             [--report report.json] [--trace timeline.json]

``--durations measured`` replays the recorded kernel durations: a check of the simulator itself (the predicted
step time should match the measured ProfilerStep durations, reported beside it per rank). ``predicted`` replaces
them with the estimators' predictions on ``--hardware`` (default: the trace's own GPU): a what-if on other
hardware. Conversion: :mod:`emulate.kineto_to_trace`; simulation: :mod:`emulate.simulate`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from emulate.kineto_to_trace import convert_file
from profiling.errors import report
from emulate.sim.engine import SimulationDeadlock
from emulate.simulate import DURATION_MODES, publish, simulate
from emulate.trace import TraceFormatError
from estimator.base import KernelEstimator
from profiling.hardware import UnknownHardwareError, lookup
from profiling.kineto import TraceFormatError as KinetoFormatError


def replay(paths: list[Path], durations: str = "measured", hardware: str | None = None,
           report_path: Path | None = None, timeline_path: Path | None = None,
           estimator: KernelEstimator | str | None = None, quiet: bool = False, console=None) -> dict[str, Any]:
    """Convert, simulate, print the summary (unless ``quiet``), write the report and timeline; return the report."""
    from rich.progress import track

    paths = [Path(p) for p in paths]
    iterator = paths if quiet or len(paths) == 1 else track(paths, description="reading traces")
    docs = [_convert(p) for p in iterator]
    target = hardware or _own_hardware(docs)
    if target is None and durations == "predicted":
        raise ValueError(f"{paths[0]}: the trace does not name a GPU of the hardware catalog: pass --hardware")
    if target is not None:
        target = lookup(target).id
    result = simulate(docs, target, durations=durations, estimator=estimator, sources=[str(p) for p in paths])
    return publish(result, paths, report_path, timeline_path, quiet=quiet, console=console,
                   extra={"source_hardware": sorted({d["hardware"] for d in docs})})


def _convert(path: Path) -> dict[str, Any]:
    """One Kineto trace as trace v1. A file the importer cannot read (an empty trace, an event it does not expect)
    is bad input, said in one line naming the file, whatever the importer raised."""
    try:
        return convert_file(path)
    except (TraceFormatError, KinetoFormatError, ValueError, OSError):
        raise
    except Exception as exc:  # the importer's own failure on an unexpected file: still the file's fault here
        raise ValueError(f"{path}: not a profiler trace the importer can read ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no message'})") from exc


def _own_hardware(docs: list[dict[str, Any]]) -> str | None:
    known = [d["hardware"] for d in docs if d["hardware"] != "unknown"]
    return known[0] if known else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", type=Path, help="Kineto traces (.json or .json.gz), one per rank")
    parser.add_argument("--durations", choices=DURATION_MODES, default="measured",
                        help="measured: the recorded kernel durations; predicted: the estimators' on --hardware")
    parser.add_argument("--hardware", default=None, help="target hardware id (default: the trace's own GPU)")
    parser.add_argument("--estimator", default=None, help="estimator.load source (default: the shipped models)")
    parser.add_argument("--report", type=Path, default=None, help="write the report JSON here")
    parser.add_argument("--trace", type=Path, default=None, help="write the predicted timeline (Perfetto JSON)")
    parser.set_defaults(func=run_command)


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``replay`` subcommand to ``python -m emulate``'s subparsers."""
    parser = subparsers.add_parser("replay", help="replay Kineto profiler traces through the simulator",
                                   description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Exit 2 with one line for bad input: unreadable traces, unknown hardware, collectives the ranks disagree on
    (:class:`emulate.sim.collate.CollectiveMismatch`) and traces that deadlock in simulation."""
    try:
        replay(args.traces, durations=args.durations, hardware=args.hardware, report_path=args.report,
               timeline_path=args.trace, estimator=args.estimator)
    except (TraceFormatError, KinetoFormatError, UnknownHardwareError, ValueError, OSError,
            SimulationDeadlock) as exc:
        return report(exc)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate.replay", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
