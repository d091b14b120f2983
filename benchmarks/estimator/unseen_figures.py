"""The unseen protocol's figures: each held-out block of rows scored per candidate and seed, broken down by dtype
and source, and the seeds' figures kept side by side (their spread is what a change must exceed).

A breakdown whose rows equal a coarser one's is left out; ``estimator.unseen_results.figure`` finds a figure by the
dtypes and sources of the rows it covers.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from benchmarks.estimator.unseen import POOLED, Holdout, text_of
from stepcast.estimator.metrics import summary

#: the summary figures kept per (group, model): means over the seeds, and mean_ape's per-seed values
KEPT = ("mean_ape", "median_ape", "p90_ape", "time_weighted_ape", "within_10pct")


def groups(dtype: np.ndarray, source: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """(dtype label, source label, mask) of the breakdowns of a block of held-out rows: all of them, each dtype and
    each source where there are several, each (dtype, source) where a dtype has several sources; a breakdown with
    the same rows as an earlier one is left out (``figure`` finds it by its rows' dtypes and sources)."""
    dtypes, sources = sorted(set(dtype)), sorted(set(source))
    wanted = [("all", "all")] + [(d, "all") for d in dtypes] + [("all", s) for s in sources]
    wanted += [(d, s) for d in dtypes for s in sorted(set(source[dtype == d]))]
    out, seen = [], set()
    for d, s in wanted:
        mask = (dtype == d if d != "all" else np.ones(len(dtype), bool)) & (source == s if s != "all" else True)
        key = np.flatnonzero(mask).tobytes()
        if mask.any() and key not in seen:
            seen.add(key)
            out.append((d, s, mask))
    return out


def block_figures(split: str, family: str, held_out: str, rows: pd.DataFrame,
                  predictions: dict[tuple[str, int], np.ndarray]) -> list[dict[str, Any]]:
    """The figures of one block of held-out rows (``rows``: dtype, source, runtime_us) for every candidate:
    ``predictions`` maps (label, seed) to the rows' predictions."""
    dtype, source = text_of(rows, "dtype"), text_of(rows, "source")
    truth = rows["runtime_us"].to_numpy(dtype=np.float64)
    labels = list(dict.fromkeys(label for label, _ in predictions))
    out = []
    for d, s, mask in groups(dtype, source):
        for label in labels:
            per_seed = [summary(p[mask], truth[mask]) for (lab, _), p in sorted(predictions.items()) if lab == label]
            out.append({"split": split, "held_out": held_out, "family": family, "dtype": d, "source": s,
                        "dtypes": sorted(set(dtype[mask])), "sources": sorted(set(source[mask])), "model": label,
                        "n": int(mask.sum()), "seeds": [round(f["mean_ape"], 3) for f in per_seed]}
                       | {k: round(float(np.mean([f[k] for f in per_seed])), 3) for k in KEPT})
    return out


def split_figures(split: str, family: str, frame: pd.DataFrame, folds: dict[str, list[Holdout]],
                  results: dict[tuple[str, str, int], pd.DataFrame], pooled: set[str]) -> list[dict[str, Any]]:
    """Per held-out fold (``shapes``: per device), then pooled over the folds in ``pooled`` (each held-out row once).
    ``folds``: seed -> that seed's folds (the same but for ``shapes``)."""
    parts: dict[str, list[tuple[pd.DataFrame, dict[tuple[str, int], np.ndarray]]]] = {}
    for seed, seed_folds in folds.items():
        for h in seed_folds:
            rows = frame.iloc[h.test]
            preds = {label: r["predicted_us"].to_numpy() for (fold, label, s), r in results.items()
                     if fold == h.name and s == seed}
            names = text_of(rows, "hardware") if split == "shapes" else np.full(len(rows), h.name, dtype=object)
            for name in sorted(set(names)):
                mine = names == name
                parts.setdefault(name, []).append((rows[mine], {(lab, seed): p[mine] for lab, p in preds.items()}))
            if h.name in pooled or split == "shapes":
                parts.setdefault(POOLED, []).append((rows, {(lab, seed): p for lab, p in preds.items()}))
    out = []
    for name, pieces in parts.items():
        # every seed holds out the same rows but for ``shapes``, whose rows differ by seed: each seed its own block
        by_seed: dict[int, list] = {}
        for rows, preds in pieces:
            by_seed.setdefault(next(iter(preds))[1], []).append((rows, preds))
        out += _seed_blocks(split, family, name, by_seed)
    return out


def _seed_blocks(split: str, family: str, name: str, by_seed: dict[int, list]) -> list[dict[str, Any]]:
    """Figures of one held-out name whose rows may differ between seeds: each seed's block is scored on its own
    rows, and the seeds' figures averaged per breakdown (n: the mean over the seeds)."""
    per_seed = []
    for seed, pieces in sorted(by_seed.items()):
        rows = pd.concat([r for r, _ in pieces], ignore_index=True)
        preds = {key: np.concatenate([p[key] for _, p in pieces]) for key in pieces[0][1]}
        per_seed.append(block_figures(split, family, name, rows, preds))
    if len(per_seed) == 1:
        return per_seed[0]
    merged: dict[tuple, list[dict]] = {}
    for figures in per_seed:
        for f in figures:
            merged.setdefault((f["dtype"], f["source"], f["model"]), []).append(f)
    out = []
    for found in merged.values():
        first = found[0]
        out.append(first | {"n": int(round(np.mean([f["n"] for f in found]))),
                            "dtypes": sorted({d for f in found for d in f["dtypes"]}),
                            "sources": sorted({s for f in found for s in f["sources"]}),
                            "seeds": [s for f in found for s in f["seeds"]]}
                   | {k: round(float(np.mean([f[k] for f in found])), 3) for k in KEPT})
    return out
