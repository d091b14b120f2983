"""Profiler importer: this project's dataset files (written through profiling.schema) become training rows."""
from __future__ import annotations

from pathlib import Path

from stepcast.estimator.importers import profiler
from stepcast.profiling.schema import write_family


def _row(point: str, **changes) -> dict:
    row = {"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": 1024, "n": 2048, "k": 512, "batch": 1,
           "op": "mm", "trans_a": False, "trans_b": True, "median_us": 21.5, "min_us": 20.0, "mean_us": 22.0,
           "std_us": 0.5, "reps": 50, "status": "ok", "error": None, "point_id": point, "sample": "grid",
           "timing": "cuda_event", "threads": None}
    row.update(changes)
    return row


def test_ok_rows_become_training_rows(tmp_path: Path):
    kernels = '[{"name": "sm90_xmma_gemm_bf16bf16", "grid": [8, 16, 1], "block": [384, 1, 1], "duration_us": 21.0}]'
    write_family([_row("0" * 16, kernels=kernels), _row("1" * 16, m=4096, median_us=80.0, sample="random"),
                  _row("2" * 16, status="failed", error="out of memory", median_us=None, min_us=None, mean_us=None,
                       std_us=None, reps=0)],
                 "gemm", tmp_path / "h100-sxm" / "gemm.parquet")
    rows = profiler.load(tmp_path)
    assert len(rows) == 2  # the failed point is not a measurement
    assert sorted(rows["runtime_us"]) == [21.5, 80.0]
    assert set(rows["group"]) == {"profiler/grid", "profiler/random"}
    assert set(rows["gemm_op"]) == {"mm"} and rows["op"].isna().all()
    assert (rows["source"] == "profiler").all() and rows["trans_b"].tolist() == [True, True]
    assert rows.loc[rows["runtime_us"] == 21.5, "kernels"].iat[0] == kernels  # the recorded kernels travel along


def test_absent_or_empty_datasets_folder(tmp_path: Path):
    assert profiler.load(tmp_path / "missing").empty
    (tmp_path / "empty").mkdir()
    assert profiler.load(tmp_path / "empty").empty
