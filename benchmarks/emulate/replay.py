"""Replay fidelity on the real profiler traces of the shared data folder (``python -m benchmarks.emulate.replay``).

For each trace (one rank each) it prints:

- ``measured``: the median steady-state ProfilerStep duration (the whole span when there are none);
- ``replay``: the simulator's prediction from the recorded kernel durations, and its error (the simulator's own
  error; the acceptance bound is 3%);
- ``no stalls``: the same without the importer's ``stall_us`` holds (waits the trace does not explain), and the
  stalls per step (summed over all ops launched in the steady-state steps, any stream) relative to the step
  time: how much of the fidelity they carry;
- ``predicted``: the prediction with every kernel the estimator can describe re-timed by the estimator on the
  trace's own GPU, its error, the time-weighted kernel error (sum |pred - meas| / sum meas over re-timed kernels,
  each with the measured time of its whole op call: a split-K GEMM's reduction counts with its GEMM)
  and the share of kernels re-timed (the rest have no spec: no op shapes were recorded, or an unclassified
  kernel, and keep their measured duration).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from stepcast.emulate.kineto_to_trace import convert_file
from stepcast.emulate.report import build_report, steady_indices
from stepcast.emulate.sim.program import KERNEL
from stepcast.emulate.simulate import simulate
from stepcast.estimator.metrics import time_weighted_ape
from stepcast.profiling.paths import shared_data_root

PATTERNS = ("hta/tests/data/**/*.json.gz", "kineto/tb_plugin/samples/**/*.json.gz")


def trace_files(root: Path) -> list[Path]:
    return sorted({p for pattern in PATTERNS for p in root.glob(pattern)})


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0 if measured else float("nan")


def evaluate(path: Path, estimator: Any) -> dict[str, Any]:
    doc = convert_file(path)
    hardware = doc["hardware"] if doc["hardware"] != "unknown" else None
    measured = np.asarray(doc["meta"]["measured_iterations_us"]) / 1e3
    measured_ms = float(statistics.median(measured[steady_indices(len(measured))]))
    replay = build_report(simulate([doc], hardware, durations="measured"))["iteration_time_ms"]
    bare = convert_file(path, stalls=False)
    no_stalls = build_report(simulate([bare], hardware, durations="measured"))["iteration_time_ms"]
    steady = steady_indices(len(measured))
    marks = [e["t_ns"] for e in doc["events"] if e["kind"] == "iteration"]
    lo, hi = marks[steady[0]], marks[-1]
    stall_ms = sum(e.get("stall_us", 0.0) for e in doc["events"] if lo <= e["t_ns"] < hi) / 1e3 / len(steady)
    row: dict[str, Any] = {
        "trace": str(path), "hardware": doc["hardware"], "events": len(doc["events"]), "measured_ms": measured_ms,
        "replay_ms": replay, "replay_error": _error(replay, measured_ms), "no_stalls_ms": no_stalls,
        "no_stalls_error": _error(no_stalls, measured_ms), "stall_share": stall_ms / measured_ms * 100.0,
    }
    if hardware is None:
        return row
    result = simulate([doc], hardware, durations="predicted", estimator=estimator)
    report = build_report(result)
    prog, us = result.programs[0], result.durations.us[0]
    kernels = [i for i in prog.device_index.tolist() if prog.kind[i] == KERNEL]
    timed = [i for i in kernels if prog.events[i].get("spec")]
    meas = np.array([prog.events[i].get("op_duration_us", prog.events[i]["duration_us"]) for i in timed])
    pred = np.array([us[i] for i in timed])
    row.update({
        "predicted_ms": report["iteration_time_ms"],
        "predicted_error": _error(report["iteration_time_ms"], measured_ms),
        "kernel_error": time_weighted_ape(pred, meas) if len(timed) and meas.sum() > 0 else float("nan"),
        "retimed_share": len(timed) / max(len(kernels), 1) * 100.0, "estimator": report["estimator"],
    })
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--estimator", default=None, help="stepcast.estimator.load source for the predicted column")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    files = trace_files(root)
    if not files:
        print(f"no profiler traces under {root} (set STEPCAST_SHARED_DATA)")
        return 1
    import stepcast.estimator as estimators

    est = estimators.load(args.estimator)
    console = Console(width=180)
    table = Table(title="Replay of real profiler traces: step time (ms) and error vs the measured ProfilerStep")
    for column in ("trace", "GPU", "events", "measured", "replay", "err", "no stalls", "err", "stalls/step",
                   "predicted", "err", "kernel err", "re-timed", "s"):
        table.add_column(column, justify="left" if column in ("trace", "GPU") else "right")
    estimator_labels = set()
    for path in files:
        t0 = time.perf_counter()
        r = evaluate(path, est)
        estimator_labels.add(r.get("estimator"))
        name = f"{path.parent.name}/{path.name.split('.')[0][:14]}"
        kernel_error = "n/a" if np.isnan(r.get("kernel_error", np.nan)) else f"{r['kernel_error']:.0f}%"
        pred = [f"{r['predicted_ms']:.2f}", f"{r['predicted_error']:+.1f}%", kernel_error,
                f"{r['retimed_share']:.0f}%"] if "predicted_ms" in r else ["n/a", "", "", ""]
        table.add_row(name[:48], r["hardware"], f"{r['events']:,}", f"{r['measured_ms']:.2f}", f"{r['replay_ms']:.2f}",
                      f"{r['replay_error']:+.2f}%", f"{r['no_stalls_ms']:.2f}", f"{r['no_stalls_error']:+.1f}%",
                      f"{r['stall_share']:.1f}%", *pred, f"{time.perf_counter() - t0:.1f}")
    console.print(table)
    console.print(f"estimator for 'predicted': {', '.join(sorted(str(x) for x in estimator_labels if x))}; "
                  "kernel err: time-weighted over re-timed kernels; re-timed: kernels with a spec; n/a: the trace "
                  "does not name its GPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
