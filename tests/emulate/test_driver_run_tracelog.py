"""The driver backend's log reader (emulate/driver/tracelog.py): the trace events it makes of the driver's records."""
from __future__ import annotations

import json
from pathlib import Path

from emulate.driver.tracelog import driver_events, is_driver_log, read_driver_log, sidecar_path

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
