"""The documented schema of a profiler dataset file ``datasets/<hardware>/<family>.parquet``, checked on write and read.

Columns, in order:

- ``family``, ``hardware``, ``dtype`` and the family's key columns (:func:`profiling.families.key_columns`);
- family extras: gemm ``op`` (mm | addmm | bmm | matmul), ``trans_a``, ``trans_b``; attention ``backend``
  (flash | efficient | cudnn | math); collective ``backend`` (nccl | gloo);
- optional ``kernels``: JSON list of ``{name, grid, block, duration_us}`` recorded by torch.profiler (GPU, on request);
- measurement: ``median_us``, ``min_us``, ``mean_us``, ``std_us`` (float64, microseconds, null when failed),
  ``reps`` (int64), ``status`` (ok | failed), ``error`` (null when ok), ``point_id`` (resume key),
  ``sample`` (grid | random | model), ``timing`` (cuda_event | perf_counter), ``threads`` (CPU threads; null on GPU).

A malformed file is rejected with :class:`DatasetSchemaError`, one line naming the file, the row and the field.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from stepcast.profiling.atomic import atomic_path
from stepcast.profiling.families import DTYPES, FAMILIES, key_columns
from stepcast.errors import InputError

SCHEMA_VERSION = 1

GEMM_OPS = ("mm", "addmm", "bmm", "matmul")
ATTENTION_BACKENDS = ("flash", "efficient", "cudnn", "math")
# cast: dtype -> fp32 (fp32 -> bf16); copy: contiguous copy of a transposed 2-D view; fill: zero_()
ELEMENTWISE_OPS = ("add", "mul", "div", "exp", "tanh", "sigmoid", "gelu", "silu", "relu", "copy", "cast", "dropout",
                   "fill")
NORM_OPS = ("layer_norm", "rms_norm", "softmax", "log_softmax", "cross_entropy", "sum", "mean")
OPTIMIZER_OPS = ("adamw_foreach", "adamw_fused", "sgd_foreach", "sgd_fused")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
COLLECTIVE_BACKENDS = ("nccl", "gloo")
PASSES = ("fwd", "bwd")

PositiveInt = Field(gt=0)


class MeasurementRow(BaseModel):
    """Columns every family shares: the common key columns and the measurement."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=False)

    family: Literal[tuple(FAMILIES)]  # type: ignore[valid-type]
    hardware: str = Field(min_length=1)
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    kernels: Optional[str] = None
    median_us: Optional[float] = Field(default=None, ge=0)
    min_us: Optional[float] = Field(default=None, ge=0)
    mean_us: Optional[float] = Field(default=None, ge=0)
    std_us: Optional[float] = Field(default=None, ge=0)
    reps: int = Field(ge=0)
    status: Literal["ok", "failed"]
    error: Optional[str] = None
    point_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    sample: Literal["grid", "random", "model"]
    timing: Literal["cuda_event", "perf_counter"]
    threads: Optional[int] = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _status_matches_figures(self) -> "MeasurementRow":
        figures = (self.median_us, self.min_us, self.mean_us, self.std_us)
        if self.status == "ok" and (any(f is None for f in figures) or self.error is not None or self.reps < 1):
            raise ValueError("status 'ok' needs median_us/min_us/mean_us/std_us, reps >= 1 and a null error")
        if self.status == "failed" and not self.error:
            raise ValueError("status 'failed' needs an error message")
        return self


_FAMILY_FIELDS: dict[str, dict[str, Any]] = {
    "gemm": {"m": (int, PositiveInt), "n": (int, PositiveInt), "k": (int, PositiveInt), "batch": (int, PositiveInt),
             "op": (Literal[GEMM_OPS], ...), "trans_a": (bool, ...), "trans_b": (bool, ...)},
    "attention": {"batch": (int, PositiveInt), "heads_q": (int, PositiveInt), "heads_kv": (int, PositiveInt),
                  "seq_q": (int, PositiveInt), "seq_kv": (int, PositiveInt), "head_dim": (int, PositiveInt),
                  "causal": (bool, ...), "pass_": (Literal[PASSES], Field(alias="pass")),
                  "backend": (Literal[ATTENTION_BACKENDS], ...)},
    "elementwise": {"op": (Literal[ELEMENTWISE_OPS], ...), "numel": (int, PositiveInt)},
    "norm": {"op": (Literal[NORM_OPS], ...), "rows": (int, PositiveInt), "cols": (int, PositiveInt),
             "pass_": (Literal[PASSES], Field(alias="pass"))},
    "collective": {"op": (Literal[COLLECTIVE_OPS], ...), "bytes": (int, PositiveInt), "ranks": (int, PositiveInt),
                   "ranks_per_node": (int, PositiveInt), "backend": (Literal[COLLECTIVE_BACKENDS], ...)},
    "optimizer": {"op": (Literal[OPTIMIZER_OPS], ...), "params": (int, PositiveInt)},
}

_MEASUREMENT_COLUMNS = ("median_us", "min_us", "mean_us", "std_us", "reps", "status", "error", "point_id", "sample",
                        "timing", "threads")
_ARROW_TYPES = {int: pa.int64(), float: pa.float64(), bool: pa.bool_(), str: pa.string()}


class DatasetSchemaError(InputError):
    """A dataset file that does not follow the schema; the message is one line naming file, row and field."""


@functools.cache
def row_model(family: str) -> type[MeasurementRow]:
    """The pydantic model of one row of ``family``'s dataset."""
    if family not in _FAMILY_FIELDS:
        raise ValueError(f"unknown family '{family}': expected one of {', '.join(FAMILIES)}")
    return create_model(f"{family.capitalize()}Row", __base__=MeasurementRow, **_FAMILY_FIELDS[family])


def extra_columns(family: str) -> tuple[str, ...]:
    """Family-specific columns that are not key columns (gemm op/transposes, attention and collective backend)."""
    keys = set(key_columns(family))
    return tuple(_column_name(f) for f in _FAMILY_FIELDS[family] if _column_name(f) not in keys)


def columns(family: str) -> tuple[str, ...]:
    """All columns of a family's file, in order (``kernels`` included; it may be absent from a file)."""
    return key_columns(family) + extra_columns(family) + ("kernels",) + _MEASUREMENT_COLUMNS


def _column_name(field_name: str) -> str:
    return "pass" if field_name == "pass_" else field_name


def _python_type(family: str, column: str) -> type:
    model = row_model(family)
    field = model.model_fields["pass_" if column == "pass" else column]
    annotation = field.annotation
    for candidate in (bool, int, float):  # bool before int: bool is an int subclass
        if annotation is candidate or annotation == Optional[candidate]:
            return candidate
    return str


@functools.cache
def arrow_schema(family: str) -> pa.Schema:
    return pa.schema([pa.field(c, _ARROW_TYPES[_python_type(family, c)]) for c in columns(family)])


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"] if not isinstance(p, int)]
    return (loc[-1] if loc else "<row>"), err["msg"]


def validate_rows(rows: list[dict[str, Any]], family: str, source: str | Path) -> None:
    """Check every row against the family's model; raise DatasetSchemaError on the first bad one."""
    model = row_model(family)
    for i, row in enumerate(rows):
        try:
            parsed = model.model_validate(row)
        except ValidationError as exc:
            field, msg = _first_error(exc)
            raise DatasetSchemaError(f"{source}: row {i} field '{field}': {msg}") from None
        if parsed.family != family:
            raise DatasetSchemaError(f"{source}: row {i} field 'family': '{parsed.family}', expected '{family}'")


def write_family(rows: list[dict[str, Any]], family: str, path: Path) -> Path:
    """Validate ``rows`` and write them as ``path`` atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    validate_rows(rows, family, path)
    table = pa.Table.from_pylist([{c: row.get(c) for c in columns(family)} for row in rows],
                                 schema=arrow_schema(family))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def read_family(path: Path, family: str | None = None) -> pd.DataFrame:
    """Read and validate one dataset file; ``family`` defaults to the file's stem (``gemm.parquet`` -> gemm)."""
    path = Path(path)
    family = family or path.stem.split(".")[0]
    if family not in FAMILIES:
        raise DatasetSchemaError(f"{path}: file name names no family: expected one of {', '.join(FAMILIES)}")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DatasetSchemaError(f"{path}: not a readable parquet file ({exc.__class__.__name__})") from None
    expected = arrow_schema(family)
    for field in expected:
        if field.name not in table.column_names:
            if field.name == "kernels":
                continue
            raise DatasetSchemaError(f"{path}: field '{field.name}': missing column")
        found = table.schema.field(field.name).type
        if found != field.type and not (pa.types.is_null(found) and field.nullable):
            raise DatasetSchemaError(f"{path}: field '{field.name}': expected {field.type}, found {found}")
    unknown = [c for c in table.column_names if c not in expected.names]
    if unknown:
        raise DatasetSchemaError(f"{path}: field '{unknown[0]}': not a column of the {family} schema")
    validate_rows(table.to_pylist(), family, path)
    frame = table.to_pandas()
    if "kernels" not in frame.columns:
        frame["kernels"] = None
    return frame[list(columns(family))]
