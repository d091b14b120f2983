"""Which torch releases does the emulator run on? The README example and a compatibility subset
(benchmarks/emulate/compat.py's HF Llama eager, torch.compile default, DDP on 2 ranks, ResNet-50 bf16 channels-last with
cuDNN) run under each torch release in its own throwaway virtual environment (:mod:`benchmarks.emulate.torch_venv`), and
a table says per release and workload: works / fails / refused (one-line reason), the predicted iteration time, peak
memory, kernels timed without a learned model, and the GEMM kernels the release's cuBLAS launched (``nvjet_tst_*`` on
cuBLAS 12.8, ``nvjet_sm90_tst_*`` on 13.x ...).

    python -m benchmarks.emulate.torch_matrix                                         # 2.6.0, 2.9.1, 2.14.1, 2.15.0
    python -m benchmarks.emulate.torch_matrix --versions 2.9.1 --workloads readme_gpt --json out.json
    python -m benchmarks.emulate.torch_matrix --find-links '/wheels/t{version}'      # a local wheel folder per release

Not part of the test suite: each environment is 5-8 GB and minutes to install (reused when present: under
``--venvs``, default ``<cache>/torch_matrix/venvs``), each workload seconds to a minute. Results are cached per
release, workload and target under the checkout's commit (:func:`benchmarks.emulate.e2e.cache.cached`), so an
interrupted matrix resumes where it stopped (``--fresh`` runs again); ``--json`` is rewritten whole after every row.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.emulate.compat import ROWS, Row
from benchmarks.emulate.e2e.cache import cache_path, cached, git_head
from benchmarks.emulate.torch_venv import Installer, Venv, VenvError
from stepcast.emulate.emulation import emulate_script
from stepcast.profiling.paths import REPO_ROOT

DEFAULT_VERSIONS = ("2.6.0", "2.9.1", "2.14.1", "2.15.0")
README_ROW = Row("readme_gpt", "examples/gpt.py", ("--layers", "4", "--d-model", "1024", "--heads", "16", "--seq",
                                                   "512", "--batch", "8", "--steps", "6"))
WORKLOADS: dict[str, Row] = {r.name: r for r in (README_ROW, ROWS["hf_llama_eager"], ROWS["compile_default"],
                                                 ROWS["ddp"], ROWS["resnet50_bf16_cl"])}
WORKS, FAILS, REFUSED, NOT_INSTALLED = "works", "fails", "refused", "not installed"
TIMEOUT_S = 900.0
TOP_GEMMS = 5
_VERSION = re.compile(r"\d+\.\d+\.\d+")
_CRASH = re.compile(r"\bexit -11\b|SIGSEGV|Segmentation fault|signal 11\b")

Prepare = Callable[[str], Venv]
RunWorkload = Callable[[Venv, Row, str, float], dict[str, Any]]


def parse_versions(spec: str) -> list[str]:
    """``--versions``: comma-separated releases written X.Y.Z; anything else raises ValueError (one line)."""
    versions = [v.strip() for v in spec.split(",") if v.strip()]
    bad = [v for v in versions if not _VERSION.fullmatch(v)]
    if bad or not versions:
        raise ValueError(f"--versions: expected torch releases written X.Y.Z, comma-separated (e.g. 2.6.0,2.15.0), "
                         f"found {spec!r}")
    return list(dict.fromkeys(versions))


def parse_workloads(spec: str | None) -> list[Row]:
    """``--workloads``: comma-separated names of :data:`WORKLOADS` (all when None); an unknown one raises ValueError."""
    if not spec:
        return list(WORKLOADS.values())
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        raise ValueError(f"--workloads: unknown workload(s) {', '.join(unknown) or repr(spec)}; expected some of "
                         f"{', '.join(WORKLOADS)}")
    return [WORKLOADS[n] for n in names]


def gemm_kernels(trace_dir: Path, top: int = TOP_GEMMS) -> list[list[Any]]:
    """The GEMM kernels rank 0 launched, most launched first: [[name, launches], ...] (at most ``top``). A kernel is
    a GEMM when its estimator row says so, else when its name does (:func:`profiling.classify.classify_kernel_name`)."""
    from stepcast.emulate.trace import read_trace
    from stepcast.profiling.classify import classify_kernel_name

    traces = sorted(trace_dir.glob("rank0.trace.json*"))
    if not traces:
        return []
    counts: Counter[str] = Counter()
    for ev in read_trace(traces[0])["events"]:
        if ev["kind"] != "kernel":
            continue
        family = (ev.get("spec") or {}).get("family") or (classify_kernel_name(ev["name"]) or {}).get("family")
        if family == "gemm":
            counts[ev["name"]] += 1
    return [[name, n] for name, n in counts.most_common(top)]


def outcome(done: dict[str, Any]) -> tuple[str, str]:
    """(status, why) of a failed emulation: ``refused`` when the CLI said why in its own line and exited 2 (an
    unsupported torch, an unknown CUDA runtime), else ``fails``; a crash (SIGSEGV) is named as one."""
    why = done.get("error", "")
    if _CRASH.search(done.get("output", "") or "") or done.get("returncode") == -11:
        return FAILS, f"crashed (SIGSEGV): {why}"
    if done.get("returncode") == 2 and why.startswith("stepcast:"):
        return REFUSED, why
    return FAILS, why


def run_workload(venv: Venv, row: Row, hardware: str, timeout_s: float) -> dict[str, Any]:
    """One workload under the environment's python, through the one way this project runs an emulation."""
    missing = [m for m in row.requires if not venv.packages.get(m)]
    if missing:
        why = "; ".join(venv.notes.get(m, f"{m} is not installed") for m in missing)
        return {"status": NOT_INSTALLED, "why": why}
    with tempfile.TemporaryDirectory(prefix="stepcast-matrix-") as tmp:
        done = emulate_script(REPO_ROOT / row.script, list(row.args), hardware, nproc=row.nproc, timeout_s=timeout_s,
                              kernels=False, trace_dir=Path(tmp), python=str(venv.python))
        if not done["ok"]:
            status, why = outcome(done)
            return {"status": status, "why": why, "wall_s": done["wall_s"]}
        report = done["report"]
        return {"status": WORKS, "why": "", "iteration_time_ms": report.get("iteration_time_ms"),
                "peak_memory_bytes": report.get("peak_memory_bytes"),
                "fallback_kernels": report.get("fallback_kernels"),
                "fallback_kernels_steady": report.get("fallback_kernels_steady"),
                "gemm_kernels": gemm_kernels(Path(tmp)), "wall_s": done["wall_s"]}


def base_row(version: str, venv: Venv | None, row: Row) -> dict[str, Any]:
    return {"version": version, "torch": venv.torch if venv else "", "cuda": venv.cuda if venv else None,
            "torchvision": (venv.packages.get("torchvision") or None) if venv else None, "workload": row.name,
            "ranks": row.nproc, "status": FAILS, "why": "", "iteration_time_ms": None, "peak_memory_bytes": None,
            "fallback_kernels": None, "fallback_kernels_steady": None, "gemm_kernels": [], "wall_s": None}


def run_matrix(versions: list[str], rows: list[Row], hardware: str, *, prepare: Prepare,
               run: RunWorkload = run_workload, timeout_s: float = TIMEOUT_S, fresh: bool = False,
               on_row: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
               log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
               ) -> list[dict[str, Any]]:
    """Every (release, workload) result, in order: from the cache at this commit when there (unless ``fresh``),
    else run. An environment that cannot be made fails its release's rows with the installer's line."""
    results: list[dict[str, Any]] = []
    total, n = len(versions) * len(rows), 0
    for version in versions:
        try:
            venv: Venv | None = prepare(version)
            broken = ""
        except VenvError as exc:
            venv, broken = None, str(exc)
        for row in rows:
            n += 1
            progress = f"[{n}/{total}] torch {version} {row.name}"
            if venv is None:
                result, note = {**base_row(version, None, row), "why": f"install: {broken}"}, ""
            else:
                key = f"torch_matrix-{version}-{row.name}-{hardware}"
                note = " (cached)" if not fresh and cache_path(key).is_file() else ""
                if not note:
                    log(f"{progress}: running")
                result = cached(key, lambda: {**base_row(version, venv, row), **run(venv, row, hardware, timeout_s)},
                                fresh=fresh)
            results.append(result)
            log(f"{progress}: {result['status']}{note}" + (f": {result['why']}" if result["why"] else ""))
            on_row(results)
    return results


def short_name(name: str, width: int = 64) -> str:
    """A kernel name for a table cell: without ``void`` and the parameter list, a CUTLASS wrapper
    (``cutlass::Kernel2<cutlass_80_tensorop_...>``) as the kernel it wraps, cut at ``width``."""
    text = re.sub(r"\(.*\)$", "", re.sub(r"^void\s+", "", name))
    wrapped = re.fullmatch(r"[\w:]*::Kernel2?<(\w+)>", text)
    text = wrapped.group(1) if wrapped else text
    return text if len(text) <= width else text[:width - 3] + "..."


def cells(r: dict[str, Any]) -> dict[str, str]:
    """One result as table cells."""
    mem = r.get("peak_memory_bytes")
    gemms = r.get("gemm_kernels") or []
    return {"torch": r.get("torch") or r["version"], "CUDA": r.get("cuda") or "", "workload": r["workload"],
            "status": r["status"],
            "iteration ms": "" if r.get("iteration_time_ms") is None else f"{r['iteration_time_ms']:.3f}",
            "peak GiB": "" if mem is None else f"{mem / 2**30:.2f}",
            "no-model kernels": "" if r.get("fallback_kernels") is None else str(r["fallback_kernels"]),
            "GEMM kernels (launches)": ", ".join(f"{short_name(name)} ({count})" for name, count in gemms[:2]),
            "why": r.get("why") or ""}


def print_table(results: list[dict[str, Any]], hardware: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 220))
    table = Table(title=f"torch releases on a virtual {hardware}", expand=False)
    columns = list(cells(results[0])) if results else []
    for col in columns:
        table.add_column(col, justify="right" if col in ("iteration ms", "peak GiB", "no-model kernels") else "left",
                         overflow="fold")
    for r in results:
        table.add_row(*cells(r).values())
    console.print(table)


def markdown(results: list[dict[str, Any]]) -> str:
    """The table as Markdown (for the README)."""
    if not results:
        return ""
    columns = list(cells(results[0]))
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for r in results:
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in cells(r).values()) + " |")
    return "\n".join(lines) + "\n"


PAGE_TITLE = "# Which torch releases stepcast runs on"


def page(results: dict[str, Any]) -> str:
    """docs/torch_matrix.md from a results file (``--json``): the command that made it, its commit, the table."""
    versions = ",".join(dict.fromkeys(r["version"] for r in results["rows"]))
    return (f"{PAGE_TITLE}\n\nGenerated by `python -m benchmarks.emulate.torch_matrix --page docs/torch_matrix.md "
            f"--from docs/results/torch_matrix.json` from the results of `python -m benchmarks.emulate.torch_matrix "
            f"--versions "
            f"{versions} --json docs/results/torch_matrix.json` (throwaway environments of 5-8 GB each under the "
            f"cache folder; not part of the tests) at commit {results['commit'][:10]}, on a virtual "
            f"{results['hardware']}. Each release runs the README example and four compatibility rows; the GEMM "
            "kernels are the ones that release's cuBLAS launched.\n\n" + markdown(results["rows"]))


def main(argv: list[str] | None = None, *, prepare: Prepare | None = None, run: RunWorkload = run_workload) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.torch_matrix",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", default=",".join(DEFAULT_VERSIONS),
                        help=f"torch releases, comma-separated (default {','.join(DEFAULT_VERSIONS)})")
    parser.add_argument("--workloads", default=None, help="comma-separated (default all): " + ", ".join(WORKLOADS))
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--venvs", type=Path, default=None, help="where the environments live (default "
                                                                 "<cache>/torch_matrix/venvs)")
    parser.add_argument("--find-links", default=None, help="a folder of wheels pip tries first for torch ({version} "
                                                           "is replaced by the release)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds per workload (default "
                                                                          f"{TIMEOUT_S:.0f})")
    parser.add_argument("--fresh", action="store_true", help="run again what this commit's cache holds")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (rewritten after each row)")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    parser.add_argument("--page", type=Path, default=None, help="write the docs page of the results (with --from: of "
                                                                "a results file, running nothing)")
    parser.add_argument("--from", dest="from_json", type=Path, default=None, help="a results file (--json) to write "
                                                                                   "--page from")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        import json

        from stepcast.profiling.atomic import atomic_text

        try:
            results = json.loads(args.from_json.read_text())
        except (OSError, ValueError) as exc:
            print(f"stepcast: --from {args.from_json}: expected a results file of --json ({exc})", file=sys.stderr)
            return 2
        if args.page is None:
            print(markdown(results["rows"]), end="")
            return 0
        with atomic_text(args.page) as f:
            f.write(page(results))
        return 0
    try:
        versions = parse_versions(args.versions)
        rows = parse_workloads(args.workloads)
    except ValueError as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    if args.venvs is not None and args.venvs.exists() and not args.venvs.is_dir():
        print(f"stepcast: --venvs: {args.venvs} is not a folder", file=sys.stderr)
        return 2
    if prepare is None:
        prepare = Installer(args.venvs, find_links=args.find_links).ensure
    commit = git_head()

    def save(results: list[dict[str, Any]]) -> None:
        if args.json:
            from stepcast.profiling.atomic import write_json_atomic

            write_json_atomic(args.json, {"commit": commit, "hardware": args.hardware, "rows": results})

    results = run_matrix(versions, rows, args.hardware, prepare=prepare, run=run, timeout_s=args.timeout,
                         fresh=args.fresh, on_row=save)
    print_table(results, args.hardware)
    if args.markdown:
        print(markdown(results))
    if args.page is not None:
        from stepcast.profiling.atomic import atomic_text

        with atomic_text(args.page) as f:
            f.write(page({"commit": commit, "hardware": args.hardware, "rows": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
