"""KernelBench's eager level-1 forwards, end to end: the time between two CUDA events around the call, predicted.

    python -m benchmarks.emulate.kernelbench_eager                    # every level-1 problem it compares, six GPUs
    python -m benchmarks.emulate.kernelbench_eager --problems 19_ReLU,23_Softmax --json out.json

KernelBench (``kernelbench/`` under the shared data, read its SOURCE.md) timed each problem's eager forward with
two CUDA events around the call and a synchronisation after it (fp32, PyTorch 2.5, the mean of 100 calls). Each
(problem, GPU) is put in one of two classes by its measured time against that GPU's host floor (its time for
:data:`HOST_FLOOR_PROBLEM`, one pointwise kernel on 1 MB: Python's module call, the dispatcher, the launch):

- **launch bound**, at most :data:`LAUNCH_BOUND_FLOORS` host floors: the GPU waits for the host between the two
  events, so what is measured is the host's work (any problem: its kernels barely matter);
- **device bound**, at least :data:`DEVICE_BOUND_FLOORS` host floors, and neither a GEMM nor a convolution (cuBLAS
  and cuDNN pick their kernels by the GPU; ``benchmarks.emulate.matmul`` and ``benchmarks.emulate.conv`` emulate
  each GPU for them): the kernels' time, PyTorch's own elementwise, reduction, norm, pooling and loss kernels.

Pairs between the two are left out. A server whose host floor measures no more than :data:`HOST_HIDDEN` times the
call's device-side time (the same call simulated with an instant host, :func:`floor_call_ms`) did not time its host:
an eager call's Python, dispatch and launch take 3-10x that pointwise kernel on the servers that do (their floors,
21-32 us). The RTX 3090 Ti's file is such (its 19_ReLU 5.2 us, min 3.1 us, against 5.1 us of kernel): its events saw
the device alone (the host ran ahead of the GPU), so it has no launch-bound class, sets no host speed, and each of its
pairs but GEMMs and convolutions is compared, device bound, with the call simulated at an instant host
(:func:`device_timed`). Each problem is captured eagerly on each GPU it is compared on
(``estimator/kernelbench_eager.py --events``: KernelBench's timing loop, one profiler step per call; kept under
``<cache>/kernelbench_eager/<gpu>/``): PyTorch's kernels are the same on every GPU, but some of their launches are
not (a reduction splits its rows over more blocks on a GPU of more SMs), and a launch of few threads cannot cover
the DRAM latency (:mod:`estimator.memory_latency`). Each capture is simulated on its GPU with the counted host model; the prediction is the simulated time between the GPU reaching
the two events of the last call, what ``cudaEventElapsedTime`` reports. None of these GPUs' KernelBench times is
training data.

Host speed. The counted host costs were measured on this project's reference machine, a 2-core cloud VM; the GPU
servers' hosts are faster. Each server's speed over that machine is the counted model's time for
:data:`HOST_FLOOR_PROBLEM`'s call over the server's measured time (:func:`server_speeds`), and the reference host
that ``--host-speed 1`` stands for is their median (``--write-reference`` stores it in
``emulate/host_call_costs.json``; :class:`emulate.host_costs.ReferenceHost`). Each server is scored at the median
of the OTHER servers' speeds (:func:`held_out_speeds`): what a server nobody timed gets. The last rows give the
median |error| per class and GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.emulate import kernelbench
from benchmarks.emulate.kernelbench import NOT_TRITON, SCALAR_PRODUCT, error
from stepcast.emulate import config
from stepcast.emulate.host_costs import ReferenceHost, load_work_costs, write_reference_host
from stepcast.estimator.kernelbench import (
    DEVICE_BOUND_FLOORS, GPUS, HOST_FLOOR_PROBLEM, PROBLEMS, SCRIPT, TIMINGS, measured_ms,
)
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import shared_data_root

EAGER = "baseline_time_torch.json"
#: a (problem, GPU) is launch bound when its measured time is at most this many host floors
LAUNCH_BOUND_FLOORS = 1.5
#: a server's timing holds no host when its host floor measures at most this many times the call's device-side time
HOST_HIDDEN = 1.5
#: the host speed that stands for "no host in the timing": every host gap a billionth of itself
INSTANT_HOST = 1e9
LAUNCH, DEVICE = "launch bound", "device bound"
CALLS = 4                 # forwards per capture; the last is timed


def library_picked(problem: str) -> bool:
    """A GEMM or a convolution: cuBLAS or cuDNN picks its kernels for the GPU at hand."""
    return bool(NOT_TRITON.search(problem)) and problem != SCALAR_PRODUCT


def classes(measured: dict[str, dict[str, float]], hidden_host: frozenset[str] = frozenset()
            ) -> dict[str, dict[str, str]]:
    """{problem: {GPU: LAUNCH or DEVICE}} of the pairs compared (module docstring), problems with none left out.
    ``hidden_host``: the GPUs whose timings hold no host (:func:`device_timed`): every pair of theirs but a library's
    pick is device bound."""
    floor = measured.get(HOST_FLOOR_PROBLEM, {})
    out: dict[str, dict[str, str]] = {}
    for problem, per_gpu in measured.items():
        mine = {}
        for gpu, ms in per_gpu.items():
            if gpu not in floor:
                continue
            if gpu in hidden_host:
                if not library_picked(problem):
                    mine[gpu] = DEVICE
            elif ms <= LAUNCH_BOUND_FLOORS * floor[gpu]:
                mine[gpu] = LAUNCH
            elif ms >= DEVICE_BOUND_FLOORS * floor[gpu] and not library_picked(problem):
                mine[gpu] = DEVICE
        if mine:
            out[problem] = mine
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].split("_")[0])))


def capture(problem: Path, gpu: str, fresh: bool = False) -> Path | str:
    """The eager capture of one problem on the virtual ``gpu`` (cached), or why there is none."""
    return kernelbench.capture(problem, fresh, script=SCRIPT, args=["--events", str(CALLS), str(problem)],
                               folder=f"kernelbench_eager/{gpu}", hardware=gpu, timeout_s=600)


def elapsed_between_events(doc: dict[str, Any], gpu: str, server_speed: float | None = None
                           ) -> tuple[float, float] | str:
    """(predicted ms between the two timing events of the last full call, predicted device ms of its kernels) on
    ``gpu``, or why there is none. ``server_speed``: the host's speed over the machine the counted host costs were
    measured on (None: the shipped reference host's, :class:`emulate.host_costs.ReferenceHost`; :data:`INSTANT_HOST`:
    no host time at all)."""
    import dataclasses

    from stepcast.emulate.host_costs import load_work_costs
    from stepcast.emulate.simulate import simulate

    events = doc["events"]
    marks = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"]
    if len(marks) < 3:
        return "fewer than two calls were marked"
    first, end = marks[-2], marks[-1]
    records = [i for i in range(first, end) if events[i]["kind"] == "event_record"]
    if len(records) < 2:
        return "the call is not between two event records"
    work = load_work_costs()
    if server_speed is not None:
        work = dataclasses.replace(work, host_speed=server_speed)
    instant = server_speed == INSTANT_HOST   # no host at all: the counted work and any gap measured with the trace
    result = simulate([doc | {"hardware": gpu}], gpu, host_speed=INSTANT_HOST if instant else 1.0, work=work)
    timeline, us = result.timelines[0], result.durations.us[0]
    device = sum(float(us[i]) for i in range(records[0], records[1]) if events[i]["kind"] == "kernel")
    return (float(timeline.end[records[1]] - timeline.end[records[0]]) / 1e3, device / 1e3)


def evaluate(problem: str, traces: dict[str, Path | str], measured: dict[str, float], compared: dict[str, str],
             speeds: dict[str, float] | None = None) -> dict[str, Any]:
    """One problem's row: per GPU compared, its class, measured and predicted ms, or why it is left out.
    ``traces``: per GPU, its capture (or why there is none); ``speeds``: per GPU, its server's host speed to
    simulate at (:func:`held_out_speeds`; default the shipped reference host's)."""
    from stepcast.emulate.trace import read_trace

    row: dict[str, Any] = {"problem": problem, "gpus": {}}
    for gpu, bound in compared.items():
        trace = traces[gpu]
        if not isinstance(trace, Path):
            return {"problem": problem, "skipped": f"{gpu}: {trace}"}
        got = elapsed_between_events(read_trace(trace), gpu, (speeds or {}).get(gpu))
        if isinstance(got, str):
            return {"problem": problem, "skipped": got}
        row["gpus"][gpu] = {"class": bound, "measured_ms": measured[gpu], "predicted_ms": got[0],
                            "device_ms": got[1]}
    return row


def server_speeds(traces: dict[str, Path], floor_ms: dict[str, float]) -> dict[str, float]:
    """Per GPU server, its host's speed over the machine the counted host costs were measured on: the counted
    model's time for :data:`HOST_FLOOR_PROBLEM`'s call there (``traces``: its capture on each GPU; launch bound, so
    the time is the host's) over the time the server measured (``floor_ms``). What
    :class:`emulate.host_costs.ReferenceHost` takes its median of."""
    return {gpu: floor_call_ms(traces[gpu], gpu, 1.0) / ms for gpu, ms in floor_ms.items()}


def floor_call_ms(trace: Path, gpu: str, server_speed: float) -> float:
    """The time between the timing events of :data:`HOST_FLOOR_PROBLEM`'s last call on ``gpu`` (``trace``: its
    capture there) simulated at ``server_speed`` (:func:`elapsed_between_events`; :data:`INSTANT_HOST`: its kernel
    and launch latency, what the events span when the host is not in the timing); raises where there is none."""
    from stepcast.emulate.trace import read_trace

    got = elapsed_between_events(read_trace(trace), gpu, server_speed=server_speed)
    if isinstance(got, str):
        raise ValueError(f"{trace}: {HOST_FLOOR_PROBLEM}: {got}")
    return got[0]


def device_timed(traces: dict[str, Path], floor_ms: dict[str, float]) -> frozenset[str]:
    """The GPU servers whose host floor measured at most :data:`HOST_HIDDEN` times its call's device-side time
    (:func:`floor_call_ms` at an instant host): their timing events did not see the host (module docstring)."""
    return frozenset(gpu for gpu, ms in floor_ms.items()
                     if ms <= HOST_HIDDEN * floor_call_ms(traces[gpu], gpu, INSTANT_HOST))


def held_out_speeds(speeds: dict[str, float]) -> dict[str, float]:
    """Per GPU server, the reference host taken without it (the median of the other servers' speeds): what a
    server nobody measured gets, so that no server's figures are scored at a speed its own timing set."""
    from stepcast.emulate.host_costs import ReferenceHost

    return {gpu: ReferenceHost.of_servers({g: v for g, v in speeds.items() if g != gpu}, "").speed
            for gpu in speeds if len(speeds) > 1}


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
                        "model, each server at the other servers' median host speed) vs measured")
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.kernelbench_eager",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=None, help="comma-separated problem stems (default: every level-1 "
                                                         "problem compared on some GPU)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--fresh", action="store_true", help="capture again even where a trace is cached")
    parser.add_argument("--json", type=Path, default=None, help="write every row and the medians here (JSON)")
    parser.add_argument("--write-reference", action="store_true",
                        help=f"write the servers' median host speed into {config.HOST_CALL_COSTS_FILE} as the "
                             "reference host (what --host-speed 1 means)")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    measured = measured_ms(root, EAGER)
    if not measured:
        print(f"stepcast: no KernelBench eager timings under {root / TIMINGS} (set STEPCAST_SHARED_DATA)",
              file=sys.stderr)
        return 2
    only = [p.strip() for p in args.problems.split(",")] if args.problems else None
    if only and not set(only) & set(measured):
        return not_compared(only)
    console = Console(width=160)
    floors = {gpu: capture(root / PROBLEMS / f"{HOST_FLOOR_PROBLEM}.py", gpu, fresh=args.fresh)
              for gpu in measured[HOST_FLOOR_PROBLEM]}
    failed = {gpu: why for gpu, why in floors.items() if not isinstance(why, Path)}
    if failed:
        gpu, why = next(iter(failed.items()))
        print(f"stepcast: {HOST_FLOOR_PROBLEM}: no capture on {gpu} ({why}); the servers' host speeds need it",
              file=sys.stderr)
        return 2
    hidden = device_timed(floors, measured[HOST_FLOOR_PROBLEM])
    compared = classes(measured, hidden)
    if only:
        compared = {p: c for p, c in compared.items() if p in only}
        if not compared:
            return not_compared(only)
    timed = {gpu: ms for gpu, ms in measured[HOST_FLOOR_PROBLEM].items() if gpu not in hidden}
    speeds = server_speeds(floors, timed)
    reference = ReferenceHost.of_servers(speeds, reference_name(speeds))
    held_out = held_out_speeds(speeds)
    scored_at = held_out | {gpu: INSTANT_HOST for gpu in hidden}   # a server that did not time its host: none
    print_speeds(speeds, scored_at, reference, console)
    if args.write_reference:
        write_reference_host(reference)
        console.print(f"wrote the reference host ({reference.speed:.3f}) into {config.HOST_CALL_COSTS_FILE}")
    rows = []
    for n, (problem, mine) in enumerate(compared.items(), 1):
        console.print(f"[{n}/{len(compared)}] {problem}")
        traces = {gpu: capture(root / PROBLEMS / f"{problem}.py", gpu, fresh=args.fresh) for gpu in mine}
        rows.append(evaluate(problem, traces, measured[problem], mine, scored_at))
    print_table(rows, console)
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "medians": medians(rows),
                                      "launch_bound_floors": LAUNCH_BOUND_FLOORS,
                                      "device_bound_floors": DEVICE_BOUND_FLOORS,
                                      "server_speeds": speeds,
                                      "held_out_speeds": held_out,
                                      "host_not_timed": sorted(hidden),
                                      "reference_host": {"speed": reference.speed, "name": reference.name}})
    return 0


def not_compared(only: list[str]) -> int:
    print(f"stepcast: --problems: none of {', '.join(only)} is compared (launch bound: at most "
          f"{LAUNCH_BOUND_FLOORS:g}x {HOST_FLOOR_PROBLEM}'s eager time on a GPU; device bound: at least "
          f"{DEVICE_BOUND_FLOORS:g}x, and no GEMM or convolution)", file=sys.stderr)
    return 2


def reference_name(servers: dict[str, float]) -> str:
    """How the reference host is named in the host cost file and in reports: the servers whose median it is."""
    return (f"median KernelBench GPU server ({', '.join(sorted(servers))}; {HOST_FLOOR_PROBLEM}'s eager call, "
            "python -m benchmarks.emulate.kernelbench_eager)")


def print_speeds(speeds: dict[str, float], held_out: dict[str, float], reference: "ReferenceHost",
                 console: Console) -> None:
    table = Table(title=f"Host speed of each GPU server over the counted model's machine ({HOST_FLOOR_PROBLEM}: "
                        "predicted there / measured); each server is scored at the median of the others'")
    for col in ("GPU server", "speed", "scored at"):
        table.add_column(col, justify="left" if col == "GPU server" else "right")
    for gpu, v in speeds.items():
        table.add_row(gpu, f"{v:.3f}", f"{held_out.get(gpu, float('nan')):.3f}")
    for gpu in sorted(set(held_out) - set(speeds)):
        table.add_row(gpu, "host not timed", "instant host")
    shipped = load_work_costs().host_speed
    table.add_row("[bold]reference (median)", f"[bold]{reference.speed:.3f}", f"shipped {shipped:.3f}")
    console.print(table)


if __name__ == "__main__":
    sys.exit(main())
