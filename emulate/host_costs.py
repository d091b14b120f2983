"""What the host pays per intercepted call: the real CUDA runtime's own cost (calibrated from real profiler traces)
and the framework's work before the call (the counted host model, calibrated on a reference machine).

The emulated driver answers every intercepted call at once, so a captured host gap holds the framework's own work
(Python, the dispatcher, the caching allocator) but not the time the real ``cudaLaunchKernel``, ``cudaMemcpyAsync`` or
``cudaEventRecord`` would have spent on the host. The simulator adds it back per event kind (then divides by
``--host-speed`` with the rest of the host time); without it a launch-bound script is predicted too fast.

Calibration: every ``cuda_runtime`` / ``cuda_driver`` call of the Kineto traces under ``../shared/data`` (HTA,
kineto, PARAM: A100, V100 and RTX 2080 Ti hosts); per trace, the median duration of each call name with at least
``MIN_CALLS`` calls; per event kind, the median over traces. Calls that wait for the device (synchronisations,
blocking copies) get no cost: the simulator models their wait. These durations include the profiler's own per-call
overhead (CUPTI callbacks), so they are upper estimates of an unprofiled run's costs.

The framework's work (``work_ns``): a captured trace counts, before each call, the aten op entries, the autograd
node evaluations and the Python function calls its thread made since the previous call (``host_ops``,
``host_nodes``, ``host_py``: torch's RecordFunction, the hook its profiler uses, and a Python profile function,
emulate/driver/csrc/hostwork.c). The counted host model (:mod:`emulate.sim.host`) times a gap as ``call + op * host_ops
+ node * host_nodes + py * host_py``: a count is the same whatever else runs on the emulating machine, where a
CPU-time reading of the same work varies with the load on it by up to 2x (shared cores and caches). The four
costs are fitted (non-negative least squares) on the steady-state host gaps of reference captures (the
``WORKLOADS`` below, run several times with ``STEPCAST_HOST_MODEL=measured``, which does not count Python calls and
so does not slow the interpreter; each gap its minimum over every run, as in :mod:`emulate.sim.host`), against the
counts of one counting capture of each, made on one quiet reference machine with the torch the project pins,
and are shipped: ``--host-speed`` is the target host's speed relative to that reference. The same fit on the real
profiler traces is printed beside it for context (their gaps also hold the profiler's own per-op cost, and they come
from older PyTorch releases and other hosts).

    python -m stepcast.emulate.host_costs                  # per-trace call costs and work fits, from ../shared/data
    python -m stepcast.emulate.host_costs --write          # also rewrite the call costs in emulate/host_call_costs.json
    python -m stepcast.emulate.host_costs --measure-work --write   # capture the reference workloads, fit, write work_ns
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stepcast.emulate import config
from stepcast.profiling.atomic import atomic_text
from stepcast.profiling.paths import shared_data_root
from stepcast.errors import InputError, cli_main

#: Trace event kind -> the runtime/driver calls that issue it.
CALLS_OF_KIND: dict[str, tuple[str, ...]] = {
    "kernel": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"),
    "memcpy": ("cudaMemcpyAsync",),
    "memset": ("cudaMemsetAsync",),
    "event_record": ("cudaEventRecord", "cudaEventRecordWithFlags"),
    "stream_wait_event": ("cudaStreamWaitEvent",),
}
#: NCCL enqueues its kernel with the same launch call.
KIND_ALIASES: dict[str, str] = {"collective": "kernel"}
MIN_CALLS = 100
TRACE_GLOBS = ("hta/tests/data/**/*.json*", "kineto/tb_plugin/samples/**/*.json*", "param/**/*kineto*.json*")


def trace_files(root: Path | None = None) -> list[Path]:
    root = Path(root or shared_data_root())
    return sorted({p for pattern in TRACE_GLOBS for p in root.glob(pattern) if p.is_file()})


def per_trace_medians(path: Path) -> dict[str, tuple[float, int]]:
    """{event kind: (median call duration in us, number of calls)} of one trace, kinds with >= MIN_CALLS only."""
    from stepcast.profiling import kineto

    events = kineto.read_trace(path).events
    calls = events[events["cat"].isin(kineto.LAUNCH_CATEGORIES)]
    out: dict[str, tuple[float, int]] = {}
    for kind, names in CALLS_OF_KIND.items():
        durations = calls.loc[calls["name"].isin(names), "dur"].astype(float)
        if len(durations) >= MIN_CALLS:
            out[kind] = (float(durations.median()), int(len(durations)))
    return out


def calibrate(files: list[Path], root: Path | None = None) -> dict[str, Any]:
    """The pooled costs (median over traces of each trace's median) and the per-trace figures behind them."""
    from stepcast.profiling.kineto import TraceFormatError

    root = Path(root or shared_data_root())
    per_trace: dict[str, dict[str, tuple[float, int]]] = {}
    for path in files:
        try:
            medians = per_trace_medians(path)
        except TraceFormatError:
            continue
        if medians:
            per_trace[str(path.relative_to(root)) if path.is_relative_to(root) else str(path)] = medians
    costs = {kind: round(statistics.median(m[kind][0] for m in per_trace.values() if kind in m), 3)
             for kind in CALLS_OF_KIND if any(kind in m for m in per_trace.values())}
    return {"costs_us": costs, "min_calls": MIN_CALLS, "traces": {
        name: {kind: {"median_us": v[0], "calls": v[1]} for kind, v in m.items()} for name, m in per_trace.items()}}


@functools.lru_cache(maxsize=4)
def load_costs(path: str = config.HOST_CALL_COSTS_FILE) -> dict[str, float]:
    """{trace event kind: host cost in us} the simulator adds to captured gaps (kinds not listed cost 0)."""
    try:
        doc = json.loads(Path(path).read_text())
        costs = {str(k): float(v) for k, v in doc["costs_us"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: field 'costs_us': expected {{kind: microseconds}} ({exc})") from None
    for alias, kind in KIND_ALIASES.items():
        if kind in costs:
            costs.setdefault(alias, costs[kind])
    return costs


# ---- the counted host model: the framework's work before each call ----

_OP_NAME = re.compile(r"^\w+::")
NODE_PREFIX = "autograd::engine::evaluate_function"


def work_class(name: str) -> str | None:
    """What an op entry of a profiler trace counts as in the host model: "node" (an autograd node's evaluation),
    "op" (a dispatcher op: ``aten::``, ``c10d::``, custom ``ns::`` ops) or None (profiler labels, the autograd
    node's own ``XBackward0`` scope, which pairs with its evaluation). emulate/csrc/opctx.cpp ``work_class`` counts
    the same at capture time."""
    if name.startswith(NODE_PREFIX):
        return "node"
    if name.startswith("autograd::") or not _OP_NAME.match(name):
        return None
    return "op"


#: The counted units of host work, in the order of :class:`WorkCosts`' fields and of every count array here.
WORK_UNITS = ("call", "op", "node", "py")


@dataclass(frozen=True)
class WorkCosts:
    """The counted host model's costs (ns): per intercepted call, per aten op entry, per autograd node evaluated and
    per Python function called before it; ``reference`` names the machine and torch they were measured with."""

    call_ns: float
    op_ns: float
    node_ns: float
    py_ns: float = 0.0
    reference: str = ""
    #: the reference host's speed over the machine these costs were measured on (:class:`ReferenceHost`): counted
    #: host time is divided by it, so that ``--host-speed 1`` means that host, not the measuring machine
    host_speed: float = 1.0
    #: the reference host's name ("" where the file names none: the measuring machine is the reference)
    host: str = ""

    def gaps(self, calls: np.ndarray, ops: np.ndarray, nodes: np.ndarray, py: np.ndarray | float = 0.0) -> np.ndarray:
        return self.call_ns * calls + self.op_ns * ops + self.node_ns * nodes + self.py_ns * py


def fit_work(gaps_ns: np.ndarray, *counts: np.ndarray) -> tuple[float, ...]:
    """Non-negative least squares of the gaps on the counts (one array per unit of :data:`WORK_UNITS`, in order):
    the cost of each unit in ns."""
    from sklearn.linear_model import LinearRegression

    x = np.column_stack(counts).astype(np.float64)
    fit = LinearRegression(fit_intercept=False, positive=True).fit(x, np.asarray(gaps_ns, dtype=np.float64))
    return tuple(float(c) for c in fit.coef_)


#: Gaps longer than this in a real profiler trace are not framework work (data loading, waits in Python, logging)
MAX_TRACE_GAP_US = 1000.0


def trace_work_samples(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(gap us, op entries, node evaluations) before each runtime call of a real trace's host threads, the op
    entries counted by :func:`work_class`; gaps over ``MAX_TRACE_GAP_US`` left out. None when it has no cpu ops."""
    from stepcast.profiling import kineto

    events = kineto.read_trace(path).events
    ops, calls = events[events["cat"] == "cpu_op"], events[events["cat"].isin(kineto.LAUNCH_CATEGORIES)]
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for tid, thread_calls in calls.groupby("tid"):
        thread_ops = ops[ops["tid"] == tid].sort_values("ts")
        if len(thread_calls) < MIN_CALLS or thread_ops.empty:
            continue
        thread_calls = thread_calls.sort_values("ts")
        start = thread_calls["ts"].to_numpy(np.float64)
        end = start + thread_calls["dur"].to_numpy(np.float64)
        op_ts = thread_ops["ts"].to_numpy(np.float64)
        classes = [work_class(str(n)) for n in thread_ops["name"]]
        cum = {c: np.concatenate([[0], np.cumsum([k == c for k in classes])]) for c in ("op", "node")}
        lo, hi = np.searchsorted(op_ts, end[:-1], side="right"), np.searchsorted(op_ts, start[1:], side="right")
        gap = start[1:] - end[:-1]
        keep = (gap >= 0) & (gap <= MAX_TRACE_GAP_US)
        out.append((gap[keep], (cum["op"][hi] - cum["op"][lo])[keep], (cum["node"][hi] - cum["node"][lo])[keep]))
    if not out:
        return None
    return tuple(np.concatenate(parts) for parts in zip(*out))  # type: ignore[return-value]


@dataclass(frozen=True)
class Workload:
    """A reference capture for the work fit: a script of examples/, its arguments and ranks."""

    name: str
    script: str
    args: tuple[str, ...]
    nproc: int = 1


WORKLOADS: tuple[Workload, ...] = (
    Workload("gpt", "examples/gpt.py", ("--layers", "4", "--d-model", "1024", "--heads", "16", "--seq", "512",
                                        "--batch", "8", "--steps", "6")),
    Workload("fsdp2", "examples/fsdp2.py", ("--dim", "1024", "--blocks", "4", "--batch", "32", "--steps", "8"), 2),
    Workload("ddp", "examples/ddp.py", ("--steps", "6"), 2),
    Workload("cnn", "examples/cnn.py", ("--steps", "6",)),
)


def capture_work(workload: Workload, model: str, run: int, out_dir: Path) -> Path:
    """Capture ``workload`` once (``--capture-only``) under ``STEPCAST_HOST_MODEL=model``; its rank-0 trace."""
    import os

    from stepcast.emulate.emulation import emulate_script
    from stepcast.profiling.paths import REPO_ROOT

    trace_dir = out_dir / f"{workload.name}-{model}-{run}"
    done = emulate_script(REPO_ROOT / workload.script, list(workload.args), "h100-sxm", nproc=workload.nproc,
                          kernels=False, env=dict(os.environ, STEPCAST_HOST_MODEL=model), options=["--capture-only"],
                          trace_dir=trace_dir)
    if not done["ok"]:
        raise RuntimeError(f"{workload.name}: capture failed: {done['error']}")
    print(f"captured {workload.name} ({model} {run + 1})", file=sys.stderr)
    return trace_dir / "rank0.trace.json"


def steady_work_samples(timed: list[Path], counted: Path) -> tuple[np.ndarray, ...]:
    """(gap ns, then the count of each unit of :data:`WORK_UNITS`) of the steady events of one workload: each gap
    its minimum over every steady iteration of the ``timed`` captures (made with ``measured``: counting Python calls
    slows the interpreter, so those captures do not), the counts from the ``counted`` capture of the same work (the
    same event sequence, checked); the first steady iteration's events only (the others repeat them)."""
    from stepcast.emulate.sim.host import call_mask, steady_gaps, steady_spans, work_counts
    from stepcast.emulate.sim.program import build_program
    from stepcast.emulate.trace import read_trace

    programs = [build_program(read_trace(p), str(p)) for p in timed]
    minima = steady_gaps(programs, [np.asarray(p.gap_ns, dtype=np.float64) for p in programs])
    counts = build_program(read_trace(counted), str(counted))
    spans, count_spans = steady_spans(programs[0]), steady_spans(counts)
    if not spans or not count_spans:
        raise RuntimeError(f"{timed[0] if not spans else counted}: no steady iterations")
    (a, b), (c, d) = spans[0], count_spans[0]
    if not np.array_equal(programs[0].kind_array[a:b], counts.kind_array[c:d]):
        raise RuntimeError(f"{counted}: its steady iteration is not the timed captures' event sequence")
    ops, nodes, py = work_counts(counts)
    return (minima[0][a:b], call_mask(counts)[c:d].astype(np.float64), ops[c:d], nodes[c:d], py[c:d])


def measure_work(runs: int = 3) -> dict[str, Any]:
    """Capture every reference workload ``runs`` times and fit the work costs; the per-workload check of the fit
    (steady iteration host time: measured minimum vs counted)."""
    import torch

    from stepcast.profiling.hardware import cpu_model_name

    samples: dict[str, tuple[np.ndarray, ...]] = {}
    with tempfile.TemporaryDirectory(prefix="stepcast-host-work-") as tmp:
        for w in WORKLOADS:
            timed = [capture_work(w, "measured", k, Path(tmp)) for k in range(runs)]
            samples[w.name] = steady_work_samples(timed, capture_work(w, "counted", 0, Path(tmp)))
    gaps, *counts = (np.concatenate(parts) for parts in zip(*samples.values()))
    fitted = fit_work(gaps, *counts)
    costs = WorkCosts(*fitted)
    check = {}
    for name, (g, *c) in samples.items():
        check[name] = {"measured_ms": float(g.sum()) / 1e6, "counted_ms": float(costs.gaps(*c).sum()) / 1e6,
                       **{f"{unit}s": int(x.sum()) for unit, x in zip(WORK_UNITS, c)}}
    return {**{f"{unit}_ns": round(cost, 1) for unit, cost in zip(WORK_UNITS, fitted)},
            "reference": f"{cpu_model_name()}, torch {torch.__version__}, {runs} captures per workload",
            "workloads": check}


@functools.lru_cache(maxsize=4)
def load_work_costs(path: str = config.HOST_CALL_COSTS_FILE) -> WorkCosts:
    """The counted host model's costs (field ``work_ns`` of the host cost file), at the speed of the reference host
    (field ``reference_host``; without it, of the machine they were measured on)."""
    try:
        doc = json.loads(Path(path).read_text())
        work = doc["work_ns"]
        costs = WorkCosts(*(float(work[f"{unit}_ns"]) for unit in WORK_UNITS), reference=str(work["reference"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: field 'work_ns': expected {{call_ns, op_ns, node_ns, py_ns, reference}} ({exc})") \
            from None
    host = ReferenceHost.from_doc(doc.get(REFERENCE_HOST), path)
    return dataclasses.replace(costs, host_speed=host.speed, host=host.name)


# ---- the reference host: what --host-speed 1 means ----

#: field of the host cost file that names the reference host
REFERENCE_HOST = "reference_host"


@dataclass(frozen=True)
class ReferenceHost:
    """The GPU server ``--host-speed 1`` stands for, as its speed over the machine the counted costs were measured
    on. The counted costs are this project's reference machine's (a 2-core cloud VM), and the runtime-call costs
    come from profiled servers; what a GPU server's host does per call is read from KernelBench's eager timings of
    launch-bound one-op modules on GPU servers (``python -m benchmarks.emulate.kernelbench_eager``): per server whose
    timings hold its host (one whose host floor measures no more than its kernel saw the device alone), the counted
    model's time for :data:`estimator.kernelbench.HOST_FLOOR_PROBLEM`'s call over the measured one (``servers``);
    the reference is their median (``speed``), so one unusual server moves it little."""

    speed: float = 1.0
    name: str = ""
    servers: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_doc(cls, doc: Any, path: str | Path) -> "ReferenceHost":
        if doc is None:
            return cls()
        try:
            host = cls(float(doc["speed"]), str(doc["name"]), {str(k): float(v) for k, v in doc["servers"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{path}: field '{REFERENCE_HOST}': expected {{speed, name, servers}} ({exc})") from None
        if not (host.speed > 0 and np.isfinite(host.speed)):
            raise InputError(f"{path}: field '{REFERENCE_HOST}.speed': expected a positive number, found {host.speed}")
        return host

    @classmethod
    def of_servers(cls, servers: dict[str, float], name: str) -> "ReferenceHost":
        """The reference host of these servers' speeds (median); raises on none."""
        if not servers:
            raise ValueError("no server speeds to take a reference host from")
        return cls(float(np.median(list(servers.values()))), name, dict(sorted(servers.items())))


def write_reference_host(host: ReferenceHost, path: str | Path = config.HOST_CALL_COSTS_FILE) -> None:
    """Set the host cost file's ``reference_host`` (the rest of the file as it is; written whole, then renamed)."""
    path = Path(path)
    doc = json.loads(path.read_text()) if path.is_file() else {}
    doc[REFERENCE_HOST] = {"speed": round(host.speed, 4), "name": host.name,
                           "servers": {k: round(v, 4) for k, v in host.servers.items()}}
    with atomic_text(path) as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    load_work_costs.cache_clear()


def _trace_work_table(files: list[Path], root: Path):
    from rich.table import Table

    from stepcast.profiling.kineto import TraceFormatError

    table = Table(title="The same work fit on real profiler traces (their gaps hold the profiler's cost too)")
    for col in ("trace", "gaps", "call ns", "op ns", "node ns"):
        table.add_column(col, justify="left" if col == "trace" else "right")
    for path in files:
        try:
            s = trace_work_samples(path)
        except TraceFormatError:
            continue
        if s is None or len(s[0]) < MIN_CALLS:
            continue
        c, o, n = fit_work(s[0] * 1e3, np.ones_like(s[0]), s[1], s[2])  # no Python calls in these traces
        name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        table.add_row(name[-60:], str(len(s[0])), f"{c:.0f}", f"{o:.0f}", f"{n:.0f}")
    return table


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate.host_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="shared data folder (default: ../shared/data)")
    parser.add_argument("--write", action="store_true", help=f"rewrite {config.HOST_CALL_COSTS_FILE}")
    parser.add_argument("--measure-work", action="store_true",
                        help="capture the reference workloads on this machine and fit the work costs (minutes)")
    parser.add_argument("--runs", type=int, default=3, help="captures per reference workload (default 3)")
    args = parser.parse_args(argv)
    root = Path(args.data or shared_data_root())
    files = trace_files(root)
    if not files:
        raise InputError(f"{root}: no Kineto traces found (expected {', '.join(TRACE_GLOBS)})")
    result = calibrate(files, root)

    from rich.console import Console
    from rich.table import Table

    kinds = list(CALLS_OF_KIND)
    table = Table(title="Host cost of CUDA runtime calls in real profiler traces (median us; calls)")
    table.add_column("trace")
    for kind in kinds:
        table.add_column(kind, justify="right")
    for name, m in result["traces"].items():
        table.add_row(name[-60:], *(f"{m[k]['median_us']:.1f} ({m[k]['calls']})" if k in m else "-" for k in kinds))
    table.add_row("[bold]pooled (median of traces)", *(f"[bold]{result['costs_us'].get(k, 0):.2f}" for k in kinds))
    console = Console()
    console.print(table)
    console.print(_trace_work_table(files, root))
    costs_file = Path(config.HOST_CALL_COSTS_FILE)
    previous = json.loads(costs_file.read_text()) if costs_file.is_file() else {}
    work = measure_work(args.runs) if args.measure_work else previous.get("work_ns")
    if work:
        check = Table(title="Counted host model: " + " + ".join(f"{u} {work[f'{u}_ns']:.0f} ns" for u in WORK_UNITS)
                            + f" ({work['reference']}); a steady iteration's host time per reference workload")
        for col in ("workload", *(f"{u}s" for u in WORK_UNITS), "measured ms", "counted ms", "counted/measured"):
            check.add_column(col, justify="left" if col == "workload" else "right")
        for name, w in work["workloads"].items():
            check.add_row(name, *(str(w[f"{u}s"]) for u in WORK_UNITS), f"{w['measured_ms']:.3f}",
                          f"{w['counted_ms']:.3f}", f"{w['counted_ms'] / w['measured_ms']:.2f}")
        console.print(check)
    if args.write:
        result["work_ns"] = work
        if previous.get(REFERENCE_HOST) is not None:  # fitted by benchmarks.emulate.kernelbench_eager, kept
            result[REFERENCE_HOST] = previous[REFERENCE_HOST]
        with atomic_text(Path(config.HOST_CALL_COSTS_FILE)) as f:
            json.dump(result, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {config.HOST_CALL_COSTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
