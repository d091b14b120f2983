"""Turning the shim's log into trace events: GEMM orientation, collective byte counts, communicator sizes, kernel
names, and the op description the capture layer gives the classifier."""
from __future__ import annotations

import json

import torch

from emulate.capture import describe
from emulate.shimlog import collective_bytes, comm_sizes, demangle, gemm_fields, gemm_spec, rank_events, read_rank_log
from emulate.trace import EVENT_KINDS


def test_cublas_column_major_shapes_become_row_major_gemm_rows():
    # torch: Y[256, 384] = X[256, 128] @ W^T, which cuBLAS computes as Y^T (m=384, n=256, k=128)
    parts = ["G", "0", "0", "0", "0", "0", "cublasLt", "cublasLtMatmul", "1", "0", "384", "256", "128", "1",
             "14", "14", "14", "68", "0", "0"]
    g = gemm_fields(parts)
    assert g["transa"] == "T" and g["dtype_a"] == "bf16" and g["compute"] == "32f" and not g["tf32"]
    assert gemm_spec(g) == {"family": "gemm", "dtype": "bf16", "m": 256, "n": 384, "k": 128, "batch": 1}


def test_fp32_gemm_with_tf32_math_mode_is_tf32():
    parts = ["G", "0", "0", "0", "0", "0", "cublas", "cublasSgemm_v2", "0", "0", "8", "8", "8", "1",
             "0", "0", "0", "68", "3", "0"]
    assert gemm_spec(gemm_fields(parts))["dtype"] == "tf32"


def test_collective_bytes_are_the_larger_buffer_per_rank():
    assert collective_bytes("all_reduce", 100, "fp32", 4, 0, -1) == 400
    assert collective_bytes("all_gather", 100, "bf16", 4, 0, -1) == 800        # count = per-rank send
    assert collective_bytes("reduce_scatter", 100, "fp32", 2, 1, -1) == 800    # count = per-rank receive
    assert collective_bytes("send", 10, "fp16", 2, 0, 1) == 20


def test_split_communicators_are_sized_by_their_members(tmp_path):
    logs = []
    for rank in range(3):
        path = tmp_path / f"rank{rank}.log"
        lines = ["X\tnccl-world\t3\t%d" % rank]
        if rank < 2:
            lines.append("X\tnccl-split\t-1\t-1")
        path.write_text("\n".join(lines) + "\n")
        logs.append(read_rank_log(path))
    assert comm_sizes(logs) == {"nccl-world": 3, "nccl-split": 2}


def test_log_records_become_trace_events(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("\n".join([
        "H\t1",
        "F\t0\t_ZN2at6native13reduce_kernelEv",
        "M\t100\t0\t0\t-1\t4096\t2097152\t1",
        "K\t200\t50\t0\t0\t0\t0\t1,1,1\t128,1,1\t0",
        "I\t250\t0\t0\t-1\t2\t1",
        "N\t300\t40\t0\t-1\t1\tall_reduce\tnccl-1\t0\t2\t-1\t10\t7\t0",
        "Y\t400\t10\t0\t-1\t1",
    ]) + "\n")
    (tmp_path / "rank0.log.ops.json").write_text(json.dumps({"ops": [
        {"op": "aten.sum.default", "shapes": [[4, 4]], "dtypes": ["torch.float32"], "args": [None], "kwargs": {}}]}))
    events = rank_events(read_rank_log(log), comm_sizes={"nccl-1": 2}, ranks_per_node=2)
    assert [e["kind"] for e in events] == ["iteration", "malloc", "kernel", "iteration", "collective", "stream_sync"]
    assert all(e["kind"] in EVENT_KINDS for e in events)
    assert [e["seq"] for e in events] == list(range(6))
    kernel = events[2]
    assert kernel["name"] == "at::native::reduce_kernel()" and kernel["op"] == "aten.sum.default"
    assert kernel["op_shapes"] == [[4, 4]] and kernel["grid"] == [1, 1, 1]
    assert events[1]["gap_ns"] == 0 and events[1]["t_ns"] == 0  # the trace starts at the first call
    coll = events[4]
    assert coll["bytes"] == 40 and coll["ranks"] == 2 and coll["stream"] == 1 and coll["spec"]["op"] == "all_reduce"
    assert events[3]["source"] == "optimizer" and events[3]["step"] == 1


def test_demangle_leaves_plain_names_alone():
    assert demangle("cublasGemmEx") == "cublasGemmEx"
    assert demangle("_Z3fooi") == "foo(int)"


def test_describe_gives_one_entry_per_positional_argument():
    a, b = torch.zeros(2, 3), torch.zeros(3, dtype=torch.float16)
    shapes, dtypes, values, kwargs = describe((a, [a, b], 2, [1, 0]), {"keepdim": True})
    assert shapes == ((2, 3), ((2, 3), (3,)), (), ())
    assert dtypes == ("torch.float32", ("torch.float32", "torch.float16"), "", "")
    assert values == (None, None, 2, (1, 0)) and kwargs == (("keepdim", True),)


def test_an_op_calls_further_kernels_are_timed_with_its_first(tmp_path):
    """A layer-norm backward launches two norm kernels per call: the estimators time the call as a whole, so only
    the first carries the spec; a new call (another op-call number in the K record's last field) gets its own."""
    log = tmp_path / "rank0.log"
    log.write_text("\n".join([
        "H\t1",
        "F\t0\tlayer_norm_grad_input_kernel",
        "F\t1\tGammaBetaBackwardCUDAKernel_layer_norm",
        "K\t100\t0\t0\t0\t0\t0\t1,1,1\t128,1,1\t0\t7",
        "K\t200\t0\t0\t0\t0\t1\t1,1,1\t128,1,1\t0\t7",
        "K\t300\t0\t0\t0\t0\t0\t1,1,1\t128,1,1\t0\t8",
        "K\t400\t0\t0\t0\t0\t1\t1,1,1\t128,1,1\t0\t8",
    ]) + "\n")
    (tmp_path / "rank0.log.ops.json").write_text(json.dumps({"ops": [
        {"op": "aten.native_layer_norm_backward.default",
         "shapes": [[8, 64], [8, 64], [64], [8, 1], [8, 1], [64], [64], []],
         "dtypes": ["torch.float32"] * 7 + [""], "args": [None] * 7 + [[True, True, True]], "kwargs": {}}]}))
    kernels = [e for e in rank_events(read_rank_log(log), comm_sizes={}, ranks_per_node=1) if e["kind"] == "kernel"]
    assert [bool(e["spec"]) for e in kernels] == [True, False, True, False]
    assert [e.get("op_part", False) for e in kernels] == [False, True, False, True]
    assert kernels[0]["spec"]["family"] == "norm" and kernels[0]["spec"]["pass"] == "bwd"


def test_a_launch_carries_the_bytes_its_launcher_told_and_the_op_call_stays_last(tmp_path):
    """K records end ``shmem read written call``: a Triton launch's bytes become bytes_read / bytes_written; 0, 0
    (unknown) and the older records without them give none, and the op call is read from the last field."""
    log = tmp_path / "rank0.log"
    log.write_text("\n".join([
        "H\t1",
        "F\t0\ttriton_poi_fused_add_0",
        "F\t1\tlayer_norm_grad_input_kernel",
        "K\t100\t0\t0\t-1\t0\t0\t64,1,1\t128,1,1\t0\t4096\t2048\t0",
        "K\t200\t0\t0\t0\t0\t1\t1,1,1\t128,1,1\t0\t0\t0\t7",
        "K\t300\t0\t0\t0\t0\t1\t1,1,1\t128,1,1\t0\t7",
    ]) + "\n")
    (tmp_path / "rank0.log.ops.json").write_text(json.dumps({"ops": [
        {"op": "aten.native_layer_norm_backward.default",
         "shapes": [[8, 64], [8, 64], [64], [8, 1], [8, 1], [64], [64], []],
         "dtypes": ["torch.float32"] * 7 + [""], "args": [None] * 7 + [[True, True, True]], "kwargs": {}}]}))
    triton, new_format, old_format = [e for e in rank_events(read_rank_log(log), comm_sizes={}, ranks_per_node=1)
                                      if e["kind"] == "kernel"]
    assert (triton["bytes_read"], triton["bytes_written"]) == (4096, 2048)
    assert "bytes_read" not in new_format and "bytes_read" not in old_format
    assert new_format["spec"] and old_format.get("op_part")  # both in op call 7: the second is the first's part
