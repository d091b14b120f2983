"""KernelBench's level-1 problems as the convolution-family table's training data (:mod:`estimator.conv_families`,
``python -m stepcast.estimator.conv_families --fit``).

KernelBench (``kernelbench/`` under the shared data, read its SOURCE.md) timed each level-1 problem's reference
module on six GPUs (:data:`GPUS`), eagerly and compiled, fp32, CUDA events over 100 calls. The eager convolution
forwards (problems 54-87) run in one capture a GPU on the emulated driver emulating it (cuDNN runs for real and
picks its kernels for that device, and the rows follow the kernels: ``estimator/kernelbench_eager.py``, kept under
``<cache>/conv_benchmark/``; a cached capture is re-collated, so its rows are today's classifier's; a run the
emulated driver crashes in loses its op table, so the problem it crashed in is left out and the others run again).
Each problem's last forward is simulated on its GPU with the estimator's convolution-family table off
(:func:`uncorrected_estimator`), beside the measured time: what the table's factors are fitted on
(:func:`problem_gpus`). A (problem, GPU) counts only when its measured time is at least
:data:`DEVICE_BOUND_FLOORS` host floors (the eager time of :data:`HOST_FLOOR_PROBLEM` on that GPU).

The KernelBench benchmarks (``python -m benchmarks.emulate.conv``, ``.kernelbench``, ``.kernelbench_eager``,
``.matmul``) read the same timings and captures through this module.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from stepcast.profiling.classify import is_convolution_op
from stepcast.profiling.paths import cache_root, shared_data_root

#: KernelBench timing folder -> catalog id (one folder per GPU: the L40S's Modal run, not its Babel one)
GPUS = {"T4_modal": "t4", "B200_together": "b200", "L40S_modal": "l40s", "A6000_babel": "rtx-a6000",
        "A10G_modal": "a10g", "RTX_3090_Ti": "rtx-3090-ti"}
TIMINGS = "kernelbench/results/timing"
PROBLEMS = "kernelbench/KernelBench/level1"
COMPILED = "baseline_time_torch_compile_inductor_default.json"
#: the host floor of a compiled forward on a GPU: its time for this problem (one pointwise kernel on 1 MB), which
#: is the Python dispatch and launch of a compiled module, not kernel time
HOST_FLOOR_PROBLEM = "19_ReLU"
#: a (problem, GPU) is device bound, and compared, when its measured time is at least this many host floors
DEVICE_BOUND_FLOORS = 3.0
EAGER = "baseline_time_torch.json"
CONV_PROBLEMS = range(54, 88)      # KernelBench level 1: the convolutions
#: the script each capture runs (plain PyTorch: it runs the same on a real GPU)
SCRIPT = Path(__file__).with_name("kernelbench_eager.py")
CALLS = 2                          # forwards per problem: the first warms cuDNN up, the last is timed
MAX_RUNS = 24                      # captures a GPU before the problems left are given up
#: the captures' folder under the cache (the name from when the convolution benchmark made them: kept, so the
#: captures made then are reused)
CAPTURES = "conv_benchmark"


def measured_ms(root: Path, timings: str = COMPILED) -> dict[str, dict[str, float]]:
    """{problem stem: {catalog id: mean ms of the forward}} for the level-1 problems, from the ``timings`` file of
    each GPU's folder (default: the compiled forwards)."""
    out: dict[str, dict[str, float]] = {}
    for folder, gpu in GPUS.items():
        path = root / TIMINGS / folder / timings
        if not path.is_file():
            continue
        for name, row in json.loads(path.read_text()).get("level1", {}).items():
            out.setdefault(Path(name).stem, {})[gpu] = float(row["mean"])
    return out


def device_bound(measured: dict[str, dict[str, float]]) -> dict[str, float]:
    """{GPU: the least measured ms compared there}: :data:`DEVICE_BOUND_FLOORS` times its host floor."""
    floor = measured.get(HOST_FLOOR_PROBLEM, {})
    return {gpu: DEVICE_BOUND_FLOORS * ms for gpu, ms in floor.items()}


def kernel_us(events: list[dict[str, Any]], gpu: str, est: Any = None) -> list[float]:
    """Predicted us of every event of a capture on ``gpu`` (one simulation for all its problems; ``est``: an
    estimator, default the shipped bundle). The convolution problems here and the KernelBench
    benchmarks sum these over each problem's window."""
    from stepcast.emulate.simulate import simulate

    doc = {"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 1, "hardware": gpu, "meta": {},
           "events": events}
    return [float(u) for u in simulate([doc], gpu, estimator=est).durations.us[0]]


def is_conv_op(op: str | None) -> bool:
    """Whether a kernel's innermost aten op is a convolution (the classifier's own list)."""
    return bool(op) and is_convolution_op(op)


def eager_ms(root: Path) -> dict[str, dict[str, float]]:
    """{problem stem: {catalog id: mean ms of the eager forward}} for the level-1 problems."""
    return measured_ms(root, EAGER)


def conv_problems(measured: dict[str, dict[str, float]], only: list[str] | None = None) -> list[str]:
    """The convolution problems with timings (``only``: stems or their prefixes), in KernelBench's order."""
    keep = [p for p in measured if int(p.split("_")[0]) in CONV_PROBLEMS]
    if only:
        keep = [p for p in keep if any(p.startswith(o) for o in only)]
    return sorted(keep, key=lambda p: int(p.split("_")[0]))


def capture(problems: list[str], root: Path, gpu: str, fresh: bool = False) -> tuple[Path | None, str | None]:
    """(trace, why the run failed) of ``problems`` run eagerly, in order, on the emulated driver emulating ``gpu``
    (cached by GPU and problem set; a failed run keeps its trace up to the failure). Each GPU has its own
    capture: cuDNN picks its kernels (Winograd or implicit GEMM, TF32 or not) for the device it runs on, and the
    rows follow the kernels."""
    from stepcast.emulate.emulation import emulate_script

    key = hashlib.sha1("\n".join(problems).encode()).hexdigest()[:12]
    trace_dir = cache_root() / CAPTURES / f"{gpu}-{key}"
    trace, failed = trace_dir / "rank0.trace.json", trace_dir / "failed.txt"
    if trace.is_file() and not fresh:
        if not failed.is_file():
            recollate(trace_dir, gpu)
        return trace, failed.read_text() if failed.is_file() else None
    paths = [str(root / PROBLEMS / f"{p}.py") for p in problems]
    done = emulate_script(SCRIPT, [str(CALLS), *paths], gpu, kernels=False, timeout_s=3600, trace_dir=trace_dir)
    error = None if done["ok"] else f"emulation failed: {done['error'][:300]}"
    if error and trace_dir.is_dir():
        failed.write_text(error)
    return (trace if trace.is_file() else None), error or (None if trace.is_file() else "no trace written")


def recollate(trace_dir: Path, gpu: str) -> None:
    """Rewrite a cached capture's trace from its driver log, so its rows are the classifier's of today."""
    from stepcast.emulate.collate import collate

    logs = sorted(trace_dir.glob("rank0.log.driver.*.jsonl"))
    if logs:
        collate(logs[-1:], hardware=gpu, world_size=1, ranks_per_node=1, trace_dir=trace_dir)


def capture_all(problems: list[str], root: Path, gpu: str,
                fresh: bool = False) -> tuple[list[tuple[Path, list[str]]], dict[str, str]]:
    """Every problem captured on ``gpu``: ([(trace, the problems it holds in order)], {problem: why it has none}).
    A run that fails (the emulated driver can crash in a cuDNN engine) has no op table, so none of its rows: the
    problem it failed in is left out and the others run again, at most :data:`MAX_RUNS` runs a GPU."""
    from stepcast.emulate.trace import read_trace

    failed: dict[str, str] = {}
    todo = list(problems)
    for _ in range(MAX_RUNS):
        trace, error = capture(todo, root, gpu, fresh)
        if error is None:
            return [(trace, todo)], failed
        marks = sum(ev["kind"] == "iteration" for ev in read_trace(trace)["events"]) if trace else 1
        at = min(len(todo) - 1, max(0, marks - 1) // CALLS)
        failed[todo[at]] = error
        todo = todo[:at] + todo[at + 1:]
        if not todo:
            break
    failed.update({p: f"not captured: {MAX_RUNS} runs on {gpu} failed" for p in todo})
    return [], failed


def problem_windows(events: list[dict[str, Any]], count: int) -> list[tuple[int, int]] | None:
    """(first, end) event positions of each problem's last forward: steps are cut at the iteration markers,
    :data:`CALLS` per problem; None when the markers do not give ``count`` problems."""
    marks = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"] + [len(events)]
    if len(marks) < count * CALLS + 1:
        return None
    return [(marks[(p + 1) * CALLS - 1], marks[(p + 1) * CALLS]) for p in range(count)]


def without_conv_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace as the emulator had it before convolutions had rows: their kernels carry no spec (launch floor)."""
    out = []
    for ev in events:
        if ev["kind"] == "kernel" and is_conv_op(ev.get("op")):
            ev = {**ev, "spec": None, "op_part": False}
        out.append(ev)
    return out


def uncorrected_estimator(bundle: str | None = None) -> Any:
    """The estimator with its convolution-family table off: the GEMM rows as they are (what the table corrects)."""
    import stepcast.estimator as estimators

    est = estimators.load(bundle)
    est.conv_families = None
    return est


def conv_calls(events: list[dict[str, Any]], us: list[float], window: tuple[int, int]) -> list[dict[str, Any]]:
    """The convolution calls of a window: {family, ms, corrected, kernels}, grouped as the simulator groups them
    (:func:`estimator.conv_families.call_kernels`: the first kernel, which carries the row, and the ``op_part``
    kernels after it); ``corrected``: timed as a GEMM (what the family table scales; depthwise calls are timed by
    their bytes)."""
    from stepcast.estimator.conv_families import call_family, call_kernels

    kernel = [ev["kind"] == "kernel" for ev in events]
    parts = [ev.get("op_part") for ev in events]
    calls: list[dict[str, Any]] = []
    for i in range(*window):
        ev = events[i]
        if not kernel[i] or parts[i] or not is_conv_op(ev.get("op")):
            continue
        kernels = call_kernels(i, kernel, parts, window[1])
        spec = ev.get("spec") or {}
        calls.append({"ms": us[i] / 1e3, "corrected": spec.get("family") == "gemm",
                      "family": call_family(events[n]["name"] for n in kernels), "kernels": len(kernels)})
    return calls


def evaluate_problems(problems: list[str], traces: dict[str, list[tuple[Path, list[str]]]],
                      measured: dict[str, dict[str, float]], least: dict[str, float],
                      failed: dict[str, dict[str, str]] | None = None, est: Any = None) -> list[dict[str, Any]]:
    """One row a problem: per device-bound GPU, the convolution kernels of its capture on that GPU (``traces``:
    GPU -> [(trace, its problems)]; ``failed``: GPU -> {problem: why it has no capture}), the measured, model
    (``est``, default: :func:`uncorrected_estimator`) and floor ms, and its convolution calls
    (:func:`conv_calls`)."""
    from stepcast.emulate.trace import read_trace

    est = est if est is not None else uncorrected_estimator()
    rows: dict[str, dict[str, Any]] = {p: {"problem": p, "gpus": {}, "notes": []} for p in problems}
    for gpu, why in (failed or {}).items():
        for p, reason in why.items():
            rows[p]["notes"].append(f"{gpu}: {reason}")
    for gpu, parts in traces.items():
        for trace, held in parts:
            events = [dict(ev) for ev in read_trace(trace)["events"]]
            floor_events = without_conv_rows(events)
            us, floor_us = kernel_us(events, gpu, est), kernel_us(floor_events, gpu, est)
            for problem, window in zip(held, problem_windows(events, len(held)) or []):
                if problem not in rows:
                    continue
                ms = measured[problem].get(gpu)
                conv = [events[i] for i in range(*window)
                        if events[i]["kind"] == "kernel" and is_conv_op(events[i].get("op"))]
                if not conv:
                    rows[problem]["notes"].append(f"{gpu}: no convolution kernel in its forward")
                if ms is None or ms < least.get(gpu, float("inf")) or not conv:
                    continue
                kernels = [i for i in range(*window) if events[i]["kind"] == "kernel"]
                rows[problem]["gpus"][gpu] = {
                    "measured_ms": ms, "model_ms": sum(us[i] for i in kernels) / 1e3,
                    "floor_ms": sum(floor_us[i] for i in kernels) / 1e3, "conv_kernels": len(conv),
                    "kernels": [k["name"][:80] for k in conv], "rows": [k["spec"] for k in conv if k.get("spec")],
                    "calls": conv_calls(events, us, window)}
    return list(rows.values())


def problem_gpus(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat (problem, GPU) entries {problem, gpu, measured_ms, predicted_ms, calls} of :func:`evaluate_problems`'s
    rows: what :mod:`estimator.conv_families` fits."""
    return [{"problem": r["problem"], "gpu": gpu, "measured_ms": g["measured_ms"], "predicted_ms": g["model_ms"],
             "calls": g["calls"]} for r in rows for gpu, g in r["gpus"].items()]


def kernelbench_rows(root: Path | None = None, bundle: str | None = None, only: list[str] | None = None,
                     fresh: bool = False, console: Console | None = None) -> list[dict[str, Any]]:
    """:func:`evaluate_problems` over every GPU KernelBench timed (captures cached), the estimator ``bundle``'s
    GEMM rows uncorrected."""
    root = root or shared_data_root()
    measured = eager_ms(root)
    problems = conv_problems(measured, only)
    least = device_bound(measured)
    # the bundle first: a bundle that does not load (a file the checksums do not list) would otherwise fail every
    # capture's simulation after its capture, and each failure is cached (a refit of conv_families.json ran 36 min so)
    estimator = uncorrected_estimator(bundle)
    traces, failed = {}, {}
    for gpu in sorted({g for p in problems for g in measured[p]}):
        if console:
            console.print(f"capturing {len(problems)} problems on the emulated driver as {gpu} (cached)")
        traces[gpu], failed[gpu] = capture_all(problems, root, gpu, fresh=fresh)
    return evaluate_problems(problems, traces, measured, least, failed, estimator)
