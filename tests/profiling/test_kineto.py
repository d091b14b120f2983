"""profiling.kineto: reading real Kineto traces (both schemas) and joining kernels to launches and ops."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from stepcast.profiling.kineto import GPU_CATEGORIES, TraceFormatError, join_kernels, read_trace


def _all_traces(root: Path) -> list[Path]:
    return sorted(
        [*root.glob("hta/tests/data/**/*.json.gz"), *root.glob("kineto/tb_plugin/samples/**/*.json.gz"),
         *root.glob("param/et_replay/tests/inputs/*kineto*.json.gz")]
    )


@pytest.fixture(scope="module")
def traces(shared_data: Path) -> dict[str, object]:
    paths = _all_traces(shared_data)
    assert len(paths) >= 14, f"expected the 14 shared traces, found {len(paths)}"
    return {str(p.relative_to(shared_data)): read_trace(p) for p in paths}


def test_every_shared_trace_reads_with_normalised_categories(traces):
    for name, trace in traces.items():
        cats = set(trace.events["cat"])
        assert "kernel" in cats and "cuda_runtime" in cats and "cpu_op" in cats, name
        assert not cats & {"Operator", "Kernel", "Runtime", "Memcpy", "Memset"}, name
        assert trace.events["ts"].is_monotonic_increasing, name
        assert (trace.events["dur"] >= 0).all(), name


def test_nearly_every_kernel_finds_its_launch_and_op(traces):
    for name, trace in traces.items():
        kernels = trace.kernels()
        assert set(kernels["cat"]) <= set(GPU_CATEGORIES), name
        k = kernels[kernels["cat"] == "kernel"]
        # Kernels launched before the profiling window have no runtime record; they are few.
        assert k["runtime_name"].notna().mean() > 0.85, name
        assert (k["op_index"] >= 0).mean() > 0.85, name
        matched = k[k["op_index"] >= 0]
        # The op's span contains the launch on the launching thread.
        assert (matched["op_ts"] <= matched["runtime_ts"]).all(), name
        assert (matched["runtime_ts"] <= matched["op_ts"] + matched["op_dur"]).all(), name
        assert not matched["op_name"].str.startswith("ProfilerStep#").any(), name


def test_old_schema_tb_plugin_sample(traces):
    trace = traces["kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"]
    assert trace.schema == "old"
    assert trace.hardware_id == "v100-sxm2-32gb"  # Tesla V100-DGXS-32GB
    steps = trace.profiler_steps()
    assert steps["step"].tolist() == [5, 6, 7, 8, 9, 10]
    kernels = trace.kernels()
    convs = kernels[kernels["op_name"] == "aten::cudnn_convolution"]
    assert len(convs) > 0
    # ResNet-50 batch 32: every convolution input is [32, C, H, W].
    assert all(dims[0][0] == 32 and len(dims[0]) == 4 for dims in convs["op_input_dims"])
    # Every kernel falls inside a step and the steps launch the same number of kernels.
    assert kernels["step"].notna().all()
    assert kernels.groupby("step").size().nunique() == 1


def test_new_schema_record_shapes_and_distributed_info(traces):
    trace = traces["hta/tests/data/trace_diff/control/control.json.gz"]
    assert (trace.rank, trace.world_size) == (3, 8)
    assert trace.hardware_id == "a100-sxm-40gb"  # "NVIDIA A100-PG509-200": alias embedded in the name
    k = trace.kernels()
    mm = k[(k["op_name"] == "aten::mm") & k["name"].str.contains("gemm")]
    assert len(mm) > 0
    assert all(len(d) == 2 and d[0][1] == d[1][0] for d in mm["op_input_dims"])  # [m, k] @ [k, n]
    assert set(k.loc[k["op_name"] == "aten::mm", "op_input_types"].map(tuple)) == {("float", "float")}


def test_nccl_fields_on_kernels(traces):
    trace = traces["hta/tests/data/nccl_parser_config/nccl_data.json.gz"]
    k = trace.kernels()
    nccl = k[k["collective_name"].notna()]
    assert len(nccl) == 21
    assert set(nccl["collective_name"]) <= {"allreduce", "broadcast"}
    assert (nccl["group_size"] == 2).all()
    assert (nccl["in_msg_nelems"] > 0).all()
    assert nccl["name"].str.startswith("ncclKernel_").all()


def test_external_id_echoing_correlation_falls_back_to_containment(traces):
    # In this trace every kernel's External id equals its correlation id, not an op's id.
    trace = traces["hta/tests/data/negative_queue_length_values_check/rank0.json.gz"]
    k = trace.kernels()
    k = k[k["cat"] == "kernel"]
    assert (k["external_id"] == k["correlation"]).all()
    assert (k.loc[k["runtime_name"].notna(), "op_index"] >= 0).mean() > 0.95


def _write(path: Path, document) -> Path:
    data = json.dumps(document).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_innermost_op_by_containment_on_plain_json(tmp_path):
    host = {"pid": 1, "tid": 1}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100, **host, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 10, "dur": 50, **host, "args": {"External id": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 12, "dur": 20, **host,
         "args": {"External id": 8, "Input Dims": [[4], [2, 3], [3, 4]], "Input type": ["float"] * 3}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 40, "dur": 10, **host, "args": {"External id": 9}},
        # Launches carry ids that point nowhere: the join must use containment.
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 15, "dur": 3, **host,
         "args": {"correlation": 100, "External id": 100}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 35, "dur": 3, **host,
         "args": {"correlation": 101, "External id": 101}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 80, "dur": 3, **host,
         "args": {"correlation": 102, "External id": 102}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 20, "dur": 5, "pid": 0, "tid": 7,
         "args": {"correlation": 100, "stream": 7, "grid": [1, 2, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 40, "dur": 5, "pid": 0, "tid": 7,
         "args": {"correlation": 101}},
        {"ph": "X", "cat": "kernel", "name": "k3", "ts": 90, "dur": 5, "pid": 0, "tid": 7,
         "args": {"correlation": 102}},
    ]
    trace = read_trace(_write(tmp_path / "t.json", {"traceEvents": events, "distributedInfo": {"rank": 1}}))
    k = trace.kernels().set_index("name")
    assert k.loc["gemm", "op_name"] == "aten::addmm"
    assert k.loc["gemm", "op_input_dims"] == [[4], [2, 3], [3, 4]]
    assert k.loc["gemm", "grid"] == [1, 2, 1] and k.loc["gemm", "stream"] == 7
    assert k.loc["k2", "op_name"] == "aten::linear"  # between addmm and relu: the enclosing linear
    assert pd.isna(k.loc["k3", "op_name"])  # only the ProfilerStep marker encloses it
    assert k["step"].tolist() == [3, 3, 3]
    assert trace.rank == 1 and trace.world_size == 1 and trace.hardware_id is None


def test_join_prefers_external_id_when_the_op_contains_the_launch(tmp_path):
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 5, "tid": "5",
         "args": {"External id": 3, "Input Dims": [[2, 3], [3, 4]]}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, "pid": 5, "tid": "5",
         "args": {"correlation": 9, "external id": 3}},
        {"ph": "X", "cat": "Kernel", "name": "sgemm", "ts": 5, "dur": 2, "pid": 0, "tid": "stream 7",
         "args": {"correlation": 9, "external id": 3, "stream": 7}},
    ]
    trace = read_trace(_write(tmp_path / "old.json.gz", {"traceEvents": events}))
    assert trace.schema == "old"
    k = join_kernels(trace.events)
    assert k.loc[0, "op_name"] == "aten::mm" and k.loc[0, "tid"] == 7 and k.loc[0, "launch_tid"] == 5


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage", b"{\"traceEvents\": [", b"[1, 2]", b"{\"x\": 1}"])
def test_malformed_file_gives_one_line_error_naming_it(tmp_path, content):
    path = tmp_path / "broken.json.gz"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message


@pytest.mark.parametrize("name", [
    "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/tests/data/nccl_parser_config/nccl_data.json.gz",
])
def test_external_id_and_containment_agree_where_both_apply(traces, name):
    from stepcast.profiling.kineto import HOST_OP_CATEGORIES, _ops_by_containment, _ops_by_external_id

    trace = traces[name]
    kernels = trace.kernels()
    ops = trace.events[trace.events["cat"].isin(HOST_OP_CATEGORIES)
                       & ~trace.events["name"].str.startswith("ProfilerStep#")]
    by_id, by_time = _ops_by_external_id(kernels, ops), _ops_by_containment(kernels, ops)
    both = (by_id >= 0) & (by_time >= 0)
    assert both.mean() > 0.95
    assert (by_id[both] == by_time[both]).all()


def test_containment_prefers_the_inner_op_when_both_start_together(tmp_path):
    host = {"pid": 1, "tid": 1}
    events = [  # the child is listed first and starts with its parent
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 10, "dur": 5, **host, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::to", "ts": 10, "dur": 20, **host, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 12, "dur": 1, **host,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "copy_kernel", "ts": 40, "dur": 2, "pid": 0, "tid": 7,
         "args": {"correlation": 1}},
    ]
    trace = read_trace(_write(tmp_path / "tie.json", {"traceEvents": events}))
    assert trace.kernels().loc[0, "op_name"] == "aten::copy_"


def test_launch_columns_equal_a_left_merge_on_correlation(traces):
    """The join's position lookup gives what a left merge with the first runtime call per correlation gives."""
    for name, trace in traces.items():
        events = trace.events
        launches = events.loc[events["cat"].isin(("cuda_runtime", "cuda_driver")) & events["correlation"].notna(),
                              ["correlation", "name", "ts", "dur", "pid", "tid", "external_id"]]
        launches = launches.drop_duplicates("correlation")
        expected = events.loc[events["cat"].isin(GPU_CATEGORIES), ["correlation"]].merge(
            launches, on="correlation", how="left")
        got = trace.kernels()[["correlation", "runtime_name", "runtime_ts", "runtime_dur", "launch_pid",
                               "launch_tid", "runtime_external_id"]]
        got.columns = expected.columns
        pd.testing.assert_frame_equal(got, expected, check_exact=True, obj=name)


def test_kernel_takes_the_first_runtime_call_of_its_correlation_and_nulls_without_one(tmp_path):
    host = {"pid": 1, "tid": 1}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50, **host, "args": {"External id": 4}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, **host,
         "args": {"correlation": 9, "External id": 4}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "ts": 5, "dur": 1, **host,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 60, "dur": 2, "pid": 0, "tid": 7,
         "args": {"correlation": 9, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "orphan", "ts": 70, "dur": 2, "pid": 0, "tid": 7,
         "args": {"correlation": 11, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "no_correlation", "ts": 80, "dur": 2, "pid": 0, "tid": 7,
         "args": {"stream": 7}},
    ]
    k = join_kernels(read_trace(_write(tmp_path / "first.json", {"traceEvents": events})).events)
    assert k["name"].tolist() == ["gemm", "orphan", "no_correlation"]
    assert k.loc[0, "runtime_name"] == "cudaLaunchKernel" and k.loc[0, "op_name"] == "aten::mm"
    assert k.loc[1:, "runtime_name"].isna().all() and k.loc[1:, "runtime_ts"].isna().all()
    assert k["runtime_name"].dtype == object and k["launch_tid"].dtype == "Int64"
    assert k["op_index"].tolist() == [0, -1, -1] and k.loc[1:, "op_name"].isna().all()


def test_match_names_matches_at_the_start_and_never_on_a_missing_name():
    import numpy as np

    from stepcast.profiling.kineto import match_names

    names = np.array(["ProfilerStep#3", "aten::mm", None, "xProfilerStep#3", "ProfilerStep#3"], dtype=object)
    assert match_names(names, r"ProfilerStep#\d+$").tolist() == [True, False, False, False, True]
    assert match_names(pd.Series(["ncclDevKernel", float("nan"), "gemm"], dtype=object), "nccl").tolist() == [
        True, False, False]
