"""Is the predicted step time a property of the script and the target, not of the machine that emulates?

Runs the same emulation several times, once on a quiet machine and once while other processes keep every core busy,
and prints the spread ((max - min) / median) of the predicted iteration time per workload and setting:

    python -m benchmarks.emulate.determinism      # README GPT example (1 rank), FSDP2 (2 ranks), GPT with host data
    python -m benchmarks.emulate.determinism --runs 3 --workloads gpt --json out.json

Targets (the step-time issue): at most 2 % for one rank and 5 % for two ranks, in both settings. What makes the
answer stable: host time is counted work (aten ops, autograd nodes, calls) at fixed costs, not a clock reading
(``--host-model counted``, the default; ``measured`` uses the capturing thread's CPU time, for comparison), host work no
count sees (``gpt_host_data``: a numpy shuffle per batch) is read at the speed the capture's counted work shows, the
launch queue throttles a host that runs ahead, and ranks are aligned after warm-up (:mod:`emulate.sim.host`).

A second table says where a spread comes from: over the runs of each workload and setting, the spread of each part
of the prediction (simulated host time, device busy time, waiting on peers, the host time as the capture recorded
it, the share of it the per-call minimum discarded as interference, and the host time a clock reading gave because
no count saw it) and how many distinct sets of steady
iterations were chosen (``--json`` keeps every run's parts).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from stepcast.emulate import config
from stepcast.profiling.paths import REPO_ROOT


@dataclass(frozen=True)
class Workload:
    name: str
    nproc: int
    script: str
    args: tuple[str, ...]
    target_spread: float


WORKLOADS = {
    "gpt": Workload("gpt", 1, "examples/gpt.py",
                    ("--layers", "4", "--d-model", "1024", "--heads", "16", "--seq", "512", "--batch", "8",
                     "--steps", "6"), 0.02),
    "fsdp2": Workload("fsdp2", 2, "examples/fsdp2.py", ("--dim", "1024", "--blocks", "4", "--batch", "32",
                                                        "--steps", "8"), 0.05),
    # the GPT example with its batches built on the host by numpy: work inside one call that no count sees, so the
    # counted host model takes it from the capture's clock, brought to the reference speed (emulate.sim.host)
    "gpt_host_data": Workload("gpt_host_data", 1, "examples/gpt.py",
                              ("--layers", "4", "--d-model", "1024", "--heads", "16", "--seq", "512", "--batch", "8",
                               "--steps", "6", "--host-data", "300000"), 0.02),
}


@contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes spinning on the CPU for the duration (the 'loaded' setting)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def run_once(work: Workload, hardware: str, env: dict[str, str]) -> dict:
    """One emulation's report."""
    from stepcast.emulate.emulation import emulate_script

    run = emulate_script(REPO_ROOT / work.script, list(work.args), hardware, nproc=work.nproc, kernels=False, env=env)
    if not run["ok"]:
        raise RuntimeError(f"{work.name}: emulate run failed: {run['error']}")
    return run["report"]


def spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.0


#: the parts of one run's prediction that :func:`components` takes from its report, with what each is
COMPONENTS = {
    "iteration_ms": "predicted iteration time",
    "host_ms": "simulated host time of a steady iteration (gaps + runtime-call costs), slowest rank",
    "device_busy_ms": "device busy time of a steady iteration, slowest rank",
    "waiting_on_peers_ms": "steady iteration's time waiting on peer ranks, slowest rank",
    "captured_host_ms": "median steady iteration's host CPU time as the capture recorded it",
    "host_interference": "share of that the per-call minimum discarded",
    "uncounted_host_ms": "host time of a steady iteration that no count saw and a clock reading gave",
}


def components(report: dict) -> dict:
    """What one run's iteration time is made of (:data:`COMPONENTS`), and which iterations were steady: comparing
    these over identical runs shows which part varies."""
    slowest = max(report["per_rank"], key=lambda e: e["iteration_time_ms"])
    steady = slowest["steady_iterations"]
    det = report.get("determinism") or {}

    def steady_median(key: str) -> float:
        values = [slowest[key][i] for i in steady] if steady else slowest[key]
        return float(statistics.median(values)) if values else 0.0

    return {"iteration_ms": float(report["iteration_time_ms"]), "host_ms": steady_median("host_ms"),
            "device_busy_ms": steady_median("device_busy_ms"),
            "waiting_on_peers_ms": float(slowest["waiting_on_peers_ms"]),
            "captured_host_ms": det.get("captured_host_ms"), "host_interference": det.get("host_interference"),
            "uncounted_host_ms": det.get("uncounted_host_ms"), "steady_iterations": list(steady)}


def component_spreads(runs: list[dict]) -> dict:
    """Over the :func:`components` of identical runs: each numeric part's spread ((max - min) / median; for parts
    that may be 0, like waiting on peers, the range in ms), and how many distinct sets of steady iterations."""
    out: dict = {}
    for key in COMPONENTS:
        values = [r[key] for r in runs if r.get(key) is not None]
        if not values:
            out[key] = None
        elif key in ("waiting_on_peers_ms", "host_interference", "uncounted_host_ms"):
            out[key] = (min(values), max(values))
        else:
            out[key] = spread(values)
    out["steady_sets"] = len({tuple(r["steady_iterations"]) for r in runs})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.determinism",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="emulations per workload and setting (default 5)")
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--settings", nargs="+", choices=("quiet", "loaded"), default=["quiet", "loaded"])
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--host-model", choices=("counted", "measured"), default=config.HOST_MODEL,
                        help="how host time is modelled (default %(default)s; emulate/sim/host.py)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.runs < 2:
        print("stepcast: --runs: expected at least 2 (a spread needs two runs)", file=sys.stderr)
        return 2

    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    env = dict(os.environ, STEPCAST_HOST_MODEL=args.host_model)
    rows = []
    for setting in args.settings:
        for name in args.workloads:
            work = WORKLOADS[name]
            parts = []
            t0 = time.perf_counter()
            with busy_cores(os.cpu_count() or 2) if setting == "loaded" else _nothing():
                for k in range(args.runs):
                    try:
                        parts.append(components(run_once(work, args.hardware, env)))
                    except RuntimeError as exc:
                        print(f"stepcast: {exc}", file=sys.stderr)
                        return 2
                    console.print(f"[dim]{setting} {name} run {k + 1}/{args.runs}: "
                                  f"{parts[-1]['iteration_ms']:.3f} ms[/dim]")
            times = [p["iteration_ms"] for p in parts]
            rows.append({"workload": name, "ranks": work.nproc, "setting": setting, "host_model": args.host_model,
                         "iteration_ms": times, "spread": spread(times), "target": work.target_spread,
                         "wall_s": time.perf_counter() - t0, "runs": parts, "components": component_spreads(parts)})

    table = Table(title=f"Determinism of the predicted iteration time ({args.runs} runs each, {args.hardware}, "
                        f"host model {args.host_model})")
    for col in ("workload", "ranks", "setting", "min ms", "median ms", "max ms", "spread", "target", "ok", "wall s"):
        table.add_column(col, justify="left" if col in ("workload", "setting") else "right")
    for r in rows:
        t = r["iteration_ms"]
        table.add_row(r["workload"], str(r["ranks"]), r["setting"], f"{min(t):.3f}", f"{statistics.median(t):.3f}",
                      f"{max(t):.3f}", f"{r['spread'] * 100:.2f}%", f"{r['target'] * 100:.0f}%",
                      "yes" if r["spread"] <= r["target"] else "NO", f"{r['wall_s']:.0f}")
    console.print(table)
    console.print(decomposition_table(rows))
    if args.json:
        from stepcast.profiling.atomic import write_json_atomic

        write_json_atomic(args.json, rows)
    return 0


def decomposition_table(rows: list[dict]):
    """Where the spread comes from: each component's spread over the runs of a workload and setting."""
    from rich.table import Table

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 100:.2f}%"

    def rng(v: tuple[float, float] | None, scale: float, digits: int) -> str:
        return "n/a" if v is None else f"{v[0] * scale:.{digits}f}-{v[1] * scale:.{digits}f}"

    table = Table(title="Where the spread comes from (spread of each part over the runs; ranges for parts that may "
                        "be 0)")
    for col in ("workload", "setting", "iteration", "host sim.", "device", "peers wait ms", "host capt.",
                "interf. %", "uncounted ms", "steady sets"):
        table.add_column(col, justify="left" if col in ("workload", "setting") else "right", no_wrap=True)
    for r in rows:
        c = r["components"]
        table.add_row(r["workload"], r["setting"], pct(c["iteration_ms"]), pct(c["host_ms"]),
                      pct(c["device_busy_ms"]), rng(c["waiting_on_peers_ms"], 1.0, 3),
                      pct(c["captured_host_ms"]), rng(c["host_interference"], 100.0, 1),
                      rng(c["uncounted_host_ms"], 1.0, 3), str(c["steady_sets"]))
    return table


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    sys.exit(main())
