"""Measure an unmodified training script on the real device at hand, the way the emulator reports it.

    python -m stepcast.emulate.measure_real --report real.json -- script.py [script args]

The script runs in this process (``runpy``, ``__name__ == "__main__"``) with two hooks, the ones the capture layer
uses to cut iterations (:mod:`emulate.capture`):

- a global optimizer step post-hook synchronises the device and stamps the time: the first iteration runs from the
  script's start to the first step, each next one from a step to the next, and, as in the emulator's report
  (:mod:`emulate.report`), every iteration but the first is steady state once there are two, and
  ``iteration_time_ms`` is their median;
- at exit, torch's memory statistics: ``max_memory_reserved`` is what the emulator reports as
  ``peak_memory_bytes`` (the caching allocator's device footprint), ``max_memory_allocated`` the tensors' peak.

torch's defaults stand (cuDNN on), as under emulation, where torch's real cuDNN, cuBLAS and Triton choose the
kernels.

The JSON records the script, its arguments and the device's catalog id, so ``stepcast validate --real
FILE`` can compare a later emulator (a retrained estimator, say) against it on a machine with no GPU. On a CPU the
same stamps are taken (no synchronisation is needed) and memory is not reported.
"""
from __future__ import annotations

import argparse
import runpy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from stepcast.emulate.report import steady_indices
from stepcast.profiling.atomic import write_json_atomic
from stepcast.errors import InputError, cli_main

FORMAT = "stepcast-real-run"
FORMAT_VERSION = 1


def steady_iterations_ms(stamps: list[float]) -> tuple[list[float], list[float]]:
    """(all iterations, steady-state iterations) in ms from the script's start and its step stamps (seconds),
    steady state as the emulator's report counts it (:func:`emulate.report.steady_indices`)."""
    iterations = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
    return iterations, [iterations[i] for i in steady_indices(len(iterations))]


def _hardware_id() -> str:
    """The catalog id of the device the run used; for a CPU the catalog does not list, its would-be id (a CPU
    run is a test of the timing, never emulated, so it needs no catalog entry)."""
    from stepcast.profiling.hardware import UnknownHardwareError, cpu_hardware_id, detect

    try:
        return detect().id
    except UnknownHardwareError:
        return cpu_hardware_id()


def _portable(script: Path) -> str:
    """The script's path relative to the repository when inside it (stored runs are read from other checkouts)."""
    from stepcast.profiling.paths import REPO_ROOT

    try:
        return str(script.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(script.resolve())


def measure(script: Path, args: list[str]) -> dict[str, Any]:
    """Run ``script`` with ``args`` here and return the measurement (fields: the module docstring)."""
    import torch  # here, not at import: `stepcast replay` and the CLI's parser import this module
    from torch.optim.optimizer import register_optimizer_step_post_hook

    cuda = torch.cuda.is_available()
    stamps: list[float] = [time.perf_counter()]

    def stamp(*_: Any) -> None:
        if cuda and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())

    handle = register_optimizer_step_post_hook(stamp)
    argv, sys.argv = sys.argv, [str(script), *args]
    started = stamps[0]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:  # sys.exit(main()): a zero exit is a finished run
        if done.code not in (None, 0):
            raise
    finally:
        sys.argv = argv
        handle.remove()
    wall_s = time.perf_counter() - started
    iterations, steady = steady_iterations_ms(stamps)
    out: dict[str, Any] = {
        "format": FORMAT, "version": FORMAT_VERSION, "hardware": _hardware_id(),
        "device_name": torch.cuda.get_device_name(0) if cuda else None, "torch": torch.__version__,
        "script": _portable(script), "args": list(args),
        "iteration_time_ms": statistics.median(steady) if steady else None, "iterations_ms": iterations,
        "optimizer_steps": len(stamps) - 1, "wall_seconds": round(wall_s, 3),
        "peak_memory_bytes": None, "max_memory_allocated": None,
    }
    if cuda and torch.cuda.is_initialized():
        out["peak_memory_bytes"] = int(torch.cuda.max_memory_reserved())
        out["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
    return out


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stepcast.emulate.measure_real", description=__doc__.split("\n\n")[0])
    p.add_argument("--report", type=Path, required=True, help="write the measurement (JSON) here")
    p.add_argument("script", type=Path)
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments (after --)")
    ns = p.parse_args(argv)
    if not ns.script.is_file():
        raise InputError(f"script {ns.script} not found")
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    result = measure(ns.script.resolve(), args)
    if result["optimizer_steps"] == 0:
        print(f"stepcast: {ns.script} made no optimizer step: nothing to time", file=sys.stderr)
        return 1
    write_json_atomic(ns.report, result, indent=1)
    peak = result["peak_memory_bytes"]
    print(f"stepcast: measured {result['iteration_time_ms']:.3f} ms per iteration on {result['hardware']} "
          f"({len(result['iterations_ms'])} iterations)" + (f", peak {peak / 2**30:.2f} GiB" if peak else "")
          + f"; written to {ns.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
