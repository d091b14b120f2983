"""NeuSight's fp32 kernel measurements (``neusight/scripts/asplos/data/dataset/train``), five GPUs.

All fp32 with TF32 off (sgemm kernels; ``allow_tf32=False``). ``Latency`` is ms (mean of the fastest 5 of 25
CUDA-event timings of the op, all its kernels) -> ``runtime_us`` = Latency x 1000.

- ``collect/bmm/p2.1.0/<GPU>.csv`` and ``collect/linear/p2.1.0/<GPU>.csv``: columns ``B, M, N, K``. NeuSight's
  ``N`` is the REDUCTION dim and ``K`` the output columns: bmm is [B, M, N] @ [B, N, K] and linear maps N input
  features to K outputs. This follows from the launch grids: for every sgemm kernel named ``sgemm_<tm>x<tn>_..``,
  grid.x = ceil(K / tm) and grid.y = ceil(M / tn) (cuBLAS tiles the output, column-major), while N never fits.
  So the gemm row is m = M (x B for linear, whose B is 1), n = K, k = N, batch = B (bmm) or 1 (linear).
- ``elem.csv`` (processed training set): ops on a [B, H] tensor, numel = B H. NeuSight's unary-with-scalar
  variants keep their identity: ``addu`` -> ``add_scalar``, ``mulu`` -> ``mul_scalar``, ``divu`` ->
  ``div_scalar`` (a multiply by the reciprocal), ``powu`` -> ``pow_scalar``; ``add``/``mul``/``div``/``pow`` are
  tensor-tensor; ``relu``, ``gelu``, ``tanh`` unary.
- ``ln.csv``, ``softmax.csv`` (processed training sets): norm rows over [B, H]: rows = B, cols = H, forward.

Kept extras: ``kernel_name`` (the op's main kernel), ``kernel_count`` (how many kernels the op launched),
``grid`` and ``block`` ("x,y,z"). ``Device`` -> catalog id through ``profiling.hardware.lookup``. ``group`` is
``neusight/<file>`` (the sampling set).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.common import DataImportError, finalize, read_csv
from stepcast.profiling.hardware import UnknownHardwareError, lookup

SOURCE = "neusight"
TRAIN_DIR = Path("neusight/scripts/asplos/data/dataset/train")
ELEMENTWISE_OPS = {"add": "add", "mul": "mul", "div": "div", "pow": "pow", "addu": "add_scalar",
                   "mulu": "mul_scalar", "divu": "div_scalar", "powu": "pow_scalar", "relu": "relu",
                   "gelu": "gelu", "tanh": "tanh"}
NORM_FILES = {"ln.csv": "layer_norm", "softmax.csv": "softmax"}
LAUNCH_COLUMNS = ("Kernel Name", "Grid x", "Grid y", "Grid z", "Block x", "Block y", "Block z")


def input_files(root: Path) -> list[Path]:
    train = Path(root) / TRAIN_DIR
    gemm = sorted(train.glob("collect/bmm/*/*.csv")) + sorted(train.glob("collect/linear/*/*.csv"))
    processed = [train / name for name in ("elem.csv", "ln.csv", "softmax.csv") if (train / name).is_file()]
    return gemm + processed


def load(root: Path) -> pd.DataFrame:
    frames = []
    for path in input_files(root):
        if path.parent.parent.name in ("bmm", "linear"):
            frames.append(load_gemm(path))
        elif path.name == "elem.csv":
            frames.append(load_elementwise(path))
        else:
            frames.append(load_norm(path))
    frames = [f for f in frames if len(f)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def load_gemm(path: Path) -> pd.DataFrame:
    op = path.parent.parent.name
    raw = read_csv(path, ("Latency", "Device", "B", "M", "N", "K") + LAUNCH_COLUMNS)
    rows = _common(raw, path)
    rows["family"] = "gemm"
    rows["gemm_op"] = op
    if op == "bmm":
        rows["m"], rows["batch"] = raw["M"], raw["B"]
    else:
        rows["m"], rows["batch"] = raw["B"] * raw["M"], 1
    rows["n"], rows["k"] = raw["K"], raw["N"]
    return rows


def load_elementwise(path: Path) -> pd.DataFrame:
    raw = read_csv(path, ("OPName", "Latency", "Device", "B", "H") + LAUNCH_COLUMNS)
    unknown = sorted(set(raw["OPName"]) - set(ELEMENTWISE_OPS))
    if unknown:
        raise DataImportError(f"{path}: column 'OPName': unknown op '{unknown[0]}'")
    rows = _common(raw, path)
    rows["family"] = "elementwise"
    rows["op"] = raw["OPName"].map(ELEMENTWISE_OPS)
    rows["numel"] = raw["B"] * raw["H"]
    return rows


def load_norm(path: Path) -> pd.DataFrame:
    raw = read_csv(path, ("Latency", "Device", "B", "H") + LAUNCH_COLUMNS)
    rows = _common(raw, path)
    rows["family"] = "norm"
    rows["op"] = NORM_FILES[path.name]
    rows["rows"], rows["cols"], rows["pass"] = raw["B"], raw["H"], "fwd"
    return rows


def _triple(raw: pd.DataFrame, prefix: str) -> pd.Series:
    """"x,y,z" of a launch dimension (vectorised string concatenation)."""
    x, y, z = (raw[f"{prefix} {axis}"].astype("Int64").astype(str) for axis in "xyz")
    return x + "," + y + "," + z


def _common(raw: pd.DataFrame, path: Path) -> pd.DataFrame:
    devices = {}
    for device in raw["Device"].dropna().unique():
        try:
            devices[device] = lookup(str(device)).id
        except UnknownHardwareError as exc:
            raise DataImportError(f"{path}: column 'Device': {exc}") from None
    grid, block = _triple(raw, "Grid"), _triple(raw, "Block")
    kernels = raw["Kernels"].astype(str).str.count(";") if "Kernels" in raw.columns else 1
    return pd.DataFrame({
        "hardware": raw["Device"].map(devices),
        "dtype": "fp32",
        "runtime_us": pd.to_numeric(raw["Latency"], errors="coerce") * 1000.0,
        "group": f"neusight/{path.parent.parent.name}" if path.parent.name.startswith("p") else f"neusight/{path.stem}",
        "kernel_name": raw["Kernel Name"],
        "kernel_count": kernels,
        "grid": grid,
        "block": block,
    })
