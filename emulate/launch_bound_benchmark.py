"""Launch-bound forwards: KernelBench's eager one-op modules whose time is their host's, predicted end to end.

    python -m emulate.launch_bound_benchmark                        # every launch-bound level-1 problem, six GPUs
    python -m emulate.launch_bound_benchmark --problems 19_ReLU,23_Softmax --json out.json

KernelBench (``kernelbench/`` under the shared data, read its SOURCE.md) timed each problem's eager forward with
two CUDA events around the call and a synchronisation after it (fp32, PyTorch 2.5, the mean of 100 calls). When
the forward is one or two small kernels the GPU waits for the host between the two events, so the time measured is
the host's: Python's module call, the dispatcher, the launch. A (problem, GPU) is compared here when its measured
time is at most :data:`LAUNCH_BOUND_FLOORS` times that GPU's host floor (its time for :data:`HOST_FLOOR_PROBLEM`,
one pointwise kernel on 1 MB). Each problem is captured once, eagerly (``emulate/e2e/kernelbench_eager.py
--events``: KernelBench's timing loop, one profiler step per call; kept under ``<cache>/kernelbench_eager/``), and
simulated on each GPU with the counted host model at ``--host-speed`` 1 (the reference host the costs were fitted
on, named in ``emulate/host_call_costs.json``); the prediction is the simulated time between the GPU reaching the
two events of the last call, what ``cudaEventElapsedTime`` reports. The last rows give the median |error| per GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from emulate.kernelbench_benchmark import GPUS, HOST_FLOOR_PROBLEM, PROBLEMS, TIMINGS, error, measured_ms
from profiling.atomic import write_json_atomic
from profiling.paths import REPO_ROOT, cache_root, shared_data_root

EAGER = "baseline_time_torch.json"
#: a (problem, GPU) is launch bound when its measured time is at most this many host floors
LAUNCH_BOUND_FLOORS = 1.5
CAPTURE_HARDWARE = "t4"   # eager kernels of one-op modules: the same elementwise / reduction kernels on any GPU
CALLS = 4                 # forwards per capture; the last is timed
SCRIPT = REPO_ROOT / "emulate" / "e2e" / "kernelbench_eager.py"


def launch_bound(measured: dict[str, dict[str, float]]) -> dict[str, list[str]]:
    """{problem: the GPUs where it is launch bound}, problems with none left out."""
    floor = measured.get(HOST_FLOOR_PROBLEM, {})
    out: dict[str, list[str]] = {}
    for problem, per_gpu in measured.items():
        gpus = [g for g, ms in per_gpu.items() if g in floor and ms <= LAUNCH_BOUND_FLOORS * floor[g]]
        if gpus:
            out[problem] = gpus
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].split("_")[0])))


def capture(problem: Path, fresh: bool = False) -> Path | str:
    """The eager capture of one problem (cached), or why there is none."""
    from emulate.e2e.emulation import emulate_script

    trace_dir = cache_root() / "kernelbench_eager" / problem.stem
    trace = trace_dir / "rank0.trace.json"
    if trace.is_file() and not fresh:
        return trace
    done = emulate_script(SCRIPT, ["--events", str(CALLS), str(problem)], CAPTURE_HARDWARE, kernels=False,
                          timeout_s=600, trace_dir=trace_dir)
    if not done["ok"]:
        return f"emulation failed: {done['error']}"
    return trace if trace.is_file() else "no trace written"


def elapsed_between_events(doc: dict[str, Any], gpu: str) -> tuple[float, float] | str:
    """(predicted ms between the two timing events of the last full call, predicted device ms of its kernels) on
    ``gpu``, or why there is none."""
    from emulate.simulate import simulate

    events = doc["events"]
    marks = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"]
    if len(marks) < 3:
        return "fewer than two calls were marked"
    first, end = marks[-2], marks[-1]
    records = [i for i in range(first, end) if events[i]["kind"] == "event_record"]
    if len(records) < 2:
        return "the call is not between two event records"
    result = simulate([doc | {"hardware": gpu}], gpu, host_speed=1.0)
    timeline, us = result.timelines[0], result.durations.us[0]
    device = sum(float(us[i]) for i in range(records[0], records[1]) if events[i]["kind"] == "kernel")
    return (float(timeline.end[records[1]] - timeline.end[records[0]]) / 1e3, device / 1e3)


def evaluate(problem: str, trace: Path, measured: dict[str, float], gpus: list[str]) -> dict[str, Any]:
    """One problem's row: per launch-bound GPU, measured and predicted ms, or why it is left out."""
    from emulate.trace import read_trace

    doc = read_trace(trace)
    row: dict[str, Any] = {"problem": problem, "gpus": {}}
    for gpu in gpus:
        got = elapsed_between_events(doc, gpu)
        if isinstance(got, str):
            return {"problem": problem, "skipped": got}
        row["gpus"][gpu] = {"measured_ms": measured[gpu], "predicted_ms": got[0], "device_ms": got[1]}
    return row


def print_table(rows: list[dict[str, Any]], console: Console) -> dict[str, float]:
    """The per-problem table and the median |error| per GPU (returned)."""
    table = Table(title="KernelBench eager forwards, launch bound (fp32): time between the timing events, "
                        "predicted (counted host model, --host-speed 1) vs measured")
    for col in ("problem", "GPU", "measured ms", "predicted ms", "err %", "device ms"):
        table.add_column(col, justify="left" if col in ("problem", "GPU") else "right")
    errors: dict[str, list[float]] = {}
    for row in rows:
        if "skipped" in row:
            table.add_row(row["problem"], "-", "", "", "", row["skipped"])
            continue
        for gpu, g in row["gpus"].items():
            e = error(g["predicted_ms"], g["measured_ms"])
            errors.setdefault(gpu, []).append(e)
            table.add_row(row["problem"], gpu, f"{g['measured_ms']:.4f}", f"{g['predicted_ms']:.4f}", f"{e:+.1f}",
                          f"{g['device_ms']:.4f}")
    medians = {gpu: statistics.median(abs(x) for x in e) for gpu, e in errors.items()}
    for gpu, e in errors.items():
        table.add_row(f"median |error| ({len(e)})", gpu, "", "", f"{medians[gpu]:.1f}",
                      f"signed {statistics.median(e):+.1f}")
    console.print(table)
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate.launch_bound_benchmark",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=None, help="comma-separated problem stems (default: every launch-bound "
                                                         "level-1 problem)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--fresh", action="store_true", help="capture again even where a trace is cached")
    parser.add_argument("--json", type=Path, default=None, help="write every row here (JSON)")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    measured = measured_ms(root, EAGER)
    if not measured:
        print(f"stepcast: no KernelBench eager timings under {root / TIMINGS} (set STEPCAST_SHARED_DATA)",
              file=sys.stderr)
        return 2
    bound = launch_bound(measured)
    if args.problems:
        only = [p.strip() for p in args.problems.split(",")]
        bound = {p: g for p, g in bound.items() if p in only}
        if not bound:
            print(f"stepcast: --problems: none of {', '.join(only)} is launch bound (at most "
                  f"{LAUNCH_BOUND_FLOORS:g}x {HOST_FLOOR_PROBLEM}'s eager time) on a GPU of {', '.join(GPUS.values())}",
                  file=sys.stderr)
            return 2
    console = Console(width=160)
    rows = []
    for n, (problem, gpus) in enumerate(bound.items(), 1):
        console.print(f"[{n}/{len(bound)}] {problem}")
        trace = capture(root / PROBLEMS / f"{problem}.py", fresh=args.fresh)
        rows.append(evaluate(problem, trace, measured[problem], gpus) if isinstance(trace, Path)
                    else {"problem": problem, "skipped": trace})
    medians = print_table(rows, console)
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "median_abs_error_pct": medians,
                                      "launch_bound_floors": LAUNCH_BOUND_FLOORS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
