"""The trace-v1 reader/writer and its in-memory form, :class:`emulate.trace.EventTable`."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from stepcast.emulate.trace import EventTable, TraceFormatError, read_trace, write_trace

SPEC = {"family": "gemm", "dtype": "bf16", "m": 2048, "n": 4096, "k": 4096, "batch": 1}


def every_field_events() -> list[dict]:
    """One event of every kind with every field of format v1 (required, optional and the compatible extensions),
    values of each JSON type (null, bool, int, float, string, list, nested dict) and large integers."""
    events = [
        {"kind": "iteration", "step": 0, "source": "profiler", "thread": 0},
        {"kind": "malloc", "ptr": 139_943_000_000_000, "bytes": 1 << 30},
        {"kind": "malloc", "ptr": None, "bytes": 1 << 40, "failed": True},
        {"kind": "kernel", "stream": 7, "name": "sm90_gemm", "grid": [96, 8, 1], "block": [384, 1, 1], "shmem": 0,
         "lib": None, "op": "aten::mm", "op_shapes": [[2048, 4096], [4096, 4096]], "op_dtypes": ["bf16", "bf16"],
         "spec": SPEC, "duration_us": 95.25, "op_duration_us": 101.5, "stall_us": 0.125, "thread": 1},
        {"kind": "kernel", "stream": 7, "name": "splitk_reduce", "grid": None, "block": None, "shmem": 1024,
         "lib": "cublasLt", "op": "aten.mm.default", "op_shapes": [[], [3]], "op_dtypes": ["", ""], "spec": None,
         "op_part": True, "duration_us": 6, "gemm": {"m": 1, "n": 2, "k": 3, "batch": 1, "transa": "n",
                                                      "transb": "t", "dtype_a": "bf16", "dtype_b": "bf16",
                                                      "dtype_c": "bf16", "compute": "32f", "tf32": False,
                                                      "epilogue": 0}},
        {"kind": "memcpy", "stream": 0, "bytes": 16384, "direction": "h2d", "blocking": True, "op": "aten::copy_",
         "duration_us": 3.0},
        {"kind": "memcpy", "stream": 0, "bytes": 16384, "direction": "h2d", "blocking": 1, "duration_us": 3.0},
        {"kind": "memset", "stream": 3, "bytes": 512},
        {"kind": "event_record", "event": 12, "stream": 3},
        {"kind": "stream_wait_event", "stream": 7, "event": 12},
        {"kind": "event_sync", "event": "0x7f00"},
        {"kind": "stream_sync", "stream": 7},
        {"kind": "collective", "stream": 20, "op": "send", "comm": "pg1", "comm_seq": 4, "ranks": 2, "peer": 1,
         "comm_rank": 0, "count": 1024, "dtype": "bf16", "bytes": 2048, "group": 3, "torch_op": "c10d.send",
         "spec": {"family": "collective", "op": "send", "bytes": 2048, "ranks": 2}, "name": "ncclDevKernel_Send"},
        {"kind": "collective", "stream": 20, "op": "all_reduce", "comm": "world", "comm_seq": 0, "ranks": 8,
         "duration_us": 60.0},
        {"kind": "free", "ptr": 139_943_000_000_000, "bytes": 1 << 30},
        {"kind": "device_sync", "stall_us": 2},
        {"kind": "iteration", "step": 1, "end": True, "extension": {"nan": None, "list": [1.0, 1, True, "x"]}},
    ]
    t = 0
    for seq, ev in enumerate(events):
        t += 1500 * seq
        ev.update({"seq": seq, "t_ns": t, "gap_ns": 1500 * seq if seq != 3 else 2.5})
    events[-2]["t_ns"] = 2 ** 60  # too large for a float column: kept exactly
    return events


def typed(value):
    """``value`` with the type of every scalar made visible (1, 1.0 and True compare equal in Python)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def test_table_gives_back_every_field_of_every_event_with_its_type():
    events = every_field_events()
    table = EventTable.from_dicts(copy.deepcopy(events))
    assert len(table) == len(events)
    assert [typed(ev) for ev in table] == [typed(ev) for ev in events]
    assert [typed(table[i]) for i in range(len(events))] == [typed(ev) for ev in events]
    assert typed(table[-1]) == typed(events[-1])


def test_written_and_read_trace_round_trips_every_field(tmp_path):
    events = every_field_events()
    for name in ("rank0.trace.json", "rank0.trace.json.gz"):
        path = write_trace(tmp_path / name, rank=3, world_size=8, hardware="h100-sxm", events=events,
                           meta={"script": "train.py"})
        doc = read_trace(path)
        assert isinstance(doc["events"], EventTable)
        assert [typed(ev) for ev in doc["events"]] == [typed(ev) for ev in events]
        assert (doc["rank"], doc["world_size"], doc["hardware"], doc["meta"]) == (3, 8, "h100-sxm",
                                                                                 {"script": "train.py"})
        # a table writes the same file as its dicts
        again = write_trace(tmp_path / ("again." + name), rank=3, world_size=8, hardware="h100-sxm",
                            events=doc["events"], meta={"script": "train.py"})
        assert [typed(ev) for ev in read_trace(again)["events"]] == [typed(ev) for ev in events]


def test_written_trace_is_plain_json_of_format_v1(tmp_path):
    events = every_field_events()
    path = write_trace(tmp_path / "t.json", rank=0, world_size=1, hardware="h100-sxm", events=events)
    doc = json.loads(path.read_text())
    assert doc["format"] == "stepcast-trace" and doc["version"] == 1 and doc["events"] == events


def test_repeated_events_share_one_dict_of_their_unchanging_fields():
    kernel = {"kind": "kernel", "stream": 7, "name": "k", "grid": [1, 1, 1], "block": [128, 1, 1], "spec": SPEC}
    events = [{"seq": i, "t_ns": 10 * i, "gap_ns": 10, **copy.deepcopy(kernel), "duration_us": 1.0 + i}
              for i in range(1000)]
    table = EventTable.from_dicts(events)
    assert len(table.shapes) == 1
    assert table[0]["grid"] is table[999]["grid"]  # equal lists read from JSON become one object
    assert [ev["duration_us"] for ev in table] == [1.0 + i for i in range(1000)]


def test_equal_looking_values_of_other_types_are_not_merged():
    events = [{"kind": "memcpy", "blocking": True}, {"kind": "memcpy", "blocking": 1},
              {"kind": "memcpy", "blocking": 1.0}, {"kind": "memcpy", "grid": [1, True]},
              {"kind": "memcpy", "grid": [1, 1]}]
    assert [typed(ev) for ev in EventTable.from_dicts(events)] == [typed(ev) for ev in events]


def test_a_changed_event_dict_leaves_the_table_as_it_was():
    table = EventTable.from_dicts(every_field_events())
    ev = table[3]
    ev["duration_us"], ev["name"] = -1.0, "changed"
    assert table[3]["duration_us"] == 95.25 and table[3]["name"] == "sm90_gemm"


def test_slices_are_tables_of_the_same_events():
    events = every_field_events()
    table = EventTable.from_dicts(events)
    part = table[3:9]
    assert isinstance(part, EventTable) and list(part) == events[3:9]
    assert part.shape_index.base is not None  # a view, not a copy
    assert list(table[::-1]) == events[::-1]


def test_field_and_number_give_one_field_of_every_event():
    events = every_field_events()
    table = EventTable.from_dicts(events)
    assert table.field("stream") == [ev.get("stream") for ev in events]
    assert table.field("duration_us", "none") == [ev.get("duration_us", "none") for ev in events]
    assert table.kinds() == [ev["kind"] for ev in events]
    durations = table.number("duration_us", np.nan)
    expected = np.array([ev.get("duration_us", np.nan) for ev in events], dtype=float)
    np.testing.assert_array_equal(durations, expected)
    np.testing.assert_array_equal(table.number("stall_us", 0.0), [ev.get("stall_us", 0.0) for ev in events])
    with pytest.raises(ValueError):
        table.number("name")


def test_events_as_dicts_compare_equal_to_the_table():
    events = every_field_events()
    table = EventTable.from_dicts(events)
    assert table == events and table == EventTable.from_dicts(events)
    assert table != events[:-1]


def test_with_columns_sets_a_column_of_every_event():
    table = EventTable.from_dicts([{"kind": "device_sync"}, {"kind": "device_sync"}])
    seq = table.with_columns(seq=np.arange(2))
    assert [ev["seq"] for ev in seq] == [0, 1] and "seq" not in table[0]
    with pytest.raises(ValueError):
        table.with_columns(seq=np.arange(3))


def test_an_event_that_is_not_an_object_is_a_type_error():
    with pytest.raises(TypeError, match="event 1"):
        EventTable.from_dicts([{"kind": "device_sync"}, "device_sync"])


def test_reading_an_unknown_kind_names_the_event(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 1,
                                "hardware": "h100-sxm", "events": [{"kind": "device_sync"}, {"kind": "nap"}]}))
    with pytest.raises(TraceFormatError, match=r"events\[1\]\.kind"):
        read_trace(path)


@pytest.mark.parametrize("text, message", [
    ('{"format": "other", "version": 1, "events": []}', "field 'format': expected 'stepcast-trace'"),
    ('[1, 2]', "field 'format'"),
    ('{"format": "stepcast-trace", "version": 2}', "field 'version': expected 1, found 2"),
    ('{"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 1, "hardware": "x"}',
     "field 'events' is missing"),
    ('{"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 1, "hardware": "x", "events": {}}',
     "field 'events': expected a list"),
    ('{"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 1, "hardware": "x", '
     '"events": [{"kind": "kernel"}, 7]}', r"events\[1\]\.kind: expected one of .*, found 7"),
    ('{"format": "stepcast-trace", "version": 1, "events": [{"kind": "ker', "cannot read trace"),
    ('', "cannot read trace"),
])
def test_a_file_that_is_not_a_trace_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "rank0.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message) as info:
        read_trace(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_truncated_gzip_trace_cannot_be_read(tmp_path):
    path = write_trace(tmp_path / "rank0.json.gz", rank=0, world_size=1, hardware="h100-sxm",
                       events=every_field_events())
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(TraceFormatError, match="cannot read trace"):
        read_trace(path)
