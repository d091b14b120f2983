"""Kineto -> trace v1 on a small hand-written profiler trace whose every number is known."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from stepcast.emulate.kineto_to_trace import convert_file
from stepcast.emulate.replay import main as replay_main
from stepcast.emulate.replay import replay


def kineto_trace() -> dict:
    """Two ProfilerSteps on one thread. Step 1: a GEMM on stream 7 (launched at 120, runs 135-435), a kernel on
    stream 20 launched at 140 that could start at 155 but waits for the GEMM (starts 440), a stream sync that
    returns at 541. Step 2: a kernel (1135-1185) and a device sync returning at 1190."""
    host = {"pid": 1, "tid": 1}
    gpu = {"pid": 0}

    def x(cat, name, ts, dur, where, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}

    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": [
            x("user_annotation", "ProfilerStep#1", 100, 1000, host),
            x("user_annotation", "ProfilerStep#2", 1100, 1000, host),
            x("cpu_op", "aten::mm", 110, 40, host, **{"External id": 1, "Input Dims": [[64, 128], [128, 256]],
                                                     "Input type": ["float", "float"]}),
            x("cuda_runtime", "cudaLaunchKernel", 120, 10, host, correlation=1, **{"External id": 1}),
            x("kernel", "volta_sgemm_128x64_nn", 135, 300, {**gpu, "tid": 7}, stream=7, correlation=1,
              device=0, **{"External id": 1}),
            x("cuda_runtime", "cudaLaunchKernel", 140, 5, host, correlation=2),
            x("kernel", "void add_kernel", 440, 100, {**gpu, "tid": 20}, stream=20, correlation=2, device=0),
            x("cuda_runtime", "cudaStreamSynchronize", 160, 381, host, correlation=3),
            x("cuda_runtime", "cudaLaunchKernel", 1120, 5, host, correlation=4),
            x("kernel", "void add_kernel", 1135, 50, {**gpu, "tid": 7}, stream=7, correlation=4, device=0),
            x("cuda_runtime", "cudaDeviceSynchronize", 1130, 60, host, correlation=5),
        ],
    }


@pytest.fixture
def trace_file(tmp_path) -> Path:
    path = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(kineto_trace(), f)
    return path


def test_conversion_orders_host_events_and_infers_the_dependency(trace_file):
    doc = convert_file(trace_file)
    assert doc["hardware"] == "h100-sxm" and doc["rank"] == 0 and doc["world_size"] == 1
    kinds = [(e["kind"], e.get("stream")) for e in doc["events"]]
    assert kinds == [
        ("iteration", None), ("kernel", 7), ("event_record", 7), ("stream_wait_event", 20), ("kernel", 20),
        ("stream_sync", 20), ("iteration", None), ("kernel", 7), ("device_sync", None), ("iteration", None),
    ]
    events = doc["events"]
    assert events[2]["event"] == events[3]["event"]
    assert events[-1]["end"] is True
    assert doc["meta"]["launch_latency_us"] == 15.0
    assert doc["meta"]["measured_iterations_us"] == [1000.0, 1000.0]
    # gaps: from the previous call's start, or, after a blocking call, from when what it waited for was done (stream
    # 20 at 540, the kernel at 1185), so the call's 1 and 5 us beyond that are host time after it
    assert [e["gap_ns"] for e in events] == [0, 20_000, 0, 20_000, 0, 20_000, 560_000, 20_000, 10_000, 915_000]
    gemm = events[1]
    assert gemm["duration_us"] == 300.0 and gemm["op"] == "aten::mm"
    assert gemm["spec"]["family"] == "gemm" and (gemm["spec"]["m"], gemm["spec"]["n"], gemm["spec"]["k"]) == \
        (64, 256, 128)
    # The dependency explains the wait; the 5 us between the GEMM's end and the kernel's start remain as a stall.
    assert events[4]["stall_us"] == 5.0
    assert "stall_us" not in gemm


def test_measured_replay_reproduces_the_steps(trace_file):
    report = replay([trace_file], durations="measured", quiet=True)
    rank = report["per_rank"][0]
    assert rank["measured_iterations_ms"] == [1.0, 1.0]
    # The syncs are satisfied when stream 20 ends (540) and when the kernel ends (1185); the calls returned 1 and 5 us
    # later, host time the replay keeps after them
    assert rank["iterations_ms"] == pytest.approx([1.0, 1.0])


def test_replay_cli_writes_the_report(trace_file, tmp_path):
    out = tmp_path / "report.json"
    assert replay_main([str(trace_file), "--report", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["per_rank"][0]["measured_iteration_time_ms"] == 1.0
    assert report["hardware"] == "h100-sxm"


def test_replay_of_a_malformed_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [')
    assert replay_main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stepcast: ") and str(bad) in err and err.count("\n") <= 1


def test_register_adds_the_replay_subcommand(trace_file):
    import argparse

    from stepcast.emulate.replay import register

    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", str(trace_file), "--durations", "predicted", "--hardware", "a100-sxm-80gb"])
    assert args.command == "replay" and args.durations == "predicted" and callable(args.func)


def decoding_trace(copy: str, tokens: int = 32, kernels: int = 24, seed: int = 0) -> dict:
    """A single-rank generation loop that reads each token back on the host: per token, ``kernels`` short kernels
    launched from Python (launch-bound, and queued when a kernel outlasts the host's next launch: then it starts
    0.5-1.5 us after its predecessor ends, as a GPU's back-to-back kernels do), the token's copy to the host (a
    pageable ``cudaMemcpyAsync`` that returns after it, or a pinned one and ``cudaStreamSynchronize``), whose call
    returns 3-10 us after the copy ends, then 50-200 us of sampling on the host."""
    rng = np.random.default_rng(seed)
    host, gpu = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
    events: list[dict] = []
    correlation = 0

    def x(cat, name, ts, dur, where, **args):
        events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args})

    t, stream_free = 1000.0, 0.0
    for _ in range(tokens):
        for k in range(kernels):
            t += rng.uniform(2, 12)
            call = rng.uniform(3, 8)
            correlation += 1
            x("cuda_runtime", "cudaLaunchKernel", t, call, host, correlation=correlation)
            start = max(t + rng.uniform(3, 6), stream_free + rng.uniform(0.5, 1.5))
            stream_free = start + rng.uniform(2, 20)
            x("kernel", f"void decode_kernel_{k}", start, stream_free - start, gpu, stream=7,
              correlation=correlation, device=0)
            t += call
        t += rng.uniform(2, 5)
        correlation += 1
        copy_start = max(t + 4, stream_free + 1)
        stream_free = copy_start + 1.5
        returns = stream_free + rng.uniform(3, 10)
        if copy == "pageable":
            x("cuda_runtime", "cudaMemcpyAsync", t, returns - t, host, correlation=correlation)
            x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", copy_start, 1.5, gpu, stream=7,
              correlation=correlation, device=0, bytes=8)
        else:
            x("cuda_runtime", "cudaMemcpyAsync", t, 3, host, correlation=correlation)
            x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", copy_start, 1.5, gpu, stream=7,
              correlation=correlation, device=0, bytes=8)
            correlation += 1
            x("cuda_runtime", "cudaStreamSynchronize", t + 5, returns - t - 5, host, correlation=correlation)
        t = returns + rng.uniform(50, 200)
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}


@pytest.mark.parametrize("copy", ["pageable", "pinned"])
def test_a_loop_that_syncs_every_token_replays_its_measured_time(copy, tmp_path):
    # Before, the replay lost each sync's return beyond its copy (the gap after it was counted from the call's
    # return, the simulated call returns when the copy ends) and each queued kernel's gap behind its predecessor
    # (below the 1 us jitter tolerance): 1.7 % short on this trace
    path = tmp_path / "decode.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(decoding_trace(copy), f)
    rank = replay([path], durations="measured", quiet=True)["per_rank"][0]
    (measured,), (replayed,) = rank["measured_iterations_ms"], rank["iterations_ms"]
    assert replayed == pytest.approx(measured, rel=0.002)
