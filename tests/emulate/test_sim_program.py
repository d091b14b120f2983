"""A rank's program (emulate.sim.program) built from the compact event table is the one built from event dicts,
and simulating either gives the same timeline."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stepcast.emulate.sim.program import build_program
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.emulate.trace import EventTable, TraceFormatError, read_trace, write_trace


def two_streams_with_memory(rank: int = 0) -> dict:
    b = TraceBuilder(rank=rank, world_size=2, meta={"call_costs_in_gaps": False})
    b.malloc(ptr=0x1000, nbytes=1 << 20)
    for step in range(4):
        b.iteration(step, gap_us=3.0)
        b.memcpy(4096, stream=1, blocking=step % 2 == 0, duration_us=2.0, gap_us=1.0)
        b.kernel(stream=1, duration_us=10.0 + step, gap_us=2.0, name="gemm")
        b.record(event=7, stream=1, gap_us=0.5)
        b.wait(stream=3, event=7)
        b.kernel(stream=3, duration_us=4.0, gap_us=1.5, name="add")
        b.events[-1]["stall_us"] = 0.25 * step
        b.collective(stream=2, comm_seq=step, duration_us=20.0, gap_us=1.0)
        b.malloc(ptr=0x2000 + step, nbytes=1 << 10)
        b.free(ptr=0x2000 + step)
        b.stream_sync(stream=1, gap_us=1.0)
    b.iteration(4, gap_us=1.0, end=True)
    b.free(ptr=0x1000)
    return b.doc()


def written_and_read(doc: dict, path) -> dict:
    write_trace(path, rank=doc["rank"], world_size=doc["world_size"], hardware=doc["hardware"],
                events=doc["events"], meta=doc["meta"])
    return read_trace(path)


COLUMNS = ("kind", "gap_ns", "stream", "handle", "stream_ids", "stall_ns", "end_marker", "peak_memory_bytes")
ARRAYS = ("kind_array", "recorded_us", "device_index", "iteration_index")


def test_program_of_the_table_is_the_program_of_the_dicts(tmp_path):
    doc = two_streams_with_memory()
    from_dicts = build_program(doc)
    from_table = build_program(written_and_read(doc, tmp_path / "rank0.json"))
    assert isinstance(from_table.events, EventTable) and from_table.events == doc["events"]
    for name in COLUMNS:
        assert getattr(from_table, name) == getattr(from_dicts, name), name
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(from_table, name), getattr(from_dicts, name), err_msg=name)
    for a, b in zip(from_table.memory_curve, from_dicts.memory_curve):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(from_table.op_codes, from_dicts.op_codes)
    assert from_table.peak_memory_bytes == (1 << 20) + (1 << 10)


def test_simulating_the_read_table_gives_the_timeline_of_the_dicts(tmp_path):
    docs = [two_streams_with_memory(rank) for rank in range(2)]
    read = [written_and_read(d, tmp_path / f"rank{d['rank']}.json") for d in docs]
    a = simulate(docs, "h100-sxm", durations="measured")
    b = simulate(read, "h100-sxm", durations="measured")
    for ta, tb in zip(a.timelines, b.timelines):
        np.testing.assert_array_equal(np.asarray(ta.start), np.asarray(tb.start))
        np.testing.assert_array_equal(np.asarray(ta.end), np.asarray(tb.end))


def test_streams_are_numbered_in_order_of_first_use():
    b = TraceBuilder()
    b.iteration(0)
    for stream in (9, 4, 9, 0, 4):
        b.kernel(stream=stream, duration_us=1.0)
    prog = build_program(b.doc())
    assert prog.stream_ids == [9, 4, 0] and prog.stream == [-1, 0, 1, 0, 2, 1]


def test_a_rank_copied_from_another_shares_its_event_table():
    prog = build_program(two_streams_with_memory())
    copy = dataclasses.replace(prog, rank=1)
    assert copy.events is prog.events and copy.kind is prog.kind


@pytest.mark.parametrize("field, value, message", [
    ("gap_ns", -5, r"events\[2\]\.gap_ns"),
    ("gap_ns", "late", r"events\[2\]\.gap_ns"),
    ("stream", None, r"events\[2\]\.stream: missing"),
    ("duration_us", -1.0, r"events\[2\]\.duration_us"),
    ("kind", "nap", r"events\[2\]\.kind"),
])
def test_a_bad_event_in_a_table_is_named(field, value, message):
    doc = two_streams_with_memory()
    doc["events"][2][field] = value
    with pytest.raises(TraceFormatError, match=message):
        build_program({**doc, "events": EventTable.from_dicts(doc["events"])}, "rank0.json")
