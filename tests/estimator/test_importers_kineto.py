"""Kineto importer on real traces: op rows with shapes from Input Dims, times summed from their kernels."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from estimator.importers import kineto
from profiling.kineto import read_trace

CONTROL = "hta/tests/data/trace_diff/control/control.json.gz"


@pytest.fixture(scope="module")
def control(shared_data: Path) -> pd.DataFrame:
    return kineto.load_trace(shared_data / CONTROL, shared_data)


def test_control_trace_rows(control):
    assert len(control) > 1000
    assert set(control["hardware"]) == {"a100-sxm-40gb"}
    assert set(control["group"]) == {CONTROL}
    assert {"gemm", "elementwise", "norm"} <= set(control["family"])
    assert control["runtime_us"].notna().all() and (control["runtime_us"] > 0).all()


def test_gemm_rows_follow_input_dims_and_kernel_durations(control, shared_data):
    mm = control[control["aten_op"] == "aten::mm"]
    assert len(mm) > 0
    # A100 fp32 matmuls run on TF32 tensor cores in this trace unless cuBLAS picked an sgemm.
    tensor_op = mm["kernel_name"].str.contains("tensorop_s1688")
    assert (mm.loc[tensor_op, "dtype"] == "tf32").all() and (mm.loc[~tensor_op, "dtype"] == "fp32").all()
    # Rebuild one row from the trace itself: the op's kernels summed, shapes from its Input Dims.
    kernels = read_trace(shared_data / CONTROL).kernels(("kernel",))
    calls = kernels[kernels["op_name"] == "aten::mm"].groupby("op_index")
    _, first = next(iter(calls))
    (m, k), (_, n) = first["op_input_dims"].iloc[0]
    match = mm[(mm["m"] == m) & (mm["n"] == n) & (mm["k"] == k)
               & np.isclose(mm["runtime_us"], first["dur"].sum())]
    assert len(match) >= 1


def test_traces_without_a_catalog_gpu_give_no_rows(shared_data):
    # The param traces ran on a GeForce RTX 2080 Ti, which the catalog does not describe.
    assert kineto.load_trace(shared_data / "param/et_replay/tests/inputs/linear_kineto.json.gz", shared_data).empty
