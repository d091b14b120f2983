"""This project's own measurements: ``datasets/<hardware>/<family>.parquet`` written by ``stepcast profile``.

Files are read (and validated) through ``profiling.schema.read_family``; only ``status == "ok"`` rows are kept, with
``runtime_us`` = ``median_us``. ``group`` is the row's ``sample`` (grid | random | model), the set it was drawn from.
Family extras keep their meaning under other names: the GEMM ``op`` (mm | addmm | bmm | matmul) becomes
``gemm_op`` (``op`` is a key column of other families), ``trans_a``/``trans_b`` and ``backend`` stay.
An absent or empty datasets folder gives an empty frame.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.common import finalize
from stepcast.profiling.families import FAMILIES
from stepcast.profiling.schema import read_family

SOURCE = "profiler"


def input_files(root: Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*/*.parquet") if p.stem in FAMILIES)


def load(root: Path) -> pd.DataFrame:
    """Every family file under ``root`` (the datasets folder)."""
    frames = [load_file(path) for path in input_files(root)]
    frames = [f for f in frames if len(f)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def load_file(path: Path) -> pd.DataFrame:
    frame = read_family(path)
    frame = frame[frame["status"] == "ok"].copy()
    if path.stem == "gemm":
        frame = frame.rename(columns={"op": "gemm_op"})
    frame["runtime_us"] = frame["median_us"]
    frame["group"] = "profiler/" + frame["sample"].astype(str)
    keep = [c for c in frame.columns if c not in ("median_us", "min_us", "mean_us", "std_us", "reps", "status",
                                                  "error", "point_id", "timing", "threads")]
    return frame[keep]
