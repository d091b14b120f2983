"""How well are Inductor's Triton kernels timed? KernelBench's torch.compile timings against the emulator.

    python -m benchmarks.emulate.kernelbench                 # every device-bound level-1 problem, on the six GPUs
    python -m benchmarks.emulate.kernelbench --problems 36_RMSNorm_,40_LayerNorm --json out.json

KernelBench (``kernelbench/`` under the shared data, read its SOURCE.md) timed the forward of each problem's
reference module compiled with Inductor's default mode (fp32, PyTorch 2.5, CUDA events over 100 calls) on several
GPUs; the catalog knows all six (:data:`GPUS`: T4, B200, L40S, RTX A6000, A10G, RTX 3090 Ti; L40S from its Modal
run, the other provider's left out). Each level-1 problem that is neither a matmul nor
a convolution is run once on the emulator (``benchmarks/emulate/e2e/kernelbench_problem.py``: one profiler step per
forward); its captured trace (kept under ``<cache>/kernelbench/``) is then simulated on each GPU, and the predicted
device time of one steady forward (the sum of its kernels' predicted durations) is printed beside the measured time,
twice: with each Triton launch timed from the bytes its launcher read and wrote (``bytes``, what the emulator does)
and from its grid alone (``grid``, what it did before launches carried their bytes). Each GPU gets its own capture
(kept under ``<cache>/kernelbench/<GPU>/``): what a looped reduction reads again from DRAM depends on the target's L2
and SMs (emulate/triton_bytes.py). A kept capture is reused while the code that made it is the same
(:data:`CAPTURE_CODE`, committed: the capture layer, the driver, the classification, the scripts; not the
simulator), and made again after a change to it; ``--fresh`` makes every capture again. A (problem, GPU) is compared
only when its measured time is at least :data:`DEVICE_BOUND_FLOORS` times that GPU's host floor (its time for
:data:`HOST_FLOOR_PROBLEM`, one kernel on 1 MB: the Python dispatch and launch of a compiled module), and problems
whose compiled forward runs anything but Triton kernels (an extern GEMM, a cuDNN call) are left out.
The last rows give the median |error| per GPU and column.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.emulate.e2e.cache import tree_digest

from stepcast.estimator.kernelbench import (
    DEVICE_BOUND_FLOORS,
    HOST_FLOOR_PROBLEM,
    PROBLEMS,
    TIMINGS,
    device_bound,
    kernel_us,
    measured_ms,
)
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import REPO_ROOT, cache_root, shared_data_root

#: problems that compile to extern kernels (cuBLAS GEMMs, cuDNN convolutions): not a check of Triton's timing
NOT_TRITON = re.compile(r"matmul|multiplication|conv|gemm", re.IGNORECASE)
SCALAR_PRODUCT = "5_Matrix_scalar_multiplication"  # a pointwise kernel despite its name
SCRIPT = Path(__file__).with_name("e2e") / "kernelbench_problem.py"
CALLS = 4                 # forwards per capture: the first compiles, the last full one is timed
#: what a capture depends on, committed (:func:`benchmarks.emulate.e2e.cache.tree_digest`: paths, and those left
#: out): the capture layer, the driver and the op classification, the KernelBench scripts; not the simulator nor
#: the host costs it prices a capture's calls at (a new reference host, ``kernelbench_eager --write-reference``)
CAPTURE_CODE: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("emulate", "profiling", "estimator/kernelbench.py", "estimator/kernelbench_eager.py", str(SCRIPT.relative_to(
        REPO_ROOT))), ("emulate/sim", "emulate/search", "emulate/host_call_costs.json"))
#: the file beside a kept capture that names the code that made it
CAPTURE_STAMP = "capture.json"


def candidates(measured: dict[str, dict[str, float]], only: list[str] | None = None) -> list[str]:
    """Problems worth emulating: not a GEMM or convolution, device bound on at least one GPU; ``only`` narrows."""
    least = device_bound(measured)
    keep = [p for p in measured if not NOT_TRITON.search(p) or p == SCALAR_PRODUCT]
    keep = [p for p in keep if any(ms >= least.get(gpu, float("inf")) for gpu, ms in measured[p].items())]
    if only:
        keep = [p for p in keep if p in only]
    return sorted(keep, key=lambda p: int(p.split("_")[0]))


def capture(problem: Path, fresh: bool = False, *, script: Path = SCRIPT, args: list[str] | None = None,
            folder: str = "kernelbench", hardware: str, timeout_s: float = 900) -> Path | str:
    """The captured trace of one problem (cached under ``<cache>/<folder>/<problem>``), or why there is none;
    ``script`` and ``args`` (default: this benchmark's compiled forwards) are what runs it on the virtual
    ``hardware``."""
    from stepcast.emulate.emulation import emulate_script

    trace_dir = cache_root() / folder / problem.stem
    trace, stamp = trace_dir / "rank0.trace.json", trace_dir / CAPTURE_STAMP
    code = tree_digest(*CAPTURE_CODE)
    if trace.is_file() and not fresh and stamped_code(stamp) == code:
        return trace
    stamp.unlink(missing_ok=True)
    done = emulate_script(script, args if args is not None else [str(problem), str(CALLS)], hardware,
                          kernels=False, timeout_s=timeout_s, trace_dir=trace_dir)
    if not done["ok"]:
        return f"emulation failed: {done['error']}"
    if not trace.is_file():
        return "no trace written"
    write_json_atomic(stamp, {"code": code})
    return trace


def stamped_code(stamp: Path) -> str | None:
    """The capture code digest a kept capture's stamp names; None where there is no stamp or it is not one (a stopped
    write or an edit left it unreadable, not JSON, or without ``code``): such a capture is made again, never an
    error, as it is this benchmark's own cache."""
    try:
        doc = json.loads(stamp.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    code = doc.get("code") if isinstance(doc, dict) else None
    return code if isinstance(code, str) else None


def steady_forward(events: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(first, end) event positions of the last full forward: between the last two iteration markers."""
    marks = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"]
    return (marks[-2], marks[-1]) if len(marks) >= 3 else None


def predicted_ms(events: list[dict[str, Any]], gpu: str, window: tuple[int, int], with_bytes: bool) -> float:
    """Predicted device time (ms) of the kernels in ``window`` on ``gpu``; without ``with_bytes`` the Triton
    launches lose their recorded bytes and are timed from their grid."""
    if not with_bytes:
        events = [{k: v for k, v in ev.items() if k not in ("bytes_read", "bytes_written")} for ev in events]
    us = kernel_us(events, gpu)
    first, end = window
    return sum(us[i] for i in range(first, end) if events[i]["kind"] == "kernel") / 1e3


def compared_gpus(measured: dict[str, float], least: dict[str, float]) -> list[str]:
    """The GPUs a problem is compared on: those where its measured time is device bound."""
    return [gpu for gpu, ms in measured.items() if ms >= least.get(gpu, float("inf"))]


def evaluate(problem: str, traces: dict[str, Path | str], measured: dict[str, float]) -> dict[str, Any]:
    """One problem's row: per GPU (``traces``: its capture on that GPU, or why there is none), measured and
    predicted ms (bytes and grid), or why the problem is left out."""
    from stepcast.emulate.trace import read_trace

    row: dict[str, Any] = {"problem": problem, "gpus": {}}
    for gpu, trace in traces.items():
        if not isinstance(trace, Path):
            return {"problem": problem, "skipped": f"{gpu}: {trace}"}
        events = [dict(ev) for ev in read_trace(trace)["events"]]
        window = steady_forward(events)
        if window is None:
            return {"problem": problem, "skipped": f"{gpu}: fewer than two forwards were marked"}
        kernels = [events[i] for i in range(*window) if events[i]["kind"] == "kernel"]
        other = next((k["name"] for k in kernels if not k["name"].startswith("triton_")), None)
        if not kernels or other is not None:
            return {"problem": problem, "skipped": f"not only Triton kernels ({(other or 'none')[:60]})"}
        row["gpus"][gpu] = {"measured_ms": measured[gpu], "kernels": len(kernels),
                            "bytes": sum(k.get("bytes_read", 0) + k.get("bytes_written", 0) for k in kernels),
                            "bytes_ms": predicted_ms(events, gpu, window, True),
                            "grid_ms": predicted_ms(events, gpu, window, False)}
    return row


def error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0


def medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per GPU and timing (``bytes``, ``grid``): the median |error| % over the problems compared there and their
    count (what the README shows)."""
    errors: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        for gpu, g in row.get("gpus", {}).items():
            cell = errors.setdefault(gpu, {"bytes": [], "grid": []})
            cell["bytes"].append(abs(error(g["bytes_ms"], g["measured_ms"])))
            cell["grid"].append(abs(error(g["grid_ms"], g["measured_ms"])))
    return {gpu: {kind: {"median_abs_error_pct": statistics.median(e), "n": len(e)} for kind, e in cells.items()}
            for gpu, cells in errors.items()}


def print_table(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="KernelBench torch.compile forward (fp32, Inductor default): predicted vs measured")
    for col in ("problem", "GPU", "kernels", "MB moved", "measured ms", "bytes ms", "err %", "grid ms", "err %"):
        table.add_column(col, justify="left" if col in ("problem", "GPU") else "right")
    for row in rows:
        if "skipped" in row:
            table.add_row(row["problem"], "-", "", "", "", "", "", "", row["skipped"])
            continue
        for gpu, g in row["gpus"].items():
            eb, eg = error(g["bytes_ms"], g["measured_ms"]), error(g["grid_ms"], g["measured_ms"])
            table.add_row(row["problem"], gpu, str(g["kernels"]), f"{g['bytes'] / 1e6:,.0f}",
                          f"{g['measured_ms']:.3f}", f"{g['bytes_ms']:.3f}", f"{eb:+.1f}", f"{g['grid_ms']:.3f}",
                          f"{eg:+.1f}")
    for gpu, m in medians(rows).items():
        table.add_row(f"median |error| ({m['bytes']['n']})", gpu, "", "", "", "",
                      f"{m['bytes']['median_abs_error_pct']:.1f}", "", f"{m['grid']['median_abs_error_pct']:.1f}")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.kernelbench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=None, help="comma-separated problem stems (default: every candidate)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--fresh", action="store_true", help="capture again even where a trace is cached")
    parser.add_argument("--json", type=Path, default=None, help="write every row here (JSON)")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    measured = measured_ms(root)
    if not measured:
        print(f"stepcast: no KernelBench timings under {root / TIMINGS} (set STEPCAST_SHARED_DATA)", file=sys.stderr)
        return 2
    only = [p.strip() for p in args.problems.split(",")] if args.problems else None
    problems, least = candidates(measured, only), device_bound(measured)
    if only and not problems:
        print(f"stepcast: --problems: none of {', '.join(only)} is a candidate (level 1, neither GEMM nor "
              f"convolution, measured at least {DEVICE_BOUND_FLOORS:g}x {HOST_FLOOR_PROBLEM} on a GPU)",
              file=sys.stderr)
        return 2
    console = Console(width=160)
    rows = []
    for n, problem in enumerate(problems, 1):
        console.print(f"[{n}/{len(problems)}] {problem}")
        traces = {gpu: capture(root / PROBLEMS / f"{problem}.py", fresh=args.fresh, folder=f"kernelbench/{gpu}",
                               hardware=gpu)
                  for gpu in compared_gpus(measured[problem], least)}
        rows.append(evaluate(problem, traces, measured[problem]))
    print_table(rows, console)
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "least_measured_ms": least, "medians": medians(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
