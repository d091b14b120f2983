"""Candidates of the unseen protocol made of the fitted ones: ``bundle``, the shipped bundle's fallback rule applied to
a fold's learned model (what users get today), and ``routed``, what a bundle routed by ``estimator.routing`` would
predict (each held-out device's routes chosen without its own figures)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.estimator.unseen import BUNDLE, FLAGS, ROUTED, Holdout, text_of
from benchmarks.estimator.unseen_figures import split_figures


def shipped_rules(bundle: Path | None = None) -> dict[str, tuple[str, str]]:
    """family -> (learned kind, fallback rule) of a bundle (default: the shipped default bundle)."""
    from stepcast.estimator.bundle import named_folders, read_json
    from stepcast.estimator.registry import DEFAULT_BUNDLE
    from stepcast.profiling.paths import MODELS_DIR

    root = Path(bundle) if bundle is not None else MODELS_DIR / DEFAULT_BUNDLE
    manifest = read_json(root / "manifest.json")
    rules = manifest.get("fallback_rules", {})
    folders = named_folders(root, manifest)
    return {family: (str(read_json(folders[family] / "meta.json")["kind"]),
                     str(rules.get(family, manifest.get("fallback_rule", "unsupported_spec"))))
            for family in manifest["families"]}


def with_bundle(results: dict[tuple[str, str, int], pd.DataFrame], rule: tuple[str, str] | None) -> None:
    """Adds the ``BUNDLE`` candidate to ``results`` ((fold, label, seed) -> predictions): the shipped rule applied to
    the fold's learned model of the shipped kind, the roofline where the rule sends a row."""
    from stepcast.estimator.router import fallback_mask

    if rule is None:
        return
    kind, name = rule
    for (fold, label, seed), learned in list(results.items()):
        roofline = results.get((fold, "roofline", seed))
        if label != kind or roofline is None or not set(FLAGS) <= set(learned.columns):
            continue
        use = fallback_mask(name, *(learned[c].to_numpy(dtype=bool) for c in FLAGS))
        results[(fold, BUNDLE, seed)] = pd.DataFrame({"predicted_us": np.where(
            use, roofline["predicted_us"].to_numpy(), learned["predicted_us"].to_numpy())})


def routed_predictions(routes: Any, frame: pd.DataFrame, h: Holdout, seed: int, primary: str,
                       results: dict[tuple[str, str, int], pd.DataFrame]) -> np.ndarray | None:
    """What a bundle with ``routes`` (``estimator.routing.FamilyRoutes``) predicts for a fold's held-out rows: each
    row's routed candidate, the roofline where a learned one's spec test fails (rule ``unsupported_spec``). A row's
    situation comes from the fold's training rows (its device and dtype, or its SM design and dtype, among them) and
    from ``primary`` (the family's kind in the bundle), which must count its device as seen. None where a routed
    candidate was not run."""
    from dataclasses import replace

    first = results.get((h.name, primary, seed))
    if first is None or (h.name, "roofline", seed) not in results:
        return None
    from stepcast.estimator.routing import designs_of

    pairs = pairs_in(frame.iloc[h.train])
    rows = frame.iloc[h.test]
    hardware, dtype = text_of(rows, "hardware"), text_of(rows, "dtype")
    model_seen = first["hardware_seen"].to_numpy(dtype=bool) if "hardware_seen" in first else np.zeros(len(rows), bool)
    routes = replace(routes, pairs=pairs, designs=designs_of(pairs))
    kinds = routes.kinds_for(hardware, dtype, routes.situations(hardware, dtype, model_seen))
    roofline = results[(h.name, "roofline", seed)]["predicted_us"].to_numpy()
    out = np.full(len(rows), np.nan)
    for kind in pd.unique(kinds):
        found = results.get((h.name, str(kind), seed))
        if found is None:
            return None
        mine = kinds == kind
        spec_ok = found["spec_ok"].to_numpy(dtype=bool) if "spec_ok" in found else np.ones(len(rows), bool)
        out[mine] = np.where(spec_ok, found["predicted_us"].to_numpy(), roofline)[mine]
    return out


def add_routed(kept: dict[tuple[str, str], tuple[dict, dict]], frames: dict[str, pd.DataFrame],
               figures: list[dict[str, Any]], rules: dict[str, tuple[str, str]]) -> tuple[list[dict[str, Any]], dict]:
    """The ``ROUTED`` candidate's figures on the device and shapes splits, and the unseen choices behind them
    (family -> held-out device -> dtype -> model, "*": the default). On the device split each held-out device's
    routes are chosen without its figures (``estimator.routing.choose_routes``' ``exclude``): scored on the figures
    it was chosen on, routing would flatter itself. The shapes split uses the routes chosen on every figure."""
    from stepcast.estimator.routing import choose_routes, gpus_of, incumbents_from, situation_of

    table = pd.DataFrame(figures)
    if not len(table):
        return [], {}
    gpus, incumbents = gpus_of(table), incumbents_from(rules)
    pairs = {family: pairs_in(frame) for family, frame in frames.items()}
    full = choose_routes(table, incumbents, gpus, pairs)
    out, nested = [], {}
    for (split, family), (folds, results) in kept.items():
        if family not in full:
            continue
        mine = table[table["family"] == family]
        names = {h.name for f in folds.values() for h in f}
        by_fold = {name: full[family] if split == "shapes" else
                   choose_routes(mine, incumbents, gpus, pairs, exclude=name).get(family) for name in names}
        routed = {}
        for seed, seed_folds in folds.items():
            for h in seed_folds:
                routes = by_fold[h.name]
                if routes is None:
                    continue
                if split == "device":
                    dtypes = sorted(set(text_of(frames[family].iloc[h.test], "dtype")))
                    nested.setdefault(family, {})[h.name] = {"*": routes.unseen_default} | {
                        d: routes.kind_of(f"{h.name}/{d}", situation_of(h.name, d, pairs[family], routes.device_only))
                        for d in dtypes}
                p = routed_predictions(routes, frames[family], h, seed, rules[family][0], results)
                if p is not None:
                    routed[(h.name, ROUTED, seed)] = pd.DataFrame({"predicted_us": p})
        if routed:
            pooled = {n for n in names if split != "device" or n in gpus}
            out += split_figures(split, family, frames[family], folds, routed, pooled)
    return out, nested


def pairs_in(frame: pd.DataFrame) -> list[str]:
    """The "<device>/<dtype>" pairs of a frame's rows."""
    return sorted(set(text_of(frame, "hardware") + "/" + text_of(frame, "dtype")))
