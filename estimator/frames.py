"""Small helpers over kernel frames shared by the estimators."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd


class KernelColumns:
    """A few kernel rows as column -> numpy array: the light form of a frame for single-kernel calls, where pandas'
    per-column overhead would cost more than the model. Supports what the estimators read (``[]``, ``in``,
    ``len``)."""

    def __init__(self, data: dict[str, np.ndarray]) -> None:
        self.data = data
        self.n = len(next(iter(data.values()))) if data else 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def __contains__(self, name: str) -> bool:
        return name in self.data

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    def take(self, positions: np.ndarray) -> "KernelColumns":
        return KernelColumns({k: v[positions] for k, v in self.data.items()})

    @classmethod
    def from_records(cls, records: list[dict]) -> "KernelColumns":
        keys = list(dict.fromkeys(k for r in records for k in r))
        return cls({k: _array([r.get(k) for r in records]) for k in keys})

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> "KernelColumns":
        # one conversion of the whole (small) frame: per-column access costs ~30 us a column in pandas
        if len(frame) == 1:  # a single kernel (the emulator's call): one row as a list, a third of the cost
            return cls({k: _array([v]) for k, v in zip(frame.columns, frame.iloc[0].tolist())})
        values = frame.to_numpy(dtype=object)
        return cls({k: _array(values[:, i].tolist()) for i, k in enumerate(frame.columns)})


def _array(values: list) -> np.ndarray:
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=np.float64)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


Kernels = pd.DataFrame | KernelColumns


def num(frame: Kernels, name: str) -> np.ndarray:
    """A numeric column as float64 (missing -> NaN)."""
    values = frame[name]
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.asarray(values, dtype=np.float64)


def text(frame: Kernels, name: str) -> np.ndarray:
    """A string column as an object array of str."""
    codes, uniques = factorize(frame[name])
    return np.array([str(u) for u in uniques], dtype=object)[codes] if len(codes) else np.empty(0, dtype=object)


def flag(frame: Kernels, name: str) -> np.ndarray:
    """A boolean column (missing -> False)."""
    codes, uniques = factorize(frame[name])
    truth = np.array([bool(u) and str(u).lower() not in {"false", "0", "nan", "none"} for u in uniques], dtype=bool)
    return truth[codes] if len(codes) else np.empty(0, dtype=bool)


def take(frame: Kernels, positions: np.ndarray) -> Kernels:
    if len(positions) == len(frame):
        return frame
    return frame.take(positions) if isinstance(frame, KernelColumns) else frame.iloc[positions]


def family_positions(frame: Kernels) -> Iterator[tuple[str, np.ndarray]]:
    """(family, integer positions of its rows) for every family present, in order of first appearance."""
    codes, uniques = factorize(frame["family"])
    if len(uniques) == 1:  # the common case: one family, no grouping needed
        yield str(uniques[0]), np.arange(len(frame))
        return
    for i, family in enumerate(uniques):
        yield str(family), np.flatnonzero(codes == i)


#: frames up to this many rows take the plain-Python paths (single-kernel calls from the emulator)
SMALL = 16


def factorize(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and the distinct values (as Python objects) of a column; fast for arrow-backed strings and
    categoricals, which is what keeps per-row string columns off the prediction's critical path."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), np.asarray(values.cat.categories, dtype=object)
    if len(values) <= SMALL:  # a handful of rows: plain Python beats pandas' per-call overhead
        items = values.tolist() if hasattr(values, "tolist") else list(values)
        index: dict = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in items), dtype=np.intp, count=len(items))
        uniques = np.empty(len(index), dtype=object)
        uniques[:] = list(index)
        return codes, uniques
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.asarray(codes), np.asarray(uniques, dtype=object)


def by_code(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per row, the entry of ``table`` at its :func:`factorize` code: one entry per distinct value, then one more,
    last, for the rows without a value (code -1, a categorical's missing value). Lets a per-row column be computed
    once per distinct value."""
    return table[np.where(codes < 0, len(table) - 1, codes)]


def as_frame(kernels: pd.DataFrame | KernelColumns | list[dict] | dict) -> pd.DataFrame:
    """A data frame of kernel rows from a frame, light columns, a list of kernel specs (dicts) or one spec."""
    if isinstance(kernels, pd.DataFrame):
        return kernels
    if isinstance(kernels, KernelColumns):
        return pd.DataFrame(kernels.data)
    if isinstance(kernels, dict):
        kernels = [kernels]
    return pd.DataFrame.from_records(list(kernels))


def as_kernels(kernels: pd.DataFrame | KernelColumns | list[dict] | dict) -> Kernels:
    """What the estimators compute on: a frame, or light columns for up to SMALL rows."""
    if isinstance(kernels, KernelColumns):
        return kernels
    if isinstance(kernels, dict):
        kernels = [kernels]
    if isinstance(kernels, pd.DataFrame):
        return KernelColumns.from_frame(kernels) if len(kernels) <= SMALL else kernels
    kernels = list(kernels)
    return KernelColumns.from_records(kernels) if len(kernels) <= SMALL else pd.DataFrame.from_records(kernels)
