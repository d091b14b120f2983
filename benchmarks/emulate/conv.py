"""How well are convolutions timed? The implicit-GEMM rows (:func:`profiling.classify.conv_parts`) against real
timings, beside what the emulator did before they existed (every convolution kernel at the launch floor).

    python -m benchmarks.emulate.conv                          # KernelBench level-1 convolutions + ResNet-50 traces
    python -m benchmarks.emulate.conv --problems 63_conv,87_conv --no-kineto --json out.json

Two checks:

- **KernelBench**: the eager forward of each level-1 convolution problem (54-87) on KernelBench's GPUs, captured
  and predicted as the convolution-family table's training data is (:mod:`estimator.kernelbench`: the captures,
  the device-bound rule, the uncorrected estimator). Each problem's predicted device time (the sum of its kernels)
  is printed beside the measured time, with the convolution rows (``model``), without them (``floor``: today's
  launch floor for every convolution kernel) and with the family table fitted on the other GPUs' and on the other
  problems' rows (:func:`held_out_families`).
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

from benchmarks.emulate.kernelbench import error
from stepcast.estimator.kernelbench import TIMINGS, device_bound, eager_ms, kernelbench_rows, problem_gpus
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.classify import classify_op
from stepcast.profiling.paths import shared_data_root

KINETO = "kineto/tb_plugin/samples/resnet50_*/*.pt.trace.json.gz"
LAUNCH_FLOOR_US = 2.0
FOLDS = 5                          # folds over problems for the family table held out by problem


def held_out_families(rows: list[dict[str, Any]], folds: int = FOLDS) -> None:
    """Adds ``family_gpu_ms`` (the family table fitted on the other GPUs' problems) and ``family_problem_ms`` (fitted
    on the other folds' problems, all GPUs; :data:`FOLDS` folds by a hash of the problem name) to each (problem,
    GPU) of ``rows``: neither ever sees the row it predicts. GPUs in ``conv_families.NOT_FITTED`` are never fitted."""
    from stepcast.estimator import conv_families as cf

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
    from stepcast.profiling.kineto import op_parents

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
    from stepcast.profiling.kineto import read_trace

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
    from stepcast.estimator.conv_families import corrects

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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.conv", description=__doc__.split("\n\n")[0])
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
        import stepcast.estimator as estimators

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
