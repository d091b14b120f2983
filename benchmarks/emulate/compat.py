"""Which training stacks run under the emulator? One row per workload: ran or failed (and why), the predicted
iteration time, peak memory, and how many kernels were timed without a learned model (in the whole capture, and in the
steady iterations whose median is the iteration time).

    python -m benchmarks.emulate.compat                                   # every row (slow: seconds to a minute each)
    python -m benchmarks.emulate.compat --rows hf_llama_eager,ddp --json out.json

Each row runs ``stepcast run --hardware H --nproc N --report r.json -- examples/compat/...``
through :func:`emulate.emulation.emulate_script` (the one way an emulation is run), with a per-row timeout, and
reads the report back. Frameworks (transformers,
accelerate, torchvision, Megatron-core, DeepSpeed, torchtitan) are optional: a row whose modules are not importable
says 'not installed' and does not run. A failed row's reason is the run's exception line
(:func:`emulate.emulation.failure_line`).
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from stepcast.emulate.emulation import emulate_script
from stepcast.profiling.paths import REPO_ROOT

RAN, FAILED, NOT_INSTALLED = "ran", "failed", "not installed"
TIMEOUT_S = 600.0  # torchtitan on 2 ranks autotunes FlexAttention on each rank: about 6 min on a 2-core host


@dataclass(frozen=True)
class Row:
    """One workload: the script (relative to the repository), its arguments, ranks and the modules it needs beyond
    torch."""
    name: str
    script: str
    args: tuple[str, ...] = ()
    nproc: int = 1
    requires: tuple[str, ...] = ()

    def command(self, report: Path, hardware: str) -> list[str]:
        return [sys.executable, "-m", "stepcast.emulate", "run", "--hardware", hardware, "--nproc", str(self.nproc),
                "--report", str(report), "--", str(REPO_ROOT / self.script), *self.args]


STEPS = ("--steps", "5")  # warm-up plus at least 3 steady iterations
ROWS: dict[str, Row] = {r.name: r for r in (
    Row("hf_llama_eager", "examples/compat/hf_llama.py", STEPS, requires=("transformers",)),
    Row("hf_llama_trainer", "examples/compat/hf_llama.py", ("--trainer", *STEPS),
        requires=("transformers", "accelerate")),
    Row("compile_default", "examples/compat/compiled_mlp.py", ("--mode", "default", *STEPS)),
    Row("compile_max_autotune", "examples/compat/compiled_mlp.py", ("--mode", "max-autotune-no-cudagraphs", *STEPS)),
    Row("compile_reduce_overhead", "examples/compat/compiled_mlp.py", ("--mode", "reduce-overhead", *STEPS)),
    Row("flex_attention", "examples/compat/flex_attention.py", STEPS),
    # fp32's peak is cudnn.benchmark's workspace in the first step: torch (Conv_v8.cpp, generate_and_filter_plans)
    # allocates the largest workspace of the engines that fit the free memory, 4.35 GiB for one convolution
    # backward here, as on an 80 GB GPU; the steady footprint is about 0.5 GiB
    Row("resnet50_fp32", "examples/compat/resnet50.py", ("--dtype", "fp32", *STEPS), requires=("torchvision",)),
    Row("resnet50_bf16_cl", "examples/compat/resnet50.py", ("--dtype", "bf16", "--channels-last", *STEPS),
        requires=("torchvision",)),
    Row("ddp", "examples/ddp.py", ("--hidden", "512", "--layers", "2", "--batch", "32", *STEPS), nproc=2),
    Row("fsdp2", "examples/fsdp2.py", ("--dim", "512", "--blocks", "2", "--batch", "32", *STEPS), nproc=2),
    Row("tensor_parallel", "examples/compat/tensor_parallel.py", STEPS, nproc=2),
    Row("megatron_tp2_pp2", "examples/megatron_gpt.py",
        ("--tp", "2", "--pp", "2", "--micro-batch", "1", "--global-batch", "4", "--layers", "2", "--hidden", "256",
         "--heads", "4", "--seq", "128", "--vocab", "8192", "--steps", "5"), nproc=4, requires=("megatron.core",)),
    Row("deepspeed_zero2", "examples/compat/deepspeed_zero.py", ("--stage", "2", *STEPS), nproc=2,
        requires=("deepspeed",)),
    Row("deepspeed_zero3", "examples/compat/deepspeed_zero.py", ("--stage", "3", *STEPS), nproc=2,
        requires=("deepspeed",)),
    Row("torchtitan_llama3_1rank", "examples/compat/torchtitan_llama3.py", STEPS, requires=("torchtitan",)),
    Row("torchtitan_llama3_2rank", "examples/compat/torchtitan_llama3.py", STEPS, nproc=2, requires=("torchtitan",)),
)}


def installed(module: str) -> bool:
    """Whether ``module`` (dotted) can be imported, without importing it (a missing parent package is 'no')."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def missing_modules(row: Row, is_installed: Callable[[str], bool] = installed) -> list[str]:
    return [m for m in row.requires if not is_installed(m)]


def result_from_report(row: Row, report: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """A ran row: the report's iteration time, peak memory and fallback-kernel counts (the whole capture's and the
    steady iterations')."""
    return {**base(row), "status": RAN, "why": "", "iteration_time_ms": report.get("iteration_time_ms"),
            "peak_memory_bytes": report.get("peak_memory_bytes"), "fallback_kernels": report.get("fallback_kernels"),
            "fallback_kernels_steady": report.get("fallback_kernels_steady"), "wall_s": wall_s}


def failed(row: Row, why: str, wall_s: float | None) -> dict[str, Any]:
    return {**base(row), "status": FAILED, "why": why, "iteration_time_ms": None, "peak_memory_bytes": None,
            "fallback_kernels": None, "fallback_kernels_steady": None, "wall_s": wall_s}


def base(row: Row) -> dict[str, Any]:
    return {"row": row.name, "ranks": row.nproc}


def run_row(row: Row, hardware: str = "h100-sxm", timeout_s: float = TIMEOUT_S,
            is_installed: Callable[[str], bool] = installed,
            runner: Callable[..., subprocess.CompletedProcess] | None = None) -> dict[str, Any]:
    """Run one row's emulation (or not, when a framework is missing) through
    :func:`emulate.emulation.emulate_script` and turn the outcome into a table row. ``runner``: stands in for
    ``subprocess.run`` (tests)."""
    missing = missing_modules(row, is_installed)
    if missing:
        return {**failed(row, "needs " + ", ".join(missing), None), "status": NOT_INSTALLED}
    done = emulate_script(REPO_ROOT / row.script, list(row.args), hardware, nproc=row.nproc, timeout_s=timeout_s,
                          kernels=False, runner=runner)
    if not done["ok"]:
        return failed(row, done["error"], done["wall_s"])
    return result_from_report(row, done["report"], done["wall_s"])


def select_rows(spec: str | None) -> list[Row]:
    """The rows named in ``--rows`` (comma-separated), all when None; an unknown name raises ValueError."""
    if not spec:
        return list(ROWS.values())
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        raise ValueError(f"--rows: unknown row(s) {', '.join(unknown)}; expected some of {', '.join(ROWS)}")
    return [ROWS[n] for n in names]


def print_table(results: list[dict[str, Any]], hardware: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 200))
    table = Table(title=f"Compatibility on a virtual {hardware}", expand=False)
    for col in ("workload", "ranks", "status", "iteration ms", "peak GiB", "no-model kernels", "no-model steady",
                "wall s", "why"):
        table.add_column(col, justify="left" if col in ("workload", "status", "why") else "right",
                         overflow="fold", min_width=80 if col == "why" else None)
    for r in results:
        mem = r["peak_memory_bytes"]
        table.add_row(r["row"], str(r["ranks"]), r["status"],
                      "" if r["iteration_time_ms"] is None else f"{r['iteration_time_ms']:.3f}",
                      "" if mem is None else f"{mem / 2**30:.2f}",
                      "" if r["fallback_kernels"] is None else str(r["fallback_kernels"]),
                      "" if r.get("fallback_kernels_steady") is None else str(r["fallback_kernels_steady"]),
                      "" if r["wall_s"] is None else f"{r['wall_s']:.0f}", r["why"])
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.compat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=None, help="comma-separated row names (default: all): " + ", ".join(ROWS))
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds per row (default {TIMEOUT_S:.0f})")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        rows = select_rows(args.rows)
    except ValueError as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    results = []
    for row in rows:
        results.append(run_row(row, args.hardware, args.timeout))
        r = results[-1]
        print(f"{row.name}: {r['status']} {r['why']}".rstrip(), file=sys.stderr, flush=True)
    print_table(results, args.hardware)
    if args.json:
        from stepcast.profiling.atomic import write_json_atomic

        write_json_atomic(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
