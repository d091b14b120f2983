"""Dataset files and cards are validated on write and on read; bad ones fail with one line naming the field."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stepcast.profiling.card import read_card
from stepcast.profiling.schema import DatasetSchemaError, columns, read_family, write_family


def gemm_row(**changes):
    row = {"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": 128, "n": 256, "k": 64, "batch": 1,
           "op": "mm", "trans_a": False, "trans_b": True, "median_us": 10.0, "min_us": 9.0, "mean_us": 10.5,
           "std_us": 0.5, "reps": 20, "status": "ok", "error": None, "point_id": "0123456789abcdef",
           "sample": "grid", "timing": "cuda_event", "threads": None}
    row.update(changes)
    return row


def test_round_trip_keeps_every_column(tmp_path):
    path = write_family([gemm_row(), gemm_row(point_id="fedcba9876543210", status="failed", error="OOM",
                                              median_us=None, min_us=None, mean_us=None, std_us=None, reps=0)],
                        "gemm", tmp_path / "gemm.parquet")
    frame = read_family(path)
    assert list(frame.columns) == list(columns("gemm"))
    assert frame["status"].tolist() == ["ok", "failed"]
    assert frame["m"].dtype == "int64" and frame["median_us"].dtype == "float64"


@pytest.mark.parametrize("changes, field", [
    ({"dtype": "float33"}, "dtype"),
    ({"m": 0}, "m"),
    ({"op": "conv"}, "op"),
    ({"point_id": "xyz"}, "point_id"),
    ({"median_us": None}, "<row>"),
])
def test_bad_row_is_refused_on_write(tmp_path, changes, field):
    path = tmp_path / "gemm.parquet"
    with pytest.raises(DatasetSchemaError) as err:
        write_family([gemm_row(**changes)], "gemm", path)
    assert f"field '{field}'" in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)
    assert not path.exists() and not list(tmp_path.iterdir())  # nothing half-written


def _write_raw(path, rows, schema=None):
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_malformed_parquet_is_refused_on_read(tmp_path):
    path = tmp_path / "gemm.parquet"
    good = gemm_row()
    _write_raw(path, [{**good, "m": "128"}])  # a string column where int64 is expected
    with pytest.raises(DatasetSchemaError, match=r"gemm.parquet: field 'm': expected int64, found string"):
        read_family(path)
    _write_raw(path, [{k: v for k, v in good.items() if k != "point_id"}])
    with pytest.raises(DatasetSchemaError, match=r"field 'point_id': missing column"):
        read_family(path)
    _write_raw(path, [{**good, "status": "maybe"}])
    with pytest.raises(DatasetSchemaError, match=r"row 0 field 'status'"):
        read_family(path)
    path.write_bytes(b"not parquet")
    with pytest.raises(DatasetSchemaError, match="not a readable parquet file"):
        read_family(path)


def test_malformed_card_is_refused(tmp_path):
    path = tmp_path / "card.json"
    path.write_text(json.dumps({"schema_version": 1, "hardware": "x", "timing": "stopwatch"}))
    with pytest.raises(DatasetSchemaError) as err:
        read_card(path)
    assert "card.json: field 'timing'" in str(err.value) and "\n" not in str(err.value)
    path.write_text("{")
    with pytest.raises(DatasetSchemaError, match="not a readable JSON card"):
        read_card(path)


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    import stepcast.profiling.schema as schema

    def interrupted(table, where):
        open(where, "wb").write(b"PAR1 half")  # a partial file, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(schema.pq, "write_table", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_family([gemm_row()], "gemm", tmp_path / "gemm.parquet")
    assert list(tmp_path.iterdir()) == []
