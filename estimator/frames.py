"""Small helpers over kernel frames shared by the estimators."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd


def family_positions(frame: pd.DataFrame) -> Iterator[tuple[str, np.ndarray]]:
    """(family, integer positions of its rows) for every family present, in order of first appearance."""
    families = frame["family"]
    first = families.iat[0] if len(families) else None
    if len(families) and (families == first).all():  # the common case: one family, no grouping needed
        yield str(first), np.arange(len(frame))
        return
    for family, positions in frame.groupby("family", sort=False).indices.items():
        yield str(family), np.asarray(positions)


def factorize(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and the distinct values (as Python objects) of a column; fast for arrow-backed strings and
    categoricals, which is what keeps per-row string columns off the prediction's critical path."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), np.asarray(values.cat.categories, dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.asarray(codes), np.asarray(uniques, dtype=object)


def as_frame(kernels: pd.DataFrame | list[dict] | dict) -> pd.DataFrame:
    """Accept a frame, a list of kernel specs (dicts) or one spec, as the estimators' ``predict`` does."""
    if isinstance(kernels, pd.DataFrame):
        return kernels
    if isinstance(kernels, dict):
        kernels = [kernels]
    return pd.DataFrame.from_records(list(kernels))
