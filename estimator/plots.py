"""Figures of held-out predictions: predicted vs measured (log-log) and the error CDF, one panel per split."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from stepcast.estimator.metrics import ape  # noqa: E402


def predicted_vs_measured(predictions: pd.DataFrame, title: str) -> plt.Figure:
    splits = list(pd.unique(predictions["split"]))
    fig, axes = plt.subplots(1, max(1, len(splits)), figsize=(4.2 * max(1, len(splits)), 4), squeeze=False)
    for ax, split in zip(axes[0], splits):
        p = predictions[predictions["split"] == split]
        ax.loglog(p["runtime_us"], p["predicted_us"], ".", ms=2, alpha=0.4)
        lo, hi = p[["runtime_us", "predicted_us"]].min().min(), p[["runtime_us", "predicted_us"]].max().max()
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(title=split, xlabel="measured (us)", ylabel="predicted (us)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def error_cdf(predictions: pd.DataFrame, title: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(5, 4))
    for split, p in predictions.groupby("split", sort=False):
        e = np.sort(ape(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
        ax.plot(e, np.arange(1, len(e) + 1) / len(e), label=split)
    ax.set(xscale="log", xlabel="absolute percentage error (%)", ylabel="share of kernels", title=title)
    ax.axvline(10, color="grey", lw=0.6, ls=":")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
