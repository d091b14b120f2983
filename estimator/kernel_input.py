"""Reading and checking kernel rows for prediction (the ``stepcast predict`` input contract).

A row is ``family``, ``hardware`` (catalog id), ``dtype`` and its family's key columns (profiling/families.py).
Checks are vectorised per column; the first offending row is reported in one line with its line number (CSV: the
file line, header = line 1; parquet: the 1-based row) and the column, e.g.
``kernels.csv:7: column 'm': expected a positive number, got 'abc'``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.frames import factorize
from stepcast.profiling.families import BOOL_COLUMNS, DTYPES, FAMILIES, STRING_COLUMNS
from stepcast.profiling.hardware import UnknownHardwareError, load_catalog, lookup
from stepcast.errors import InputError

# Columns that may be 0 (a single-rank collective has no peer; numel 0 is a valid empty launch) are still >= 0.
NON_NEGATIVE = frozenset({"numel", "bytes", "params"})
CHOICES = {"pass": ("fwd", "bwd")}
TRUE, FALSE = {"true", "1", "yes", "t", "1.0"}, {"false", "0", "no", "f", "0.0"}
#: a CSV whose first this many bytes hold a NUL byte is binary
BINARY_PROBE_BYTES = 8192


class KernelInputError(InputError):
    """A malformed kernel row; the message is one line naming the file, line and column."""


def read_kernels(path: Path) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise KernelInputError(f"{path}: no such file")
    if path.suffix not in {".parquet", ".pq", ".csv", ".txt"}:
        raise KernelInputError(f"{path}: expected a .csv or .parquet file")
    if path.stat().st_size == 0:
        raise KernelInputError(f"{path}: empty (expected a header line, then one row per kernel)")
    if path.suffix in {".parquet", ".pq"}:
        import pyarrow

        try:
            return pd.read_parquet(path)
        except (pyarrow.ArrowException, OSError, ValueError) as exc:
            raise KernelInputError(f"{path}: not a readable parquet file ({_first_line(exc)})") from None
    with open(path, "rb") as f:
        nul = f.read(BINARY_PROBE_BYTES).find(b"\0")
    if nul >= 0:  # what git calls binary; a parser would report some later line
        raise KernelInputError(f"{path}: a binary file (NUL byte at offset {nul}), expected CSV text")
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise KernelInputError(f"{path}: not UTF-8 text ({exc.reason}), expected CSV text"
                               ) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise KernelInputError(f"{path}: not valid CSV ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), exc.__class__.__name__)[:200]


class _Locator:
    def __init__(self, name: str, csv: bool) -> None:
        self.name, self.csv = name, csv

    def where(self, position: int) -> str:
        return f"{self.name}:{position + 2}" if self.csv else f"{self.name}: row {position + 1}"


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def check_kernels(frame: pd.DataFrame, name: str = "<input>", csv: bool = True,
                  hardware: str | None = None) -> pd.DataFrame:
    """Typed kernel rows ready for an estimator; raises KernelInputError / UnknownHardwareError (one line)."""
    loc = _Locator(name, csv)
    frame = frame.reset_index(drop=True).copy()
    if hardware is not None:
        hw_id = lookup(hardware).id  # UnknownHardwareError names the catalog
        frame["hardware"] = frame["hardware"].fillna(hw_id) if "hardware" in frame else hw_id
    for column in ("family", "hardware", "dtype"):
        if column not in frame:
            hint = " (or pass --hardware)" if column == "hardware" else ""
            raise KernelInputError(f"{name}: missing column '{column}'{hint}")
    failures: list[tuple[int, str, type]] = []  # (position, message, error type); the earliest row is reported

    def fail(mask: np.ndarray, column: str, expected: str) -> None:
        pos = _first(mask)
        if pos is not None:
            failures.append((pos, f"column '{column}': expected {expected}, got {frame[column].iat[pos]!r}",
                             KernelInputError))

    family = frame["family"].astype("string")
    fail((~family.isin(list(FAMILIES))).to_numpy(bool), "family", f"one of {', '.join(FAMILIES)}")
    fail((~frame["dtype"].astype("string").isin(list(DTYPES))).to_numpy(bool), "dtype", f"one of {', '.join(DTYPES)}")
    catalog = load_catalog()
    codes, uniques = factorize(frame["hardware"])
    known = np.array([_known(u, catalog) for u in uniques], dtype=object)
    missing = frame["hardware"].isna().to_numpy(bool)
    pos = _first(missing)
    if pos is not None:
        failures.append((pos, "column 'hardware': empty (fill it or pass --hardware)", KernelInputError))
    pos = _first(np.array([k is None for k in known], dtype=bool)[codes] & ~missing)
    if pos is not None:
        failures.append((pos, f"column 'hardware': unknown hardware {frame['hardware'].iat[pos]!r}: expected one of "
                              f"{', '.join(sorted(catalog))}", UnknownHardwareError))
    if len(frame):
        frame["hardware"] = known[codes]
    for fam, columns in FAMILIES.items():
        rows = (family == fam).to_numpy(bool)
        if not rows.any():
            continue
        for column in columns:
            if column not in frame:
                failures.append((_first(rows), f"column '{column}': missing (needed by family '{fam}')",
                                 KernelInputError))
                continue
            values = frame[column]
            if column in STRING_COLUMNS:
                blank = (values.astype("string").str.strip() == "").fillna(True).to_numpy(bool)
                bad = values.isna().to_numpy(bool) | blank
                if column in CHOICES:
                    bad |= ~values.astype("string").isin(list(CHOICES[column])).fillna(False).to_numpy(bool)
                fail(rows & bad, column, "one of " + ", ".join(CHOICES[column]) if column in CHOICES else "a name")
            elif column in BOOL_COLUMNS:
                text = values.astype("string").str.strip().str.lower()
                fail(rows & ~text.isin(list(TRUE | FALSE)).fillna(False).to_numpy(bool), column, "true or false")
            else:
                if not _numeric_dtype(values):  # a parquet column of datetimes would pass as 1.6e18 nanoseconds
                    failures.append((_first(rows), f"column '{column}': expected numbers, got a column of dtype "
                                                    f"{values.dtype}", KernelInputError))
                    continue
                number = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
                low = 0.0 if column in NON_NEGATIVE else 1.0
                bad = ~np.isfinite(number) | (number < low)
                fail(rows & bad, column, "a number >= 0" if low == 0 else "a positive number")
    if failures:
        pos, message, error = min(failures, key=lambda f: f[0])
        raise error(f"{loc.where(pos)}: {message}")
    return _typed(frame)


def _numeric_dtype(values: pd.Series) -> bool:
    """Numbers (int, float) or text to parse (CSV cells, object columns); not datetimes, durations, booleans or
    categories, whose integer codes are no shape."""
    dtype = values.dtype
    if pd.api.types.is_bool_dtype(dtype) or isinstance(dtype, pd.CategoricalDtype):
        return False
    return (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_string_dtype(dtype)
            or pd.api.types.is_object_dtype(dtype))


def _known(value, catalog) -> str | None:
    try:
        return lookup(str(value), catalog).id
    except UnknownHardwareError:
        return None


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Numeric key columns as float64, booleans as bool: what the estimators read."""
    out = frame.copy()
    for columns in FAMILIES.values():
        for column in columns:
            if column not in out or column in STRING_COLUMNS:
                continue
            if column in BOOL_COLUMNS:
                out[column] = out[column].astype("string").str.strip().str.lower().isin(list(TRUE)).to_numpy(bool)
            else:
                out[column] = pd.to_numeric(out[column], errors="coerce")
    return out
