"""Error metrics of runtime predictions: per kernel (absolute percentage error) and weighted by time."""
from __future__ import annotations

import numpy as np
import pandas as pd

#: runtime buckets in microseconds (left-closed)
BUCKETS: tuple[float, ...] = (0, 10, 100, 1_000, 10_000, np.inf)
BUCKET_LABELS: tuple[str, ...] = ("<10us", "10-100us", "100us-1ms", "1-10ms", ">=10ms")


def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Absolute percentage error of each prediction, in percent."""
    true = np.asarray(true, dtype=np.float64)
    return np.abs(np.asarray(pred, dtype=np.float64) - true) / true * 100.0


def time_weighted_ape(pred: np.ndarray, true: np.ndarray) -> float:
    """sum |error| / sum(true), in percent: each kernel weighs its share of the time (a kernel measured at 0 us, as
    a trace at microsecond resolution records the shortest, weighs nothing rather than dividing by zero)."""
    true = np.asarray(true, dtype=np.float64)
    return float(np.sum(np.abs(np.asarray(pred, dtype=np.float64) - true)) / np.sum(true) * 100.0)


def summary(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """mean/median/p90/p99 APE (%), share within 10% (%), time-weighted error (%: sum|err| / sum(true)), rows."""
    true = np.asarray(true, dtype=np.float64)
    pred = np.asarray(pred, dtype=np.float64)
    if len(true) == 0:
        return {"n": 0}
    e = ape(pred, true)
    return {
        "n": int(len(e)),
        "mean_ape": float(np.mean(e)),
        "median_ape": float(np.median(e)),
        "p90_ape": float(np.percentile(e, 90)),
        "p99_ape": float(np.percentile(e, 99)),
        "within_10pct": float(np.mean(e <= 10.0) * 100.0),
        "time_weighted_ape": time_weighted_ape(pred, true),
    }


def runtime_bucket(runtime_us: np.ndarray) -> pd.Categorical:
    return pd.cut(np.asarray(runtime_us), bins=list(BUCKETS), labels=list(BUCKET_LABELS), right=False)


def breakdown(frame: pd.DataFrame, pred: np.ndarray, true: np.ndarray) -> pd.DataFrame:
    """One row per (dimension, value): the summary by family, by hardware and by runtime bucket."""
    rows = []
    keys = {"family": frame["family"].to_numpy(), "hardware": frame["hardware"].to_numpy(),
            "runtime": np.asarray(runtime_bucket(true).astype(str))}
    for dim, values in keys.items():
        for value in pd.unique(values):
            mask = values == value
            rows.append({"by": dim, "value": str(value)} | summary(pred[mask], true[mask]))
    return pd.DataFrame(rows)
