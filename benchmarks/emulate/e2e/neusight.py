"""NeuSight's end-to-end labels (sitar-lab/NeuSight, ``scripts/asplos/label/<GPU>/``) and their per-operator traces.

A label ``<model>-<inf|train>-<seq>-<batch>[-fusion].json`` holds ``fw_latency`` and ``bwall_latency`` in ms (one
forward, or forward then backward, of the whole HuggingFace model, fp32 with TF32 off, no optimizer step; the mean of
the fastest 5 of 25 repetitions timed with CUDA events) and ``e2e_latency``, their sum. ``fusion`` labels ran under
``torch.compile`` and Switch-XL under NeuSight's own MoE routing; neither is reproduced here (listed as skipped).

The ``.csv`` beside a label is NeuSight's trace of a one-layer copy of the model (``num_layer`` in the json says how
many layers the label had): one row per FX node with its time measured in place, one node at a time (an event pair
and a synchronisation per node), ``fw_latency``, ``bw_latency`` and ``acc_latency`` (gradient accumulation into
``.grad``, part of the measured backward). :func:`csv_family_ms` sums them by kernel family, layer rows multiplied by
``num_layer`` as NeuSight's own aggregator does, so the emulator's per-family kernel time can be set beside it. The
same traces are the in-step rows of :mod:`estimator.importers.neusight_inmodel`, which calibrate the emulator per GPU
and family (:mod:`emulate.sim.instep`); the FX-node classification lives there.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from stepcast.emulate.emulation import OTHER
from stepcast.estimator.importers.neusight_inmodel import (HOST,  # noqa: F401 (HOST: re-exported)
                                                  LABEL_DIR, LAYER, NAME, module_class, node_family)
from stepcast.profiling.hardware import UnknownHardwareError, lookup

FAMILIES = ("gemm", "norm", "elementwise", OTHER)
SKIP_FUSION = "torch.compile (fusion) label"
SKIP_MOE = "Switch-XL (NeuSight's own MoE routing)"


@dataclass(frozen=True)
class Label:
    """One end-to-end label: what was run where, and what was measured (ms)."""

    gpu: str            # NeuSight's folder name (the device name with '_' for ' ')
    hardware: str       # this project's catalog id
    model: str          # the config's stem in DLmodel_configs
    mode: str           # "inf" | "train"
    seq: int
    batch: int
    num_layer: int
    forward_ms: float
    backward_ms: float  # 0 for inference
    total_ms: float
    path: Path

    @property
    def key(self) -> str:
        return f"neusight-{self.hardware}-{self.path.stem}"

    @property
    def config(self) -> Path:
        return self.path.parents[2] / "data" / "DLmodel_configs" / f"{self.model}.json"

    @property
    def csv(self) -> Path:
        return self.path.with_suffix(".csv")


class LabelFormatError(ValueError):
    """A label file that does not have the fields NeuSight writes."""


def parse_label(path: Path) -> Label:
    """The label at ``path`` (raises LabelFormatError naming the file and the field)."""
    match = NAME.match(path.stem)
    if not match or match["fusion"]:
        raise LabelFormatError(f"{path}: expected a name <model>-<inf|train>-<seq>-<batch>.json")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LabelFormatError(f"{path}: not JSON ({exc})") from exc
    for field in ("num_layer", "e2e_latency", "fw_latency", "bwall_latency"):
        if not isinstance(data.get(field), (int, float)):
            raise LabelFormatError(f"{path}: field '{field}' missing or not a number")
    gpu = path.parent.name
    try:
        hardware = lookup(gpu.replace("_", " ")).id
    except UnknownHardwareError as exc:
        raise LabelFormatError(f"{path}: GPU folder '{gpu}' is not in the hardware catalog ({exc})") from exc
    return Label(gpu=gpu, hardware=hardware, model=match["model"], mode=match["mode"], seq=int(match["seq"]),
                 batch=int(match["batch"]), num_layer=int(data["num_layer"]), forward_ms=float(data["fw_latency"]),
                 backward_ms=float(data["bwall_latency"]), total_ms=float(data["e2e_latency"]), path=path)


def discover(root: Path) -> tuple[list[Label], list[tuple[Path, str]]]:
    """Every reproducible label under the shared data ``root``, and the skipped ones with the reason."""
    labels, skipped = [], []
    for path in sorted((root / LABEL_DIR).glob("*/*.json")):
        if path.stem.endswith("-fusion"):
            skipped.append((path, SKIP_FUSION))
            continue
        if path.stem.startswith("switch"):
            skipped.append((path, SKIP_MOE))
            continue
        try:
            label = parse_label(path)
        except LabelFormatError as exc:
            skipped.append((path, str(exc)))
            continue
        if not label.config.is_file():
            skipped.append((path, f"no model config {label.config.name}"))
        else:
            labels.append(label)
    return labels, skipped


def script_args(label: Label, reps: int = 2) -> list[str]:
    """Arguments of ``examples/hf_model.py`` that reproduce the label."""
    return ["--config", str(label.config), "--mode", label.mode, "--batch", str(label.batch),
            "--seq", str(label.seq), "--reps", str(reps)]


def csv_family_ms(label: Label) -> dict[str, dict[str, float]]:
    """NeuSight's per-operator times summed by family for the whole model (layer rows x ``num_layer``):
    {"forward": {family: ms}, "backward": {family: ms}} (backward includes gradient accumulation)."""
    frame = pd.read_csv(label.csv)
    out: dict[str, dict[str, float]] = {"forward": {}, "backward": {}}
    for row in frame.itertuples(index=False):
        meta = str(row.meta)
        shapes = ast.literal_eval(row.input_shapes) if isinstance(row.input_shapes, str) else []
        family = node_family(str(row.op), str(row.target), module_class(meta), shapes, str(row.output_shape))
        times = 1 if not LAYER.search(meta) else label.num_layer
        out["forward"][family] = out["forward"].get(family, 0.0) + float(row.fw_latency) * times
        back = (float(row.bw_latency) + float(row.acc_latency)) * times
        out["backward"][family] = out["backward"].get(family, 0.0) + back
    return out
