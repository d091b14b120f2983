"""The capture log reader (emulate/driver/tracelog.py): the trace events it makes of the driver's records, GEMM
specs from the op table, collective byte counts, communicator sizes and kernel names."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepcast.emulate.driver.tracelog import (CaptureLogError, collective_bytes, comm_sizes, demangle, driver_events,
                                     is_driver_log, read_driver_log, sidecar_path)

MM = {"op": "aten.mm.default", "shapes": [[4096, 1024], [1024, 4096]], "dtypes": ["torch.bfloat16"] * 2,
      "args": [None, None], "kwargs": {}}
NVJET = "nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_NNT"
SPLITK = "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EifEEvPf"  # mangled, as the driver logs it


def timed(event: str, t: int, op: int = -1, call: int = 0, **fields) -> dict:
    return {"event": event, "t": t, "gap": 1000, "thread": 0, "op": op, "call": call, **fields}


def launch(name: str, t: int, op: int, call: int, stream: int = 1) -> dict:
    return timed("launch", t, op, call, name=name, grid=[132, 1, 1], block=[384, 1, 1], smem=1024,
                 cluster=[2, 1, 1], stream=stream, device=0, via="cuLaunchKernelEx")


def write_log(tmp: Path, records: list[dict], ops: list[dict]) -> Path:
    log = tmp / "rank0.log.driver.4242.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp / "rank0.log.ops.json").write_text(json.dumps({"ops": ops}))
    return log


def test_the_first_gemm_kernel_of_an_op_call_carries_the_spec_and_splitk_reduce_is_its_part(tmp_path):
    log = write_log(tmp_path, [
        {"event": "unsupported", "name": "cuLogsRegisterCallback"},
        timed("malloc", 10, ptr=1 << 40, bytes=2 << 20, ok=1),
        launch(NVJET, 20, 0, 7), launch(SPLITK, 30, 0, 7),
        {"event": "mark", "t": 35, "thread": 0, "op": -1, "source": 2, "step": 1},
        launch(NVJET, 40, 0, 9, stream=5),
        timed("malloc", 50, ptr=0, bytes=1 << 40, ok=0),
        timed("memcpy", 60, stream=1, bytes=4, direction="d2h", blocking=0),
        timed("event_record", 70, handle=99, stream=5), timed("stream_wait_event", 80, stream=1, handle=99),
        timed("free", 90, ptr=1 << 40, bytes=2 << 20), timed("device_sync", 95, device=0),
    ], [MM])
    assert is_driver_log(log) and sidecar_path(log) == tmp_path / "rank0.log.ops.json"
    parsed = read_driver_log(log)
    assert parsed.unhandled == ["cuLogsRegisterCallback"] and parsed.host_clock == "cpu"
    events = driver_events(parsed)
    kernels = [e for e in events if e["kind"] == "kernel"]
    first, reduce_, second_call = kernels
    assert (first["spec"]["family"], first["spec"]["m"], first["spec"]["n"],
            first["spec"]["k"]) == ("gemm", 4096, 4096, 1024)
    assert first["op"] == "aten.mm.default" and first["op_shapes"] == MM["shapes"] and first["cluster"] == [2, 1, 1]
    assert reduce_["op_part"] and reduce_["spec"] is None and reduce_["name"].startswith("void cublasLt::splitKreduce")
    assert second_call["spec"] == first["spec"] and not second_call.get("op_part")
    assert (first["stream"], second_call["stream"]) == (0, 1)  # the legacy stream is the trace's 0
    assert [e["step"] for e in events if e["kind"] == "iteration"] == [0, 1]
    failed = [e for e in events if e["kind"] == "malloc" and e.get("failed")]
    assert len(failed) == 1 and failed[0]["ptr"] is None
    record, wait = (next(e for e in events if e["kind"] == k) for k in ("event_record", "stream_wait_event"))
    assert (record["event"], record["stream"], wait["stream"]) == (99, 1, 0)
    assert events[1]["t_ns"] == 0 and events[1]["gap_ns"] == 0 and events[2]["gap_ns"] == 1000
    assert [e["seq"] for e in events] == list(range(len(events)))


def test_a_launch_record_with_rd_and_wr_gives_the_kernel_its_bytes(tmp_path):
    triton = {**launch("triton_poi_fused_add_0", 20, -1, 0), "rd": 4096, "wr": 2048}
    log = write_log(tmp_path, [triton, launch("triton_poi_fused_add_0", 30, -1, 0)], [])
    first, second = [e for e in driver_events(read_driver_log(log)) if e["kind"] == "kernel"]
    assert (first["bytes_read"], first["bytes_written"]) == (4096, 2048) and "bytes_read" not in second


def test_collective_bytes_are_the_larger_buffer_per_rank():
    assert collective_bytes("all_reduce", 100, "fp32", 4, 0, -1) == 400
    assert collective_bytes("all_gather", 100, "bf16", 4, 0, -1) == 800        # count = per-rank send
    assert collective_bytes("reduce_scatter", 100, "fp32", 2, 1, -1) == 800    # count = per-rank receive
    assert collective_bytes("send", 10, "fp16", 2, 0, 1) == 20


def comm(name: str, nranks: int, rank: int) -> dict:
    return {"event": "comm", "comm": name, "nranks": nranks, "rank": rank}


def test_split_communicators_are_sized_by_their_members(tmp_path):
    logs = []
    for rank in range(3):
        folder = tmp_path / str(rank)
        folder.mkdir()
        records = [comm("nccl-world", 3, rank)] + ([comm("nccl-split", -1, -1)] if rank < 2 else [])
        logs.append(read_driver_log(write_log(folder, records, [])))
    assert comm_sizes(logs) == {"nccl-world": 3, "nccl-split": 2}


def test_a_collective_record_becomes_a_collective_sized_by_its_communicator(tmp_path):
    log = write_log(tmp_path, [
        comm("nccl-1", 2, 1),
        timed("collective", 300, stream=1, coll="all_reduce", comm="nccl-1", seq=4, nranks=2, peer=-1, count=10,
              dtype=7, group=0),
        timed("collective", 400, stream=3, coll="all_gather", comm="nccl-1", seq=5, nranks=2, peer=-1, count=8,
              dtype=9, group=3),
    ], [])
    reduce_, gather = [e for e in driver_events(read_driver_log(log), comm_sizes={"nccl-1": 2}, ranks_per_node=2)
                       if e["kind"] == "collective"]
    assert (reduce_["bytes"], reduce_["ranks"], reduce_["stream"], reduce_["comm_seq"]) == (40, 2, 0, 4)
    assert reduce_["spec"]["op"] == "all_reduce" and reduce_["comm_rank"] == 1 and reduce_["group"] is None
    assert (gather["bytes"], gather["dtype"], gather["stream"], gather["group"]) == (32, "bf16", 1, 3)


def test_demangle_leaves_plain_names_alone():
    assert demangle("cublasGemmEx") == "cublasGemmEx"
    assert demangle("_Z3fooi") == "foo(int)"


LAYER_NORM_BWD = {"op": "aten.native_layer_norm_backward.default",
                  "shapes": [[8, 64], [8, 64], [64], [8, 1], [8, 1], [64], [64], []],
                  "dtypes": ["torch.float32"] * 7 + [""], "args": [None] * 7 + [[True, True, True]], "kwargs": {}}


def test_an_op_calls_further_kernels_of_its_family_are_timed_with_its_first(tmp_path):
    """A layer-norm backward launches two norm kernels per call: the estimators time the call as a whole, so only
    the first carries the spec; a new call (another op-call number) gets its own."""
    log = write_log(tmp_path, [launch("layer_norm_grad_input_kernel", 100, 0, 7),
                               launch("GammaBetaBackwardCUDAKernel_layer_norm", 200, 0, 7),
                               launch("layer_norm_grad_input_kernel", 300, 0, 8),
                               launch("GammaBetaBackwardCUDAKernel_layer_norm", 400, 0, 8)], [LAYER_NORM_BWD])
    kernels = [e for e in driver_events(read_driver_log(log)) if e["kind"] == "kernel"]
    assert [bool(e["spec"]) for e in kernels] == [True, False, True, False]
    assert [e.get("op_part", False) for e in kernels] == [False, True, False, True]
    assert kernels[0]["spec"]["family"] == "norm" and kernels[0]["spec"]["pass"] == "bwd"


def test_a_log_line_that_is_not_json_names_the_file(tmp_path):
    log = tmp_path / "rank0.log.driver.1.jsonl"
    log.write_text('{"event":"launch"\n{"event":"end","records":0}\n')
    with pytest.raises(CaptureLogError, match="rank0.log.driver.1.jsonl:1: a line is not JSON"):
        read_driver_log(log)
