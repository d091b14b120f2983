"""How well are fp32 GEMMs timed on GPUs the estimators never saw? KernelBench's eager matmul problems against the
emulator on the emulated driver.

    python -m benchmarks.emulate.matmul                        # KernelBench level-1 matmul problems, its six GPUs
    python -m benchmarks.emulate.matmul --problems 1_,16_ --json out.json

KernelBench (``kernelbench/`` under the shared data, read its SOURCE.md) timed the eager forward of each level-1
problem (fp32, TF32 off, CUDA events over 100 calls) on six GPUs, four of which (A10G, L40S, RTX A6000, RTX 3090 Ti)
no estimator training row comes from. Each matmul problem (1-18 but the scalar product, a pointwise kernel) runs
in one capture per GPU on the emulated driver emulating it, as :mod:`estimator.kernelbench` runs the convolutions
(same script, cache and retries), so the real cuBLAS picks the kernels it would pick on that device and the rows
follow them; each problem's last forward is simulated on its GPU and its predicted device time (every kernel of
the forward: the GEMM, and the elementwise work of the diagonal, symmetric and triangular variants) is printed
beside the measured time, where the measured time is device bound
(:data:`estimator.kernelbench.DEVICE_BOUND_FLOORS` host floors). The last rows give the median |error| per
GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.emulate.kernelbench import SCALAR_PRODUCT, error
from stepcast.estimator.kernelbench import TIMINGS, capture_all, device_bound, eager_ms, kernel_us, problem_windows
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import shared_data_root

MATMUL_PROBLEMS = range(1, 19)     # KernelBench level 1: the matmul variants


def matmul_problems(measured: dict[str, dict[str, float]], only: list[str] | None = None) -> list[str]:
    """The matmul problems with timings (``only``: stems or their prefixes), in KernelBench's order."""
    keep = [p for p in measured if int(p.split("_")[0]) in MATMUL_PROBLEMS and p != SCALAR_PRODUCT]
    if only:
        keep = [p for p in keep if any(p.startswith(o) for o in only)]
    return sorted(keep, key=lambda p: int(p.split("_")[0]))


def evaluate(problems: list[str], traces: dict[str, list[tuple[Path, list[str]]]],
             measured: dict[str, dict[str, float]], least: dict[str, float], est: Any) -> list[dict[str, Any]]:
    """One entry per device-bound (problem, GPU): measured and predicted ms of the forward, and its GEMM kernels."""
    from stepcast.emulate.trace import read_trace

    out = []
    for gpu, parts in traces.items():
        for trace, held in parts:
            events = [dict(ev) for ev in read_trace(trace)["events"]]
            us = kernel_us(events, gpu, est)
            for problem, window in zip(held, problem_windows(events, len(held)) or []):
                ms = measured.get(problem, {}).get(gpu)
                if problem not in problems or ms is None or ms < least.get(gpu, float("inf")):
                    continue
                kernels = [i for i in range(*window) if events[i]["kind"] == "kernel"]
                gemms = [events[i] for i in kernels if (events[i].get("spec") or {}).get("family") == "gemm"]
                out.append({"problem": problem, "gpu": gpu, "measured_ms": ms,
                            "predicted_ms": sum(us[i] for i in kernels) / 1e3, "kernels": len(kernels),
                            "gemm_kernels": [k["name"][:60] for k in gemms]})
    return sorted(out, key=lambda r: (int(r["problem"].split("_")[0]), r["gpu"]))


def print_rows(rows: list[dict[str, Any]], console: Console) -> dict[str, float]:
    """The table, and {GPU: median |error| %}."""
    table = Table(title="KernelBench eager matmuls (fp32, cuBLAS): predicted vs measured forward")
    for col in ("problem", "GPU", "GEMM kernel", "measured ms", "predicted ms", "err %"):
        table.add_column(col, justify="left" if col in ("problem", "GPU", "GEMM kernel") else "right")
    errors: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        e = error(r["predicted_ms"], r["measured_ms"])
        errors[r["gpu"]].append(abs(e))
        table.add_row(r["problem"][:36], r["gpu"], (r["gemm_kernels"] or ["-"])[0][:44], f"{r['measured_ms']:.3f}",
                      f"{r['predicted_ms']:.3f}", f"{e:+.1f}")
    medians = {gpu: statistics.median(v) for gpu, v in sorted(errors.items())}
    for gpu, m in medians.items():
        table.add_row(f"median |error| ({len(errors[gpu])})", gpu, "", "", "", f"{m:.1f}")
    console.print(table)
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.matmul", description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=None, help="comma-separated problem stems or prefixes (default: all)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--fresh", action="store_true", help="capture again even where a trace is cached")
    parser.add_argument("--bundle", default=None, help="estimator bundle (default: the shipped one)")
    parser.add_argument("--json", type=Path, default=None, help="write every row here (JSON)")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    measured = eager_ms(root)
    only = [p.strip() for p in args.problems.split(",")] if args.problems else None
    problems = matmul_problems(measured, only)
    if not problems:
        print(f"stepcast: no KernelBench matmul timings under {root / TIMINGS}"
              f"{' matching --problems' if only else ''} (set STEPCAST_SHARED_DATA)", file=sys.stderr)
        return 2
    import stepcast.estimator as estimators

    console = Console(width=160)
    traces, failed = {}, {}
    for gpu in sorted({g for p in problems for g in measured[p]}):
        console.print(f"capturing {len(problems)} problems on the emulated driver as {gpu} (cached)")
        traces[gpu], failed[gpu] = capture_all(problems, root, gpu, fresh=args.fresh)
    rows = evaluate(problems, traces, measured, device_bound(measured), estimators.load(args.bundle))
    medians = print_rows(rows, console)
    for gpu, why in failed.items():
        for problem, reason in why.items():
            console.print(f"{gpu} {problem}: {reason[:120]}")
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "median_abs_error": medians, "failed": failed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
