"""How well are convolutions timed? The implicit-GEMM rows (:func:`profiling.classify.conv_parts`) against real
timings, beside what the emulator did before they existed (every convolution kernel at the launch floor).

    python -m emulate.conv_benchmark                          # KernelBench level-1 convolutions + ResNet-50 traces
    python -m emulate.conv_benchmark --problems 63_conv,87_conv --no-kineto --json out.json

Two checks:

- **KernelBench** (``kernelbench/`` under the shared data, read its SOURCE.md): the eager forward of each level-1
  convolution problem (54-87), fp32, CUDA events over 100 calls, on KernelBench's GPUs
  (:data:`emulate.kernelbench_benchmark.GPUS`). The
  problems run in one capture a GPU on the emulated driver emulating it (cuDNN runs for real and picks its kernels
  for that device, and the rows follow the kernels: ``emulate/e2e/kernelbench_eager.py``, kept under
  ``<cache>/conv_benchmark/``; a cached capture is re-collated, so its rows are today's classifier's; a run the
  emulated driver crashes in loses its op table, so the problem it crashed in is left out and the others run
  again). Each problem's last forward is simulated on its GPU and its predicted device time (the sum of its
  kernels) printed beside the measured time, with the convolution rows (``model``) and without them (``floor``:
  today's launch floor for every convolution kernel). A (problem, GPU) is compared only when its measured time
  is at least :data:`emulate.kernelbench_benchmark.DEVICE_BOUND_FLOORS` host floors (the eager time of its
  one-kernel problem on that GPU).
- **ResNet-50 on V100** (the Kineto traces of ``kineto/tb_plugin/samples``): every convolution op call (forward,
  backward input, backward weight: PyTorch 1.8 recorded them as separate ops) with its kernels' measured time,
  against the estimator's time of its row on the trace's GPU. These traces record shapes but not argument values,
  so stride and padding are read off the trace: the output of a forward is the input of the batch norm that
  follows it; a backward takes the geometry of the forward with the same weight and output.

The last rows of each table give the median |error| per GPU (KernelBench) and per pass (ResNet-50).
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from emulate.kernelbench_benchmark import PROBLEMS, TIMINGS, device_bound, error, kernel_us, measured_ms
from profiling.atomic import write_json_atomic
from profiling.classify import classify_op, is_convolution_op
from profiling.paths import REPO_ROOT, cache_root, shared_data_root

EAGER = "baseline_time_torch.json"
CONV_PROBLEMS = range(54, 88)      # KernelBench level 1: the convolutions
SCRIPT = REPO_ROOT / "emulate" / "e2e" / "kernelbench_eager.py"
CALLS = 2                          # forwards per problem: the first warms cuDNN up, the last is timed
KINETO = "kineto/tb_plugin/samples/resnet50_*/*.pt.trace.json.gz"
LAUNCH_FLOOR_US = 2.0
MAX_RUNS = 24                      # captures a GPU before the problems left are given up
FOLDS = 5                          # folds over problems for the family table held out by problem


def is_conv_op(op: str | None) -> bool:
    """Whether a kernel's innermost aten op is a convolution (the classifier's own list)."""
    return bool(op) and is_convolution_op(op)


# ---- KernelBench ----------------------------------------------------------------------------------------------------

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
    from emulate.e2e.emulation import emulate_script

    key = hashlib.sha1("\n".join(problems).encode()).hexdigest()[:12]
    trace_dir = cache_root() / "conv_benchmark" / f"{gpu}-{key}"
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
    from emulate.collate import collate

    logs = sorted(trace_dir.glob("rank0.log.driver.*.jsonl"))
    if logs:
        collate(logs[-1:], hardware=gpu, world_size=1, ranks_per_node=1, trace_dir=trace_dir)


def capture_all(problems: list[str], root: Path, gpu: str,
                fresh: bool = False) -> tuple[list[tuple[Path, list[str]]], dict[str, str]]:
    """Every problem captured on ``gpu``: ([(trace, the problems it holds in order)], {problem: why it has none}).
    A run that fails (the emulated driver can crash in a cuDNN engine) has no op table, so none of its rows: the
    problem it failed in is left out and the others run again, at most :data:`MAX_RUNS` runs a GPU."""
    from emulate.trace import read_trace

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
    import estimator as estimators

    est = estimators.load(bundle)
    est.conv_families = None
    return est


def conv_calls(events: list[dict[str, Any]], us: list[float], window: tuple[int, int]) -> list[dict[str, Any]]:
    """The convolution calls of a window: {family, ms, corrected, kernels}, grouped as the simulator groups them
    (:func:`estimator.conv_families.call_kernels`: the first kernel, which carries the row, and the ``op_part``
    kernels after it); ``corrected``: timed as a GEMM (what the family table scales; depthwise calls are timed by
    their bytes)."""
    from estimator.conv_families import call_family, call_kernels

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
    from emulate.trace import read_trace

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


def held_out_families(rows: list[dict[str, Any]], folds: int = FOLDS) -> None:
    """Adds ``family_gpu_ms`` (the family table fitted on the other GPUs' problems) and ``family_problem_ms`` (fitted
    on the other folds' problems, all GPUs; :data:`FOLDS` folds by a hash of the problem name) to each (problem,
    GPU) of ``rows``: neither ever sees the row it predicts. GPUs in ``conv_families.NOT_FITTED`` are never fitted."""
    from estimator import conv_families as cf

    flat = problem_gpus(rows)
    gpus = sorted({p["gpu"] for p in flat})
    by_gpu = {g: cf.fit(cf.training_records(flat, [o for o in gpus if o != g and o not in cf.NOT_FITTED]))
              for g in gpus}
    fold = {r["problem"]: int(hashlib.sha1(r["problem"].encode()).hexdigest(), 16) % folds for r in rows}
    fitted = [o for o in gpus if o not in cf.NOT_FITTED]
    by_fold = {k: cf.fit(cf.training_records([p for p in flat if fold[p["problem"]] != k], fitted))
               for k in range(folds)}
    for r in rows:
        for gpu, g in r["gpus"].items():
            entry = {"predicted_ms": g["model_ms"], "calls": g["calls"]}
            g["family_gpu_ms"] = cf.corrected_ms(entry, by_gpu[gpu])
            g["family_problem_ms"] = cf.corrected_ms(entry, by_fold[fold[r["problem"]]])


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


# ---- ResNet-50 Kineto traces ----------------------------------------------------------------------------------------

def _dims(value: Any) -> list:
    return [list(d) if isinstance(d, (list, tuple)) else [] for d in value] if isinstance(value, (list, tuple)) else []


def forward_geometry(ops: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """{op row: {x, w, y, stride, padding, seq}} of each forward convolution of a trace without argument values:
    ``y`` is the input of the first batch norm after it on its thread with ``w``'s output channels; ``seq`` its
    autograd sequence number (its backward node carries the same)."""
    out: dict[int, dict[str, Any]] = {}
    norms = ops[ops["name"].str.contains("batch_norm", na=False)]
    for idx, op in ops[ops["name"] == "aten::cudnn_convolution"].iterrows():
        dims = _dims(op["input_dims"])
        if len(dims) < 2 or len(dims[0]) < 3:
            continue
        x, w = dims[0], dims[1]
        after = norms[(norms["tid"] == op["tid"]) & (norms["ts"] >= op["ts"] + op["dur"])]
        y = next((d[0] for d in map(_dims, after["input_dims"]) if d and len(d[0]) == len(x) and d[0][1] == w[0]), None)
        if y is None:
            continue
        stride = [max(1, round(i / o)) for i, o in zip(x[2:], y[2:])]
        padding = [max(0, -(-((o - 1) * s + k - i) // 2)) for i, o, s, k in zip(x[2:], y[2:], stride, w[2:])]
        seq = op.get("sequence_number")
        out[idx] = {"x": x, "w": w, "y": y, "stride": stride, "padding": padding,
                    "seq": int(seq) if pd.notna(seq) else None}
    return out


def backward_sequence(ops: pd.DataFrame) -> dict[int, int]:
    """{op row: sequence number of the autograd node (``...Backward``) it runs in}, for ops inside one."""
    from profiling.kineto import op_parents

    parents = op_parents(ops)
    names, seqs = ops["name"].to_numpy(), ops["sequence_number"].to_numpy()
    out: dict[int, int] = {}
    for pos in range(len(ops)):
        up = parents[pos]
        while up >= 0 and not (str(names[up]).endswith(("Backward", "Backward0")) and pd.notna(seqs[up])):
            up = parents[up]
        if up >= 0:
            out[ops.index[pos]] = int(seqs[up])
    return out


def kineto_args(name: str, dims: list, geometry: list[dict[str, Any]], seq: int | None = None) -> list | None:
    """Argument values of one convolution op call (aligned with its Input Dims) from its forward's geometry: the
    forward with the backward's sequence number, else the first with the same shapes."""
    def find(**want: Any) -> dict[str, Any] | None:
        same = [g for g in geometry if all(g[k] == v for k, v in want.items())]
        return next((g for g in same if seq is not None and g["seq"] == seq), same[0] if same else None)

    if name == "cudnn_convolution":
        g = find(x=dims[0], w=dims[1])
        return [None, None, g["padding"], g["stride"], [1] * len(g["stride"]), 1, False, False, False] if g else None
    if name == "cudnn_convolution_backward_input":
        g = find(y=dims[1], w=dims[2])
        return [g["x"], None, None, g["padding"], g["stride"], [1] * len(g["stride"]), 1] if g else None
    if name == "cudnn_convolution_backward_weight":
        g = find(y=dims[1], x=dims[2])
        return [g["w"], None, None, g["padding"], g["stride"], [1] * len(g["stride"]), 1] if g else None
    return None


PASSES = {"cudnn_convolution": "fprop", "cudnn_convolution_backward_input": "dgrad",
          "cudnn_convolution_backward_weight": "wgrad"}


def kineto_calls(path: Path) -> tuple[str | None, list[dict[str, Any]]]:
    """(hardware, one entry per convolution op call with its kernels' measured time and estimator row)."""
    from profiling.kineto import read_trace

    trace = read_trace(path)
    events = trace.events
    ops = events[events["cat"].isin(("cpu_op", "Operator"))]
    geometry = list(forward_geometry(ops).values())
    sequence = backward_sequence(ops[ops["name"].str.contains("onvolution", na=False)])
    kernels = trace.kernels(("kernel",))
    kernels = kernels[(kernels["op_index"] >= 0) & kernels["op_name"].isin([f"aten::{n}" for n in PASSES])]
    calls = []
    for op_index, group in kernels.groupby("op_index", sort=False):
        name = str(group["op_name"].iloc[0]).split("::")[-1]
        dims = _dims(group["op_input_dims"].iloc[0])
        types = list(group["op_input_types"].iloc[0] or [])
        args = kineto_args(name, dims, geometry, sequence.get(op_index))
        row = classify_op(f"aten::{name}", dims, types, str(group["name"].iloc[0]), args=args) if args else None
        calls.append({"op": name, "pass": PASSES[name], "dims": dims, "kernels": len(group),
                      "measured_us": float(group["dur"].sum()), "row": row,
                      "names": [str(n) for n in group["name"]]})
    return trace.hardware_id, calls


def predict_calls(hardware: str, calls: list[dict[str, Any]], estimator: Any) -> None:
    """Each call's ``predicted_us`` (its row on ``hardware``; None without a row), ``family_us`` (scaled by the
    estimator's convolution-family table where it applies: a forward timed as a GEMM; V100 is never fitted on) and
    ``floor_us``."""
    from estimator.conv_families import corrects

    table = getattr(estimator, "conv_families", None)
    rows = [{**c["row"], "hardware": hardware} for c in calls if c["row"]]
    values = estimator.predict_frame(pd.DataFrame.from_records(rows))["predicted_us"].to_numpy() if rows else []
    it = iter(values)
    for c in calls:
        c["predicted_us"] = float(next(it)) if c["row"] else None
        scaled = table and c["row"] and c["row"]["family"] == "gemm" and corrects(f"aten::{c['op']}")
        scale = table.factor_of(c.get("names", [])) if scaled else 1.0
        c["family_us"] = c["predicted_us"] * scale if c["row"] else None
        c["floor_us"] = LAUNCH_FLOOR_US * c["kernels"]


# ---- report ---------------------------------------------------------------------------------------------------------

def print_problems(rows: list[dict[str, Any]], console: Console) -> dict[str, dict[str, float]]:
    """The KernelBench table: per (problem, GPU) measured ms and the error of the GEMM rows (``model``), of the
    family table held out by GPU (``family/GPU``) and by problem (``family/problem``), and of the launch floor."""
    table = Table(title="KernelBench eager convolutions (fp32, cuDNN): predicted vs measured forward")
    cols = {"model": "model_ms", "family_gpu": "family_gpu_ms", "family_problem": "family_problem_ms",
            "floor": "floor_ms"}
    for col in ("problem", "GPU", "families", "measured ms", "model ms", "err %", "family/GPU err %",
                "family/problem err %", "floor err %"):
        table.add_column(col, justify="left" if col in ("problem", "GPU", "families") else "right")
    errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: {k: [] for k in cols})
    for row in rows:
        if not row["gpus"]:
            table.add_row(row["problem"][:40], "-", "", "", "", "", "", "",
                          "; ".join(row["notes"])[:100] or "host bound on every GPU")
            continue
        for gpu, g in row["gpus"].items():
            err = {k: error(g[c], g["measured_ms"]) for k, c in cols.items() if c in g}
            for k, e in err.items():
                errors[gpu][k].append(abs(e))
            families = ",".join(sorted({c["family"] or "-" for c in g.get("calls", []) if c["corrected"]}))
            table.add_row(row["problem"][:40], gpu, families[:24], f"{g['measured_ms']:.3f}", f"{g['model_ms']:.3f}",
                          *(f"{err[k]:+.1f}" if k in err else "" for k in cols))
    medians = {gpu: {k: statistics.median(v) for k, v in e.items() if v} for gpu, e in errors.items()}
    for gpu, m in sorted(medians.items()):
        table.add_row(f"median |error| ({len(errors[gpu]['model'])})", gpu, "", "", "",
                      *(f"{m[k]:.1f}" if k in m else "" for k in cols))
    console.print(table)
    return medians


def print_kineto(traces: list[tuple[str, str, list[dict[str, Any]]]], console: Console) -> dict[str, dict[str, float]]:
    table = Table(title="ResNet-50 convolution op calls on V100 (Kineto): estimator row vs measured kernels")
    for col in ("trace", "GPU", "pass", "calls", "no row", "measured ms", "model ms", "median |err| %",
                "family |err| %", "floor |err| %"):
        table.add_column(col, justify="left" if col in ("trace", "GPU", "pass") else "right")
    medians: dict[str, dict[str, float]] = {}
    for name, hardware, calls in traces:
        for p in ("fprop", "dgrad", "wgrad", "all"):
            sel = [c for c in calls if p in ("all", c["pass"])]
            timed = [c for c in sel if c["predicted_us"] is not None]
            if not timed:
                continue
            model = [abs(error(c["predicted_us"], c["measured_us"])) for c in timed]
            family = [abs(error(c["family_us"], c["measured_us"])) for c in timed]
            floor = [abs(error(c["floor_us"], c["measured_us"])) for c in timed]
            medians[f"{name}:{p}"] = {"model": statistics.median(model), "family": statistics.median(family),
                                      "floor": statistics.median(floor)}
            table.add_row(name, hardware, p, str(len(sel)), str(len(sel) - len(timed)),
                          f"{sum(c['measured_us'] for c in timed) / 1e3:.1f}",
                          f"{sum(c['predicted_us'] for c in timed) / 1e3:.1f}", f"{statistics.median(model):.1f}",
                          f"{statistics.median(family):.1f}", f"{statistics.median(floor):.1f}")
    console.print(table)
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate.conv_benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=None, help="comma-separated problem stems or prefixes (default: all)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--fresh", action="store_true", help="capture again even where a trace is cached")
    parser.add_argument("--no-kernelbench", action="store_true", help="skip the KernelBench check (no capture)")
    parser.add_argument("--no-kineto", action="store_true", help="skip the ResNet-50 trace check")
    parser.add_argument("--json", type=Path, default=None, help="write every row here (JSON)")
    parser.add_argument("--bundle", default=None, help="estimator bundle (default: the shipped one); its "
                        "convolution-family table is off here, the held-out columns fit their own")
    args = parser.parse_args(argv)
    root = args.root or shared_data_root()
    console = Console(width=160)
    out: dict[str, Any] = {}
    if not args.no_kernelbench:
        only = [p.strip() for p in args.problems.split(",")] if args.problems else None
        rows = kernelbench_rows(root, args.bundle, only, args.fresh, console)
        if not rows:
            print(f"stepcast: no KernelBench convolution timings under {root / TIMINGS}"
                  f"{' matching --problems' if only else ''} (set STEPCAST_SHARED_DATA)", file=sys.stderr)
            return 2
        held_out_families(rows)
        out["kernelbench"] = {"rows": rows, "least_measured_ms": device_bound(eager_ms(root)),
                              "median_abs_error": print_problems(rows, console)}
    if not args.no_kineto:
        import estimator as estimators

        est = estimators.load(args.bundle)
        traces = []
        for path in sorted(root.glob(KINETO)):
            hardware, calls = kineto_calls(path)
            if hardware is None:
                continue
            predict_calls(hardware, calls, est)
            traces.append((path.parent.name, hardware, calls))
        if traces:
            out["kineto"] = {"medians": print_kineto(traces, console),
                             "calls": {name: calls for name, _, calls in traces}}
    if args.json:
        write_json_atomic(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
