"""KernelBench's eager level-1 forwards, end to end: the time between two CUDA events around the call, predicted.

    python -m emulate.kernelbench_eager_benchmark                    # every level-1 problem it compares, six GPUs
    python -m emulate.kernelbench_eager_benchmark --problems 19_ReLU,23_Softmax --json out.json

KernelBench (``kernelbench/`` under the shared data, read its SOURCE.md) timed each problem's eager forward with
two CUDA events around the call and a synchronisation after it (fp32, PyTorch 2.5, the mean of 100 calls). Each
(problem, GPU) is put in one of two classes by its measured time against that GPU's host floor (its time for
:data:`HOST_FLOOR_PROBLEM`, one pointwise kernel on 1 MB: Python's module call, the dispatcher, the launch):

- **launch bound**, at most :data:`LAUNCH_BOUND_FLOORS` host floors: the GPU waits for the host between the two
  events, so what is measured is the host's work (any problem: its kernels barely matter);
- **device bound**, at least :data:`DEVICE_BOUND_FLOORS` host floors, and neither a GEMM nor a convolution (cuBLAS
  and cuDNN pick their kernels by the GPU; ``emulate.matmul_benchmark`` and ``emulate.conv_benchmark`` emulate
  each GPU for them): the kernels' time, PyTorch's own elementwise, reduction, norm, pooling and loss kernels,
  which are the same on every GPU, so one capture serves all six.

Pairs between the two are left out. Each problem is captured once, eagerly (``emulate/e2e/kernelbench_eager.py
--events``: KernelBench's timing loop, one profiler step per call; kept under ``<cache>/kernelbench_eager/``), and
simulated on each GPU with the counted host model at ``--host-speed`` 1 (the reference host its costs were fitted
on, named in ``emulate/host_call_costs.json``); the prediction is the simulated time between the GPU reaching the
two events of the last call, what ``cudaEventElapsedTime`` reports. None of these GPUs' KernelBench times is
training data. The last rows give the median |error| per class and GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from emulate import kernelbench_benchmark
from emulate.kernelbench_benchmark import (
    DEVICE_BOUND_FLOORS, GPUS, HOST_FLOOR_PROBLEM, NOT_TRITON, PROBLEMS, SCALAR_PRODUCT, TIMINGS, error, measured_ms,
)
from profiling.atomic import write_json_atomic
from profiling.paths import REPO_ROOT, shared_data_root

EAGER = "baseline_time_torch.json"
#: a (problem, GPU) is launch bound when its measured time is at most this many host floors
LAUNCH_BOUND_FLOORS = 1.5
LAUNCH, DEVICE = "launch bound", "device bound"
CALLS = 4                 # forwards per capture; the last is timed
SCRIPT = REPO_ROOT / "emulate" / "e2e" / "kernelbench_eager.py"


def library_picked(problem: str) -> bool:
    """A GEMM or a convolution: cuBLAS or cuDNN picks its kernels for the GPU at hand."""
    return bool(NOT_TRITON.search(problem)) and problem != SCALAR_PRODUCT


def classes(measured: dict[str, dict[str, float]]) -> dict[str, dict[str, str]]:
    """{problem: {GPU: LAUNCH or DEVICE}} of the pairs compared (module docstring), problems with none left out."""
    floor = measured.get(HOST_FLOOR_PROBLEM, {})
    out: dict[str, dict[str, str]] = {}
    for problem, per_gpu in measured.items():
        mine = {}
        for gpu, ms in per_gpu.items():
            if gpu not in floor:
                continue
            if ms <= LAUNCH_BOUND_FLOORS * floor[gpu]:
                mine[gpu] = LAUNCH
            elif ms >= DEVICE_BOUND_FLOORS * floor[gpu] and not library_picked(problem):
                mine[gpu] = DEVICE
        if mine:
            out[problem] = mine
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].split("_")[0])))


def capture(problem: Path, fresh: bool = False) -> Path | str:
    """The eager capture of one problem (cached), or why there is none."""
    return kernelbench_benchmark.capture(problem, fresh, script=SCRIPT, args=["--events", str(CALLS), str(problem)],
                                         folder="kernelbench_eager", timeout_s=600)


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


def evaluate(problem: str, trace: Path, measured: dict[str, float], compared: dict[str, str]) -> dict[str, Any]:
    """One problem's row: per GPU compared, its class, measured and predicted ms, or why it is left out."""
    from emulate.trace import read_trace

    doc = read_trace(trace)
    row: dict[str, Any] = {"problem": problem, "gpus": {}}
    for gpu, bound in compared.items():
        got = elapsed_between_events(doc, gpu)
        if isinstance(got, str):
            return {"problem": problem, "skipped": got}
        row["gpus"][gpu] = {"class": bound, "measured_ms": measured[gpu], "predicted_ms": got[0],
                            "device_ms": got[1]}
    return row


def medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """{class: {GPU: {n, median_abs_error_pct, median_error_pct}}} over the rows compared."""
    errors: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        for gpu, g in row.get("gpus", {}).items():
            errors.setdefault(g["class"], {}).setdefault(gpu, []).append(error(g["predicted_ms"], g["measured_ms"]))
    return {bound: {gpu: {"n": len(e), "median_abs_error_pct": statistics.median(abs(x) for x in e),
                          "median_error_pct": statistics.median(e)} for gpu, e in per_gpu.items()}
            for bound, per_gpu in sorted(errors.items())}


def print_table(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="KernelBench eager forwards (fp32): time between the timing events, predicted (counted host "
                        "model, --host-speed 1) vs measured")
    for col in ("problem", "GPU", "class", "measured ms", "predicted ms", "err %", "device ms"):
        table.add_column(col, justify="left" if col in ("problem", "GPU", "class") else "right")
    for row in rows:
        if "skipped" in row:
            table.add_row(row["problem"], "-", "", "", "", "", row["skipped"])
            continue
        for gpu, g in row["gpus"].items():
            table.add_row(row["problem"], gpu, g["class"], f"{g['measured_ms']:.4f}", f"{g['predicted_ms']:.4f}",
                          f"{error(g['predicted_ms'], g['measured_ms']):+.1f}", f"{g['device_ms']:.4f}")
    console.print(table)
    summary = Table(title="Median |error| % per GPU (signed median; pairs)")
    summary.add_column("class")
    gpus = list(GPUS.values())
    for gpu in gpus:
        summary.add_column(gpu, justify="right")
    for bound, per_gpu in medians(rows).items():
        summary.add_row(bound, *(f"{per_gpu[g]['median_abs_error_pct']:.1f} ({per_gpu[g]['median_error_pct']:+.1f}; "
                                 f"{per_gpu[g]['n']})" if g in per_gpu else "-" for g in gpus))
    console.print(summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate.kernelbench_eager_benchmark",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=None, help="comma-separated problem stems (default: every level-1 "
                                                         "problem compared on some GPU)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--fresh", action="store_true", help="capture again even where a trace is cached")
    parser.add_argument("--json", type=Path, default=None, help="write every row and the medians here (JSON)")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    measured = measured_ms(root, EAGER)
    if not measured:
        print(f"stepcast: no KernelBench eager timings under {root / TIMINGS} (set STEPCAST_SHARED_DATA)",
              file=sys.stderr)
        return 2
    compared = classes(measured)
    if args.problems:
        only = [p.strip() for p in args.problems.split(",")]
        compared = {p: c for p, c in compared.items() if p in only}
        if not compared:
            print(f"stepcast: --problems: none of {', '.join(only)} is compared (launch bound: at most "
                  f"{LAUNCH_BOUND_FLOORS:g}x {HOST_FLOOR_PROBLEM}'s eager time on a GPU; device bound: at least "
                  f"{DEVICE_BOUND_FLOORS:g}x, and no GEMM or convolution)", file=sys.stderr)
            return 2
    console = Console(width=160)
    rows = []
    for n, (problem, mine) in enumerate(compared.items(), 1):
        console.print(f"[{n}/{len(compared)}] {problem}")
        trace = capture(root / PROBLEMS / f"{problem}.py", fresh=args.fresh)
        rows.append(evaluate(problem, trace, measured[problem], mine) if isinstance(trace, Path)
                    else {"problem": problem, "skipped": trace})
    print_table(rows, console)
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "medians": medians(rows),
                                      "launch_bound_floors": LAUNCH_BOUND_FLOORS,
                                      "device_bound_floors": DEVICE_BOUND_FLOORS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
