"""NeuSight's per-operator times measured in place inside whole-model runs (``neusight/scripts/asplos/label``).

Beside every end-to-end label ``<GPU>/<model>-<inf|train>-<seq>-<batch>.json`` NeuSight keeps a ``.csv``: its
torch.fx trace of a one-layer copy of the model, one row per FX node with the node's time in ms, ``fw_latency`` (in
the forward pass), ``bw_latency`` and ``acc_latency`` (its backward and the gradient accumulation into ``.grad``),
fp32 with TF32 off, each node timed with CUDA events where it runs in the model (its real input shapes, after the
nodes before it). The label json gives ``num_layer`` (how many times the layer rows repeat in the full model) and the
measured passes ``fw_latency`` / ``bwall_latency`` / ``e2e_latency`` of the whole model.

Rows (source ``neusight_inmodel``): the FORWARD time of every node that is one kernel of a known family:

- gemm: ``nn.Linear`` (m = tokens, n = out features, k = in features), ``addmm`` (GPT-2's ``Conv1D``: bias,
  [M, K], [K, N]), ``matmul`` / ``bmm`` ([..., M, K] @ [..., K, N], batch = the leading dims);
- norm: ``LayerNorm`` modules and ``softmax`` (rows = all but the last dim, cols = the last dim, pass ``fwd``);
- elementwise: add, sub, mul, truediv (``div``), pow, gelu, tanh, relu, where, masked_fill, and dropout in training
  labels (in inference labels the model is in eval mode and dropout launches nothing); one tensor operand gives the
  ``_scalar`` variant, as ``profiling.classify`` names the kernel (``reads_one_stream``, one rule for both);
  numel = the output's elements.

Extras: ``model`` (the config stem, e.g. ``bert_large``; the unit the e2e benchmark holds out), ``sample`` (the
label, ``<GPU folder>/<stem>``), ``repeat`` (``num_layer`` for rows of the repeated layer, else 1) and
``pass_scale``: the label's measured forward pass divided by the sum over the trace of every kernel-launching
node's forward time (x ``repeat``). NeuSight times each node on its own (an event pair and a synchronisation per
node), so the per-node sum differs from the uninterrupted pass: by -9 % to +19 % on four GPUs and up to +52 % on the
A100 (small models), see ``python -m benchmarks.emulate.e2e``. ``runtime_us x pass_scale`` is the node's share of
the measured pass: its time inside a running step.

These rows are not in the default training data of the shipped estimators (``conf/estimator/data/all.yaml`` lists
the sources it uses): they calibrate the estimators' isolated-kernel times to in-step times
(:mod:`estimator.instep`), per GPU and family, holding out a model when that model is evaluated.
"""
from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.common import DataImportError, finalize, read_csv
from stepcast.profiling.classify import SCALAR_VARIANTS, reads_one_stream
from stepcast.profiling.hardware import UnknownHardwareError, lookup

SOURCE = "neusight_inmodel"
LABEL_DIR = Path("neusight/scripts/asplos/label")
NAME = re.compile(r"^(?P<model>[a-z0-9_]+)-(?P<mode>inf|train)-(?P<seq>\d+)-(?P<batch>\d+)(?P<fusion>-fusion)?$")
LAYER = re.compile(r"'[\w.]*\.(?:h|layer|layers|block)\.0'")
CSV_COLUMNS = ("op", "target", "meta", "input_shapes", "output_shape", "fw_latency")
GEMM_CALLS = {"matmul", "bmm", "addmm", "mm", "baddbmm", "linear"}
NORM_CALLS = {"softmax", "layer_norm", "log_softmax"}
NO_KERNEL_CALLS = {"size", "getitem", "getattr", "view", "permute", "transpose", "expand", "dim", "reshape",
                   "split", "unsqueeze", "squeeze", "finfo", "type", "to", "chunk", "flatten"}
HOST = "host"    # FX nodes that launch no kernel (size, view, getitem...)
OTHER = "other"  # kernels of no estimator family (embedding, arange...)
#: FX call name -> elementwise op (profiling.classify's names)
ELEMENTWISE_CALLS = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "div": "div", "pow": "pow",
                     "gelu": "gelu", "tanh": "tanh", "relu": "relu", "where": "where", "masked_fill": "masked_fill",
                     "masked_fill_": "masked_fill", "dropout": "dropout"}
ELEMENTWISE_MODULES = {"ReLU": "relu", "Tanh": "tanh", "GELU": "gelu", "GELUActivation": "gelu",
                       "Dropout": "dropout"}

def label_paths(root: Path) -> list[Path]:
    """Every label json with a per-node trace beside it (torch.compile ``-fusion`` labels have none)."""
    return [p for p in sorted((Path(root) / LABEL_DIR).glob("*/*.json"))
            if NAME.match(p.stem) and not NAME.match(p.stem)["fusion"] and p.with_suffix(".csv").is_file()]


def input_files(root: Path) -> list[Path]:
    return [f for p in label_paths(root) for f in (p, p.with_suffix(".csv"))]


def load(root: Path) -> pd.DataFrame:
    frames = [label_rows(path) for path in label_paths(root)]
    frames = [f for f in frames if len(f)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def call_name(target: str) -> str:
    """``<built-in method matmul of type object at 0x..>`` -> ``matmul``; ``size`` stays ``size``."""
    return re.sub(r"^<(built-in (function|method)|function) (\w+).*$", r"\3", target)


def module_class(meta: str) -> str:
    """The innermost module class of a node (its ``nn_module_stack``), '' when none."""
    classes = re.findall(r"<class '([\w.]+)'>", meta)
    return classes[-1].rsplit(".", 1)[-1] if classes else ""


def node_family(op: str, target: str, module: str, input_shapes: list, output_shape: str) -> str:
    """The kernel family of one FX node (``host`` when it launches no kernel)."""
    if op in ("placeholder", "get_attr", "output"):
        return HOST
    if op == "call_module":
        if module in ("Linear", "Conv1D"):
            return "gemm"
        if "Norm" in module:
            return "norm"
        if module == "Embedding":
            return OTHER
        return "elementwise"
    name = call_name(target)
    if name in GEMM_CALLS:
        return "gemm"
    if name in NORM_CALLS:
        return "norm"
    scalar_inputs = all(s == [1] for s in input_shapes)
    if name in NO_KERNEL_CALLS or output_shape.strip() == "(1,)" or scalar_inputs:
        return HOST
    return "elementwise"


def _shape(text: str) -> list[int]:
    value = ast.literal_eval(text)
    return [int(v) for v in (value if isinstance(value, (tuple, list)) else [value])]


def node_spec(op: str, target: str, module: str, shapes: list[list[int]], out: list[int],
              training: bool) -> dict | None:
    """The kernel row (family and key columns) of one kernel-launching node, or None when it is not one kernel of a
    family the estimators know."""
    name = call_name(target)
    if op == "call_module" and module in ("Linear", "Conv1D") and shapes:
        return {"family": "gemm", "m": math.prod(out[:-1]), "n": out[-1], "k": shapes[0][-1], "batch": 1}
    if name == "addmm" and len(shapes) == 3:
        (m, k), n = shapes[1][-2:], shapes[2][-1]
        return {"family": "gemm", "m": m, "n": n, "k": k, "batch": 1}
    if name in ("matmul", "bmm") and len(shapes) == 2 and len(shapes[0]) >= 2 and len(shapes[1]) >= 2:
        a, b = shapes
        return {"family": "gemm", "m": a[-2], "n": b[-1], "k": a[-1], "batch": math.prod(out[:-2]) or 1}
    rows, cols = math.prod(out[:-1]) if out else 0, out[-1] if out else 0
    if (op == "call_module" and "Norm" in module) or name == "layer_norm":
        return {"family": "norm", "op": "layer_norm", "rows": rows, "cols": cols, "pass": "fwd"}
    if name in ("softmax", "log_softmax"):
        return {"family": "norm", "op": name, "rows": rows, "cols": cols, "pass": "fwd"}
    elem = ELEMENTWISE_MODULES.get(module) if op == "call_module" else ELEMENTWISE_CALLS.get(name)
    if elem is None or (elem == "dropout" and not training) or not out:
        return None
    if elem in SCALAR_VARIANTS and reads_one_stream([math.prod(s) for s in shapes]):
        elem += "_scalar"
    return {"family": "elementwise", "op": elem, "numel": math.prod(out)}


def label_rows(path: Path) -> pd.DataFrame:
    """The rows of one label (module docstring)."""
    match = NAME.match(path.stem)
    try:
        meta = json.loads(path.read_text())
        num_layer, forward_ms = int(meta["num_layer"]), float(meta["fw_latency"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DataImportError(f"{path}: expected num_layer and fw_latency ({exc.__class__.__name__})") from None
    try:
        hardware = lookup(path.parent.name.replace("_", " ")).id
    except UnknownHardwareError as exc:
        raise DataImportError(f"{path}: GPU folder '{path.parent.name}': {exc}") from None
    csv = path.with_suffix(".csv")
    frame = read_csv(csv, CSV_COLUMNS)
    training = match["mode"] == "train"
    rows, kernel_ms = [], 0.0
    for node in frame.itertuples(index=False):
        try:
            shapes = ast.literal_eval(node.input_shapes) if isinstance(node.input_shapes, str) else []
            out = _shape(str(node.output_shape)) if isinstance(node.output_shape, str) else []
        except (ValueError, SyntaxError):
            raise DataImportError(f"{csv}: column 'input_shapes'/'output_shape': unreadable shape "
                                  f"{node.input_shapes!r} / {node.output_shape!r}") from None
        module = module_class(str(node.meta))
        repeat = num_layer if LAYER.search(str(node.meta)) else 1
        fw = float(node.fw_latency)
        if node_family(str(node.op), str(node.target), module, shapes, str(node.output_shape)) == HOST:
            continue
        kernel_ms += fw * repeat
        spec = node_spec(str(node.op), str(node.target), module, shapes, out, training)
        if spec is not None and fw > 0:
            rows.append({**spec, "hardware": hardware, "dtype": "fp32", "runtime_us": fw * 1000.0,
                         "repeat": repeat, "aten_op": call_name(str(node.target)) if node.op != "call_module"
                         else module})
    if not rows:
        return pd.DataFrame()
    out_frame = pd.DataFrame(rows)
    out_frame["group"] = f"{SOURCE}/{match['model']}"
    out_frame["model"] = match["model"]
    out_frame["sample"] = f"{path.parent.name}/{path.stem}"
    out_frame["pass_scale"] = forward_ms / kernel_ms if kernel_ms > 0 else float("nan")
    return out_frame
