"""The training-row frame every importer returns, and the checks that keep it honest.

A training row (see the project's SCHEMA): every key column of every family (NaN / None where it does not apply to
the row's family), ``runtime_us`` (float64, microseconds), ``source``, ``group`` (the label held-out splits use) and
optional extras that models must not require (``kernel_name``, ``tp``, ``num_tokens``, ``grid``, ``block``, ...).

Numeric key columns are float64 (NaN where not applicable), strings are Python ``str`` or None, ``causal`` is
True/False/None.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from stepcast.profiling.families import COMMON_COLUMNS, DTYPES, FAMILIES
from stepcast.profiling.hardware import load_catalog
from stepcast.errors import InputError

SOURCES: tuple[str, ...] = ("profiler", "vidur", "neusight", "kineto", "llmcompass", "aiconfigurator")

KEY_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys(
    COMMON_COLUMNS + tuple(c for cols in FAMILIES.values() for c in cols)))
STRING_KEYS = frozenset({"family", "hardware", "dtype", "op", "pass"})
BOOL_KEYS = frozenset({"causal"})
NUMERIC_KEYS: tuple[str, ...] = tuple(c for c in KEY_COLUMNS if c not in STRING_KEYS | BOOL_KEYS)

MEASUREMENT_COLUMNS: tuple[str, ...] = ("runtime_us", "source", "group")
#: optional extras, in the order they are written when present
#: (``kernels`` is the profiler's JSON list of {name, grid, block, duration_us}; ``kernel_count`` how many kernels
#: the timed op launched)
EXTRA_COLUMNS: tuple[str, ...] = ("kernel_name", "kernel_count", "kernels", "grid", "block", "tp", "num_tokens",
                                  "backend", "trans_a", "trans_b", "gemm_op", "model", "vidur_op", "aten_op",
                                  "sample")
NUMERIC_EXTRAS = frozenset({"kernel_count", "tp", "num_tokens"})
TRAINING_COLUMNS: tuple[str, ...] = KEY_COLUMNS + MEASUREMENT_COLUMNS


class DataImportError(InputError):
    """Input that an importer cannot use; the message is one line naming the file and the column."""


def read_csv(path: Path, required: Iterable[str], **kwargs) -> pd.DataFrame:
    """Read a CSV and check it has the columns an importer relies on (one-line error naming file and column)."""
    try:
        frame = pd.read_csv(path, **kwargs)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataImportError(f"{path}: unreadable CSV ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") \
            from None
    for column in required:
        if column not in frame.columns:
            raise DataImportError(f"{path}: column '{column}' is missing")
    return frame


def empty_frame() -> pd.DataFrame:
    return finalize(pd.DataFrame({c: pd.Series(dtype=object) for c in TRAINING_COLUMNS}), source=None)


def finalize(frame: pd.DataFrame, source: str | None) -> pd.DataFrame:
    """Give ``frame`` the training-row schema: all key columns, normalised types, checked values.

    Rows with a missing, non-finite or non-positive runtime are dropped (a measurement that cannot be a time).
    Unknown hardware ids, families or dtypes raise DataImportError: they would be silent garbage downstream.
    """
    frame = frame.copy()
    if source is not None:
        frame["source"] = source
    for column in TRAINING_COLUMNS:
        if column not in frame.columns:
            frame[column] = np.nan if column in NUMERIC_KEYS or column == "runtime_us" else None
    for column in NUMERIC_KEYS + ("runtime_us",):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in NUMERIC_EXTRAS & set(frame.columns):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in STRING_KEYS | {"source", "group"} | (set(EXTRA_COLUMNS) - NUMERIC_EXTRAS - {"trans_a", "trans_b"}):
        if column in frame.columns:
            frame[column] = _strings(frame[column])
    for column in BOOL_KEYS | ({"trans_a", "trans_b"} & set(frame.columns)):
        missing = frame[column].isna().to_numpy()
        values = frame[column].astype(object).to_numpy(copy=True)
        values[~missing] = values[~missing].astype(bool)
        values[missing] = None
        frame[column] = pd.Series(values, index=frame.index, dtype=object)
    runtime = frame["runtime_us"]
    frame = frame[np.isfinite(runtime) & (runtime > 0)]
    _check_values(frame)
    extras = [c for c in EXTRA_COLUMNS if c in frame.columns]
    others = [c for c in frame.columns if c not in TRAINING_COLUMNS and c not in extras]
    return frame[list(TRAINING_COLUMNS) + extras + others].reset_index(drop=True)


def _strings(column: pd.Series) -> pd.Series:
    """Python str values, None where missing (object dtype, so parquet round trips keep None)."""
    missing = column.isna().to_numpy()
    values = column.astype(str).astype(object).to_numpy(copy=True)
    values[missing] = None
    return pd.Series(values, index=column.index, dtype=object)


def _check_values(frame: pd.DataFrame) -> None:
    where = f"source '{frame['source'].iat[0]}'" if len(frame) else "importer"
    unknown = set(frame["family"].dropna()) - set(FAMILIES)
    if unknown or frame["family"].isna().any():
        raise DataImportError(f"{where}: column 'family': unknown value {sorted(map(str, unknown or {None}))[0]}")
    bad_dtype = set(frame["dtype"].dropna()) - set(DTYPES)
    if bad_dtype or frame["dtype"].isna().any():
        raise DataImportError(f"{where}: column 'dtype': unexpected {sorted(map(str, bad_dtype or {None}))[0]}, "
                              f"expected one of {', '.join(DTYPES)}")
    catalog = load_catalog()
    missing = set(frame["hardware"].dropna()) - set(catalog)
    if missing or frame["hardware"].isna().any():
        raise DataImportError(f"{where}: column 'hardware': '{sorted(map(str, missing or {None}))[0]}' is not a "
                              f"catalog id (expected one of {', '.join(sorted(catalog))})")
    for family, rows in frame.groupby("family"):
        for column in FAMILIES[str(family)]:
            if rows[column].isna().any():
                raise DataImportError(f"{where}: column '{column}': missing for a {family} row")
