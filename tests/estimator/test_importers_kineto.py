"""Kineto importer on real traces: op rows with shapes from Input Dims, times summed from their kernels."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.importers import kineto
from stepcast.profiling.kineto import read_trace

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


def test_concrete_inputs_resolve_reduced_dims(tmp_path: Path):
    """A PyTorch >= 2.1 trace records argument values ("Concrete Inputs"): sum over dim 0 becomes rows=4096, cols=8."""
    import gzip
    import json

    host = {"pid": 1, "tid": 1}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "ts": 0, "dur": 20, **host,
         "args": {"External id": 1, "Input Dims": [[8, 4096], [], [], []],
                  "Input type": ["c10::BFloat16", "ScalarList", "Scalar", ""],
                  "Concrete Inputs": ["", "[0]", "False", ""]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 3, **host,
         "args": {"External id": 1, "correlation": 10}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::reduce_kernel<512, 1>", "ts": 30, "dur": 7.5,
         "pid": 0, "tid": 7, "args": {"External id": 1, "correlation": 10, "stream": 7, "device": 0,
                                      "grid": [32, 1, 1], "block": [512, 1, 1]}},
    ]
    document = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    rows = kineto.load_trace(path, tmp_path)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["family"], row["op"], row["rows"], row["cols"], row["dtype"]) == ("norm", "sum", 4096, 8, "bf16")
    assert (row["hardware"], row["runtime_us"], row["grid"]) == ("h100-sxm", 7.5, "32,1,1")


STAND_IN_CALLS = {
    "convolution": ("aten::cudnn_convolution", [[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], [], [], []],
                    ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar",
                     "Scalar"], ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "False"],
                    "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nchw"),
    "batch_norm": ("aten::cudnn_batch_norm", [[8, 64, 56, 56], [64], [64], [64], [64], [], [], []],
                   ["float", "float", "float", "float", "float", "Scalar", "Scalar", "Scalar"],
                   ["", "", "", "", "", "True", "0.1", "1e-05"], "cudnn::bn_fw_tr_1C11_singleread<float>"),
}


@pytest.mark.parametrize("kind", sorted(STAND_IN_CALLS))
def test_calls_timed_by_a_stand_in_row_never_become_training_rows(tmp_path: Path, kind: str):
    """A convolution is timed as its implicit GEMM at emulation time and a batch norm as a layer norm, but their
    measured times are cuDNN's kernels, not those rows': a trace that records such a call in full (shapes and
    argument values) gives no training row."""
    import gzip
    import json

    op, dims, types, values, kernel = STAND_IN_CALLS[kind]
    host = {"pid": 1, "tid": 1}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": op, "ts": 0, "dur": 20, **host,
         "args": {"External id": 1, "Input Dims": dims, "Input type": types, "Concrete Inputs": values}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 3, **host,
         "args": {"External id": 1, "correlation": 10}},
        {"ph": "X", "cat": "kernel", "name": kernel,
         "ts": 30, "dur": 120.0, "pid": 0, "tid": 7,
         "args": {"External id": 1, "correlation": 10, "stream": 7, "device": 0,
                  "grid": [196, 1, 1], "block": [128, 1, 1]}},
    ]
    document = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    rows = kineto.load_trace(path, tmp_path)
    assert rows.empty, rows.get("aten_op", pd.Series(dtype=str)).tolist()
