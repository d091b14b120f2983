"""Fit-and-score over the splits of :mod:`estimator.splits`: one summary row per (split, fold), plus the held-out
predictions (for plots and breakdowns by hardware and runtime bucket)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from stepcast.estimator.metrics import ape, summary
from stepcast.estimator.models import make_estimator
from stepcast.estimator.splits import Fold, folds


@dataclass
class Evaluation:
    folds: pd.DataFrame  # split, fold, rows, mean_ape, ...
    predictions: pd.DataFrame = field(default_factory=pd.DataFrame)  # held-out rows + predicted_us, split, fold

    def by_split(self) -> pd.DataFrame:
        """Pooled over folds: every held-out prediction of a split scored together; and ``fold_mean_ape``, the mean
        over its folds of each fold's mean APE, where every held-out group weighs the same (pooled, one large
        table decides: Vidur's 9,549-row A40 all-reduce table carries the collectives' held-out-groups figure)."""
        rows = []
        for split, preds in self.predictions.groupby("split", sort=False):
            predicted, measured = preds["predicted_us"].to_numpy(), preds["runtime_us"].to_numpy()
            per_fold = pd.Series(ape(predicted, measured)).groupby(preds["fold"].to_numpy(), sort=False).mean()
            rows.append({"split": split} | summary(predicted, measured) | {"fold_mean_ape": float(per_fold.mean())})
        return pd.DataFrame(rows)


def subsample(frame: pd.DataFrame, max_rows: int | None, seed: int = 0) -> pd.DataFrame:
    if max_rows is None or len(frame) <= max_rows:
        return frame
    return frame.sample(max_rows, random_state=seed)


def select_folds(frame: pd.DataFrame, split: str, min_test_rows: int = 20, max_folds: int | None = None,
                 seed: int = 0) -> list[Fold]:
    chosen = [f for f in folds(split, frame, seed) if len(f.test) >= min_test_rows and len(f.train)]
    if max_folds is not None:
        chosen = sorted(chosen, key=lambda f: -len(f.test))[:max_folds]
    return chosen


def evaluate_fold(kind: str, family: str, frame: pd.DataFrame, fold: Fold, params: dict[str, Any] | None,
                  target: str | None, max_train_rows: int | None = None, seed: int = 0) -> pd.DataFrame:
    train = subsample(frame.iloc[fold.train], max_train_rows, seed)
    test = frame.iloc[fold.test]
    model = make_estimator(kind, family, params, target).fit(train, train["runtime_us"].to_numpy())
    out = test[["family", "hardware", "runtime_us"]].copy()
    if hasattr(model, "predict_with_support"):  # the flags the router's fallback rules read (bundle_predictions)
        out["predicted_us"], out["shape_ok"], out["hardware_seen"], out["spec_ok"] = model.predict_with_support(test)
    else:
        out["predicted_us"] = model.predict(test)
    out["split"], out["fold"] = fold.split, fold.name
    return out


def bundle_predictions(learned: Evaluation, roofline: Evaluation, rule: str) -> Evaluation:
    """What a bundle would have predicted on the held-out rows: the learned model's prediction, or the roofline's
    where the family's fallback ``rule`` sends the row (same folds, same rows: both evaluations ran on one frame
    with one seed)."""
    from stepcast.estimator.router import fallback_mask

    ours, theirs = learned.predictions, roofline.predictions
    if not len(ours) or "shape_ok" not in ours:
        return Evaluation(pd.DataFrame())
    keys = ["split", "fold"]
    theirs = theirs.set_index(keys, append=True)["predicted_us"]
    fallback_us = theirs.reindex(ours.set_index(keys, append=True).index).to_numpy()
    use = fallback_mask(rule, *(ours[c].to_numpy(dtype=bool) for c in ("shape_ok", "hardware_seen", "spec_ok")))
    preds = ours.drop(columns=["shape_ok", "hardware_seen", "spec_ok"]).assign(
        predicted_us=np.where(use, fallback_us, ours["predicted_us"].to_numpy()), fallback=use)
    return Evaluation(pd.DataFrame(), preds)


def evaluate(kind: str, family: str, frame: pd.DataFrame, splits: Iterable[str], params: dict[str, Any] | None = None,
             target: str | None = None, max_train_rows: int | None = None, min_test_rows: int = 20,
             seed: int = 0, progress: bool = True, max_folds: int | None = None) -> Evaluation:
    """Score ``kind`` on every fold of every split (folds with fewer than ``min_test_rows`` test rows are skipped;
    with ``max_folds``, only that many folds per split, those with the most test rows)."""
    frame = frame.reset_index(drop=True)
    todo = [f for split in splits for f in select_folds(frame, split, min_test_rows, max_folds, seed)]
    preds, rows = [], []
    for fold in tqdm(todo, desc=f"{family}/{kind}", unit="fold", disable=not progress, leave=False):
        p = evaluate_fold(kind, family, frame, fold, params, target, max_train_rows, seed)
        preds.append(p)
        rows.append({"split": fold.split, "fold": fold.name}
                    | summary(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
    return Evaluation(pd.DataFrame(rows), pd.concat(preds, ignore_index=True) if preds else pd.DataFrame())
