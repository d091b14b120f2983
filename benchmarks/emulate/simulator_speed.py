"""Simulator throughput: events per second on synthetic training-like traces
(``python -m benchmarks.emulate.simulator_speed``).

Stages, per configuration: ``columns`` (trace dicts -> flat columns, :mod:`emulate.sim.program`), ``durations``
(measured, or one estimator call for the distinct spec rows), ``engine`` (the simulation proper) and ``total``
(one :func:`emulate.simulate.simulate` call: all three plus collation). Reading the JSON file is not included
(that is :mod:`json`'s speed). Rates use this process's CPU time, which other processes on a shared machine
disturb less than the wall clock; the wall-clock total is printed beside it.
"""
from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from stepcast.emulate.sim.collate import collate
from stepcast.emulate.sim.durations import assign_durations, ranks_per_node_for
from stepcast.emulate.sim.engine import run
from stepcast.emulate.sim.host import plan as host_plan
from stepcast.emulate.sim.program import build_program
from stepcast.emulate.sim.synthetic import training_like_traces
from stepcast.emulate.simulate import DEFAULT_LAUNCH_LATENCY_US, simulate
from stepcast.profiling.hardware import lookup

TARGET_EVENTS_PER_SECOND = 1_000_000
CONFIGS = ((1, 1_000_000, "measured"), (2, 500_000, "measured"), (8, 125_000, "measured"),
           (1, 1_000_000, "predicted"), (8, 125_000, "predicted"))


def measure(ranks: int, events_per_rank: int, mode: str, repeats: int) -> dict[str, float]:
    docs = training_like_traces(events_per_rank, ranks=ranks, specs=mode == "predicted")
    n = sum(len(d["events"]) for d in docs)
    hw = lookup("h100-sxm")
    best: dict[str, float] = {}
    estimator = None
    if mode == "predicted":
        import stepcast.estimator as estimators

        estimator = estimators.load("roofline")
    for _ in range(repeats):
        cpu = time.process_time
        t0 = cpu()
        programs = [build_program(d) for d in docs]
        t1 = cpu()
        durations = assign_durations(programs, hw, mode, estimator, ranks_per_node_for(ranks, 1))
        t2 = cpu()
        group_of, groups = collate(programs, durations)
        setups = host_plan(programs, host_speed=1.0, latency_us=[DEFAULT_LAUNCH_LATENCY_US] * ranks,
                           costs_us={}).setups
        t3 = cpu()
        run(programs, durations, group_of, groups, setups)
        t4 = cpu()
        w0 = time.perf_counter()
        c0 = cpu()
        simulate(docs, hw.id, durations=mode, estimator=estimator)
        c1 = cpu()
        wall = time.perf_counter() - w0
        sample = {"columns": t1 - t0, "durations": t2 - t1, "engine": t4 - t3, "total": c1 - c0, "wall": wall}
        best = {k: min(v, best.get(k, float("inf"))) for k, v in sample.items()}
    return {"events": n, **best}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.simulator_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per configuration")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the event counts (e.g. 0.1 for a quick look)")
    args = parser.parse_args(argv)
    console = Console(width=150)
    table = Table(title="Simulator throughput (events per CPU-second; best of "
                        f"{args.repeats}; target {TARGET_EVENTS_PER_SECOND:,}/s)")
    for column in ("ranks", "durations", "events", "columns", "durations step", "engine", "total", "wall total"):
        table.add_column(column, justify="right")
    for ranks, per_rank, mode in CONFIGS:
        r = measure(ranks, max(1000, int(per_rank * args.scale)), mode, args.repeats)
        n = r["events"]
        rate = {k: n / r[k] if r[k] > 0 else float("inf") for k in ("columns", "durations", "engine", "total")}
        style = "green" if rate["total"] >= TARGET_EVENTS_PER_SECOND else "red"
        table.add_row(str(ranks), mode, f"{n:,}", f"{rate['columns']:,.0f}", f"{rate['durations']:,.0f}",
                      f"{rate['engine']:,.0f}", f"[{style}]{rate['total']:,.0f}[/{style}]",
                      f"{n / r['wall']:,.0f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
