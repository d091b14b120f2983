"""``python -m benchmarks.emulate.scale``: emulate a Megatron-core GPT with TP=8 x PP=8 and data parallelism 2, 4,
8, 16 (128 to 1,024 virtual H100s, 8 per node) as sparse runs (``stepcast run --run-ranks``), and print, per size,
the emulation's wall time and peak memory and the predicted iteration time.

Only one rank per pipeline stage runs (tensor-parallel rank 0 of data-parallel replica 0: 8 processes at every
size): the tensor-parallel ranks of a stage run the same operations on equal shards and every replica repeats the
same work, so the other ranks are copies (:mod:`emulate.roles`); the emulation's cost grows with the distinct ranks:
durations, collation (:mod:`emulate.sim.shared_collate`), the host plan, the engine and the report work on the
running ranks and share their results with the copies (:mod:`emulate.sim.copies`), and only small per-rank
bookkeeping (each rank's communicators, its report entry) grows with W (``after capture s``). Peak memory is the
sum of the resident memory of the launcher and its rank processes, sampled every 0.2 s (shared library pages are
counted once per process: an upper bound).

``--check-equal`` adds the check that a sparse run reports what the same job with every rank running reports
(Megatron TP=2 x PP=2 x DP=2, 8 ranks, big enough per rank that the device, not the emulating host's noise, sets the
iteration): iteration time within 1 % and the same peak memory on every rank. ``--check-learned`` runs a job with
its ranks learned (``--run-ranks auto:2``: Megatron TP=2 x PP=2, a probe of 8 ranks, DP=2, for a job of 32, DP=8)
and compares them with the declared ones (one per stage). Sizes are the model's own (``MODEL_ARGS``), not tuned to
a result.

``--stages DIR...`` times the simulation of sparse capture folders (``stepcast run --run-ranks ... --trace-dir DIR
--capture-only``) stage by stage, in CPU seconds: what grows with W and what with the ranks that ran; collation,
the engine and the report twice, on every rank and on the twins shared with their copies, with whether the two
agree (timelines event by event, reports field by field)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stepcast.emulate import config
from stepcast.emulate.emulation import emulate_script
from stepcast.profiling.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "megatron_scale.py"
TP, PP, GPUS_PER_NODE = 8, 8, 8
DP_SIZES = (2, 4, 8, 16)
#: one transformer layer per stage, at a large model's width (a 70B-like layer: the device, not the emulating host's
#: noise, sets the iteration); the capture costs the same at any width (kernels are not run), seconds per rank
MODEL_ARGS = ["--tp", str(TP), "--pp", str(PP), "--layers", "8", "--hidden", "8192", "--heads", "64", "--seq", "4096",
              "--vocab", "32000", "--micro-batch", "1"]
#: the equality check's job: 8 ranks, device-bound per rank (a 70B-like layer width)
EQUAL_ARGS = ["--tp", "2", "--pp", "2", "--layers", "2", "--hidden", "8192", "--heads", "64", "--seq", "4096",
              "--vocab", "32000", "--global-batch", "8"]
EQUAL_NPROC, EQUAL_NODES, EQUAL_RUN = 4, 2, "0,1,4,5"   # ranks tp + 2 dp + 4 pp: replica 0 is 0, 1, 4, 5
#: the learned-roles check: the equality check's model, a probe on 2 nodes (DP=2) for a job on 8 (DP=8)
LEARN_PROBE_NODES, LEARN_NODES = 2, 8


def stage_leaders(dp: int) -> list[int]:
    """Tensor-parallel rank 0 of replica 0 in every stage, in Megatron's default order (tp-cp-ep-dp-pp)."""
    return [stage * TP * dp for stage in range(PP)]


class MemorySampler:
    """Peak summed resident memory of a process and its descendants, sampled on a thread."""

    def __init__(self, period_s: float = 0.2) -> None:
        self.period_s, self.peak_bytes = period_s, 0
        self._stop = threading.Event()

    def watch(self, pid: int) -> threading.Thread:
        import psutil

        def sample() -> None:
            try:
                root = psutil.Process(pid)
            except psutil.NoSuchProcess:
                return
            while not self._stop.is_set():
                total = 0
                try:
                    for p in [root, *root.children(recursive=True)]:
                        try:
                            total += p.memory_info().rss
                        except psutil.NoSuchProcess:
                            pass
                except psutil.NoSuchProcess:
                    return
                self.peak_bytes = max(self.peak_bytes, total)
                self._stop.wait(self.period_s)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def measured_runner(sampler: MemorySampler):
    """A ``subprocess.run`` for :func:`emulate_script` that samples the emulation's memory while it runs."""
    def run(cmd: list[str], cwd=None, env=None, capture_output=True, text=True, timeout=None):
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text)
        thread = sampler.watch(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        finally:
            sampler.stop()
            thread.join()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    return run


def emulate_sparse(args: list[str], nproc: int, nodes: int, run_ranks: str, timeout_s: float) -> dict[str, Any]:
    """One sparse emulation: {ok, report, wall_s, peak_rss_bytes} (or ok False, error)."""
    sampler = MemorySampler()
    out = emulate_script(SCRIPT, args, "h100-sxm", nproc=nproc, timeout_s=timeout_s, kernels=False,
                         options=["--nodes", str(nodes), *(["--run-ranks", run_ranks] if run_ranks else [])],
                         runner=measured_runner(sampler))
    out["peak_rss_bytes"] = sampler.peak_bytes
    return out


def scale_row(dp: int, steps: int, timeout_s: float) -> dict[str, Any]:
    world = TP * PP * dp
    run = stage_leaders(dp)
    args = [*MODEL_ARGS, "--global-batch", str(8 * dp), "--steps", str(steps)]
    out = emulate_sparse(args, GPUS_PER_NODE, world // GPUS_PER_NODE, ",".join(map(str, run)), timeout_s)
    row = {"dp": dp, "world": world, "ranks_run": len(run), "ok": out["ok"], "wall_s": round(out["wall_s"], 1),
           "peak_rss_gib": round(out["peak_rss_bytes"] / 2**30, 2)}
    if out["ok"]:
        rep = out["report"]
        row.update(iteration_ms=rep["iteration_time_ms"], capture_s=rep.get("capture_seconds"),
                   after_capture_s=round(out["wall_s"] - (rep.get("capture_seconds") or 0.0), 1),
                   peak_memory_gib=rep["peak_memory_bytes"] / 2**30, warnings=rep.get("sparse_warnings", []))
    else:
        row["error"] = out["error"]
    return row


def equality_row(timeout_s: float) -> dict[str, Any]:
    """The same 8-rank job sparse and full: iteration times and per-rank peak memory."""
    args = [*EQUAL_ARGS, "--steps", "4"]
    sparse = emulate_sparse(args, EQUAL_NPROC, EQUAL_NODES, EQUAL_RUN, timeout_s)
    full = emulate_sparse(args, EQUAL_NPROC, EQUAL_NODES, "", timeout_s)
    if not (sparse["ok"] and full["ok"]):
        return {"ok": False, "error": sparse.get("error") or full.get("error")}
    s, f = sparse["report"], full["report"]
    peaks = lambda rep: [r["peak_memory_bytes"] for r in rep["per_rank"]]  # noqa: E731
    diff = (s["iteration_time_ms"] - f["iteration_time_ms"]) / f["iteration_time_ms"]
    return {"ok": True, "sparse_ms": s["iteration_time_ms"], "full_ms": f["iteration_time_ms"], "difference": diff,
            "same_peak_memory": peaks(s) == peaks(f), "within_1_percent": abs(diff) <= 0.01,
            "sparse_wall_s": round(sparse["wall_s"], 1), "full_wall_s": round(full["wall_s"], 1)}


def learned_row(timeout_s: float) -> dict[str, Any]:
    """A job whose ranks are learned from a probe (``--run-ranks auto:2``) against the declared ones: tensor-parallel
    rank 0 of replica 0 in each stage (TP=2 x PP=2: stage s starts at rank s x 2 x DP)."""
    from stepcast.emulate.roles import ranges

    world = EQUAL_NPROC * LEARN_NODES
    dp = world // 4
    declared = ranges([stage * 2 * dp for stage in range(2)])
    out = emulate_sparse([*EQUAL_ARGS, "--steps", "3"], EQUAL_NPROC, LEARN_NODES, f"auto:{LEARN_PROBE_NODES}",
                         timeout_s)
    if not out["ok"]:
        return {"ok": False, "error": out["error"], "declared": declared, "world": world}
    rep = out["report"]
    learned = rep["learned_roles"]["run_ranks"]
    return {"ok": True, "world": world, "declared": declared, "learned": learned, "equal": learned == declared,
            "probe_world": rep["learned_roles"]["probe_world"], "wall_s": round(out["wall_s"], 1),
            "iteration_ms": rep["iteration_time_ms"], "peak_rss_gib": round(out["peak_rss_bytes"] / 2**30, 2)}


def stage_times(folder: Path) -> dict[str, Any]:
    """CPU seconds of each simulation stage of one sparse capture folder (module docstring), and whether sharing
    the copies' work gives what every rank's own gives (timelines event by event, the reports field by field)."""
    import numpy as np

    import stepcast.estimator as estimators
    from stepcast.emulate.collate import read_copies
    from stepcast.emulate.report import build_report
    from stepcast.emulate.sim import host as host_model
    from stepcast.emulate.sim.collate import collate
    from stepcast.emulate.sim.copies import run_twins, with_copies
    from stepcast.emulate.sim.durations import assign_durations, ranks_per_node_for
    from stepcast.emulate.sim.engine import run
    from stepcast.emulate.sim.program import build_program
    from stepcast.emulate.sim.shared_collate import collate_twins
    from stepcast.emulate.simulate import SimulationResult
    from stepcast.emulate.trace import read_trace
    from stepcast.profiling.hardware import lookup

    cpu: dict[str, float] = {}

    def timed(name: str, fn):
        started = time.process_time()
        out = fn()
        cpu[name] = round(time.process_time() - started, 2)
        return out

    docs = timed("read", lambda: [read_trace(p) for p in sorted(folder.glob("rank*.trace.json*"))])
    spec = lookup(docs[0]["hardware"])
    programs = with_copies([build_program(d, str(folder)) for d in docs], read_copies(folder / "copies.json"))
    world = programs[0].world_size
    rpn = ranks_per_node_for(world, world // GPUS_PER_NODE, spec)
    model = estimators.load(None)
    assign_durations(programs[:1], spec, "predicted", model, rpn)   # the estimator's first call (imports): untimed
    times = timed("durations", lambda: assign_durations(programs, spec, "predicted", model, rpn))
    group_of, groups = timed("collate_every_rank", lambda: collate(programs, times))
    twins = timed("collate_twins", lambda: collate_twins(programs, times))
    plan = timed("plan", lambda: host_model.plan(programs, host_speed=1.0, latency_us=[3.0] * world,
                                                 costs_us=host_model.default_costs()))
    walked = timed("engine_every_rank", lambda: run(programs, times, group_of, groups, plan.setups))
    shared = timed("engine_twins", lambda: run_twins(programs, times, twins, plan.setups, config.LAUNCH_QUEUE_DEPTH)
                   if twins is not None else None)

    def report(timelines, matched: int | None):
        return build_report(SimulationResult(programs, timelines, times, spec, "predicted", world // GPUS_PER_NODE,
                                             1.0, groups, collectives_matched=matched))

    mine = timed("report", lambda: report(shared, twins.matched)) if shared is not None else None
    theirs = timed("report_every_rank", lambda: report(walked, None))
    same = shared is not None and all(np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
                                      for a, b in zip(walked, shared))
    return {"folder": str(folder), "world": world, "ran": len(docs), "cpu_s": cpu, "shared_equals_walked": same,
            "reports_equal": mine == theirs}


def print_rows(rows: list[dict[str, Any]], equal: dict[str, Any] | None, console: Console,
               learned: dict[str, Any] | None = None) -> None:
    table = Table(title=f"Megatron-core GPT TP={TP} x PP={PP} on virtual H100s (sparse: one rank per stage runs)")
    for col in ("DP", "GPUs (W)", "ranks run", "wall s", "after capture s", "peak memory GiB",
                "predicted iteration ms", "note"):
        table.add_column(col, justify="right" if col != "note" else "left")
    for r in rows:
        table.add_row(str(r["dp"]), str(r["world"]), str(r["ranks_run"]), f"{r['wall_s']:.1f}",
                      f"{r['after_capture_s']:.1f}" if r["ok"] else "-", f"{r['peak_rss_gib']:.2f}",
                      f"{r['iteration_ms']:.3f}" if r["ok"] else "-", "" if r["ok"] else r["error"][:60])
    console.print(table)
    print_check(console, "sparse vs full", equal, lambda e: (
        f"sparse vs full (Megatron TP=2 x PP=2 x DP=2, 8 ranks): {e['sparse_ms']:.3f} vs {e['full_ms']:.3f} ms "
        f"({100 * e['difference']:+.2f} %, within 1 %: {e['within_1_percent']}); same peak memory on every rank: "
        f"{e['same_peak_memory']}; wall {e['sparse_wall_s']} vs {e['full_wall_s']} s"))
    print_check(console, "learned roles", learned, lambda e: (
        f"learned vs declared roles (Megatron TP=2 x PP=2, {e['world']} ranks, probe of {e['probe_world']}): ranks "
        f"run {e['learned']} vs {e['declared']} (equal: {e['equal']}); {e['iteration_ms']:.3f} ms, wall "
        f"{e['wall_s']} s with the probe, {e['peak_rss_gib']:.2f} GiB"))


def print_check(console: Console, name: str, row: dict[str, Any] | None, line) -> None:
    """One check's line, or that it failed and why; nothing when it was not asked for."""
    if row is not None:
        console.print(line(row) if row["ok"] else f"{name}: failed: {row['error']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.emulate.scale", description=__doc__.splitlines()[0])
    p.add_argument("--dp", type=int, nargs="*", default=list(DP_SIZES),
                   help="data-parallel degrees (default 2 4 8 16; none: only the checks)")
    p.add_argument("--steps", type=int, default=3, help="training steps per emulation (default 3)")
    p.add_argument("--check-equal", action="store_true", help="also compare a sparse and a full 8-rank run")
    p.add_argument("--check-learned", action="store_true", help="also learn a job's ranks from a probe")
    p.add_argument("--stages", type=Path, nargs="+", metavar="DIR",
                   help="only time the simulation stages of these sparse capture folders")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per emulation (default 1800)")
    ns = p.parse_args(argv)
    console = Console(width=140)
    if ns.stages:
        for folder in ns.stages:
            console.print(stage_times(folder))
        return 0
    rows = []
    for dp in ns.dp:
        rows.append(scale_row(dp, ns.steps, ns.timeout))
        console.print(f"dp {dp}: {rows[-1]}")
    equal = equality_row(ns.timeout) if ns.check_equal else None
    learned = learned_row(ns.timeout) if ns.check_learned else None
    print_rows(rows, equal, console, learned)
    return 0 if all(r["ok"] for r in rows) and all(x is None or x["ok"] for x in (equal, learned)) else 1


if __name__ == "__main__":
    sys.exit(main())
