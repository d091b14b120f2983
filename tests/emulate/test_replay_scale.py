"""Replaying large profiler traces: the streaming reader, bounded memory, progress, and the synthetic trace of
:mod:`benchmarks.emulate.replay_scale` replaying to its own measured step."""
from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.emulate.replay_scale import write_trace
from stepcast.emulate.replay import replay
from stepcast.profiling import kineto


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("scale") / "synthetic.json.gz", kernels=3000, steps=3)


def test_synthetic_trace_replays_to_its_measured_step(synthetic):
    report = replay([synthetic], durations="measured", quiet=True)
    measured = report["per_rank"][0]["measured_iteration_time_ms"]
    assert report["iteration_time_ms"] == pytest.approx(measured, rel=0.005)
    kernels = kineto.read_trace(synthetic).kernels()
    assert len(kernels) >= 2900 and kernels["op_name"].notna().all()


def test_values_cut_at_any_chunk_boundary_read_the_same(tmp_path, monkeypatch, synthetic):
    events = json.loads(gzip.open(synthetic).read())["traceEvents"][:400]
    doc = {"schemaVersion": 1, "traceEvents": events,  # metadata after the events, as Kineto writes some of it
           "distributedInfo": {"rank": 3, "world_size": 4}, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1))
    whole = kineto.read_trace(path)
    monkeypatch.setattr(kineto, "READ_CHUNK_BYTES", 7)
    chunked = kineto.read_trace(path)
    pd.testing.assert_frame_equal(whole.events, chunked.events)
    assert (chunked.rank, chunked.world_size, chunked.device_name) == (3, 4, "NVIDIA H100")


def test_reading_holds_little_more_than_the_events_frame(synthetic):
    tracemalloc.start()
    try:
        trace = kineto.read_trace(synthetic)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    frame = trace.events.memory_usage(deep=False).sum()
    # streaming: ~2.9x the frame (the columns being filled, then the frame); loading the whole document first
    # (its text, then a dict per event) took 6.2x
    assert peak < 4 * frame, (peak, frame)


def test_replay_reports_progress_on_a_non_terminal(synthetic, capsys, monkeypatch):
    import stepcast.emulate.replay
    from stepcast import emulate

    monkeypatch.setattr(emulate.replay, "PROGRESS_EVERY_S", 0.0)   # as if every stage took longer than the period
    replay([synthetic], durations="measured", quiet=False)
    err = capsys.readouterr().err
    for stage in ("reading", "converting device ops", "simulating"):
        assert f"stepcast: synthetic.json.gz: {stage}" in err or f"stepcast: {stage}" in err, err


def test_converted_launches_that_repeat_share_one_dict(synthetic):
    from stepcast.emulate.kineto_to_trace import convert_file
    from stepcast.emulate.trace import EventTable

    events = convert_file(synthetic)["events"]
    assert isinstance(events, EventTable) and len(events) >= 3000
    # three steps of the same layers: what differs from launch to launch is in the columns (times, durations)
    assert len(events.shapes) < len(events) / 2, events
    assert {"duration_us", "gap_ns", "seq", "t_ns"} <= set(events.columns)
