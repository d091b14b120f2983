"""Which candidate model a bundle runs for each (family, device, dtype), chosen by the unseen protocol's figures.

    python -m estimator.routing [--results docs/results/unseen.json]     # the routes and what they would change

The rule (``choose_routes``), per family:

- a (device, dtype) the training data has rows of (**seen**) runs the candidate with the lowest mean APE on the
  within-device split (``shapes``: a fifth of the shapes held out on every device) for that device and dtype; with
  fewer than ``MIN_ROWS`` held-out rows there, the family's choice on that split pooled over every device;
- any other (device, dtype) (**unseen**) runs the candidate with the lowest mean APE on the ``device`` split (each
  device held out whole) pooled over the held-out GPUs' rows of that dtype; a dtype with fewer rows there, or none,
  takes the family's choice pooled over every dtype;
- a challenger replaces the **incumbent** (the family's kind in the shipped bundle) only where its mean APE is lower
  by more than the larger of the two ranges over seeds: a difference inside the seeds' spread is not evidence.

Fallbacks, at prediction time (``estimator.router``): a row whose device's spec lies outside what the chosen learned
model was trained on goes to the roofline (rule ``unsupported_spec``: a CPU asked of a GPU-trained model); a route
naming a model the bundle lacks runs the family's primary model.

The report (``route_report``) gives, per held-out device and dtype, the model the shipped bundle's rule runs today
(``bundle``) and the routed one, with their unseen-protocol errors; ``nested`` is the honest figure for the routed
bundle on an unseen device: the choice made without that device's figures (choosing on the figures it is then
scored on would flatter it).
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from estimator.frames import by_code, factorize

#: a specific (device, dtype) or dtype choice needs at least this many held-out rows behind it
MIN_ROWS = 20
#: derived figures of the results that are no model a bundle can hold
NOT_CANDIDATES = ("bundle", "routed")
ROOFLINE = "roofline"


#: families whose rows count as seen by their model's own test alone, whatever the dtype: the NCCL model times any
#: dtype from its bytes, and a device whose catalog links equal a fitted device's takes that device's figures
#: (``estimator.nccl.same_links_as``), so it is no unseen device to that model
DEVICE_ONLY = ("collective",)


@dataclass
class FamilyRoutes:
    """One family's routes: ``seen`` by "<device>/<dtype>", ``unseen`` by dtype, each with a default; ``pairs``: the
    (device, dtype) pairs of the training data ("<device>/<dtype>"), which decide whether a row is seen (but for
    ``device_only`` families, where the model's own test does)."""
    seen_default: str
    unseen_default: str
    seen: dict[str, str] = field(default_factory=dict)
    unseen: dict[str, str] = field(default_factory=dict)
    pairs: list[str] = field(default_factory=list)
    device_only: bool = False

    def kinds(self) -> set[str]:
        """Every model the routes name."""
        return {self.seen_default, self.unseen_default, *self.seen.values(), *self.unseen.values()}

    def is_seen(self, hardware: Any, dtype: Any, model_seen: np.ndarray) -> np.ndarray:
        """Per row: its (device, dtype) pair is in ``pairs`` and its model counts its device as seen
        (``device_only``: the model's test alone)."""
        model_seen = np.asarray(model_seen, dtype=bool)
        if self.device_only:
            return model_seen
        pairs, codes = _pairs(hardware, dtype)
        known = set(self.pairs)
        return by_code(np.array([p in known for p in pairs] + [False]), codes) & model_seen

    def kinds_for(self, hardware: Any, dtype: Any, seen: np.ndarray) -> np.ndarray:
        """The model of each row, given whether each row is seen (``is_seen``); decided once per distinct
        (device, dtype, seen) (an emulated step's million kernels have a handful)."""
        pairs, codes = _pairs(hardware, dtype)
        combo = codes * 2 + np.asarray(seen, dtype=np.int64)
        distinct, inverse = np.unique(combo, return_inverse=True)
        table = []
        for value in distinct:
            pair, was_seen = pairs[value // 2], bool(value % 2)
            table.append(self.seen.get(pair, self.seen_default) if was_seen
                         else self.unseen.get(pair.rsplit("/", 1)[1], self.unseen_default))
        return np.array(table, dtype=object)[inverse.reshape(-1)] if len(table) else np.empty(0, dtype=object)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "FamilyRoutes":
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in
                                                 ("seen_default", "unseen_default")):
            raise ValueError(f"{source}: expected an object with 'seen_default' and 'unseen_default' model names")
        for name in ("seen", "unseen"):
            value = data.get(name, {})
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ValueError(f"{source}: field '{name}': expected an object of key -> model name")
        pairs = data.get("pairs", [])
        if not isinstance(pairs, list):
            raise ValueError(f"{source}: field 'pairs': expected a list of '<device>/<dtype>'")
        return cls(data["seen_default"], data["unseen_default"], dict(data.get("seen", {})),
                   dict(data.get("unseen", {})), [str(p) for p in pairs], bool(data.get("device_only", False)))


def _pairs(hardware: Any, dtype: Any) -> tuple[list[str], np.ndarray]:
    """(the distinct "<device>/<dtype>" pairs, each row's index among them)."""
    hcodes, devices = factorize(hardware)
    dcodes, dtypes = factorize(dtype)
    codes = np.maximum(hcodes, 0) * max(len(dtypes), 1) + np.maximum(dcodes, 0)
    distinct, inverse = np.unique(codes, return_inverse=True)
    width = max(len(dtypes), 1)
    pairs = [f"{devices[c // width] if len(devices) else ''}/{dtypes[c % width] if len(dtypes) else ''}"
             for c in distinct]
    return pairs, inverse.reshape(-1)


# -- choosing ------------------------------------------------------------------------------------------------------
def choose(options: dict[str, list[float]], incumbent: str | None) -> str:
    """The candidate with the lowest mean of its per-seed figures, unless the incumbent is within the larger of the
    two ranges over seeds of it (then the incumbent)."""
    means = {k: float(np.mean(v)) for k, v in options.items() if len(v)}
    best = min(means, key=lambda k: (means[k], k))
    if incumbent in means and incumbent != best:
        spread = max(np.ptp(options[best]), np.ptp(options[incumbent]))
        if means[incumbent] - means[best] <= spread:
            return incumbent
    return best


def _options(rows: pd.DataFrame) -> dict[str, list[float]]:
    return {str(r.model): list(r.seeds) for r in rows.itertuples() if r.model not in NOT_CANDIDATES}


def _exactly(rows: pd.DataFrame, dtype: str | None) -> pd.DataFrame:
    """Per model, the breakdown row of exactly ``dtype``'s held-out rows (None: all of them), any source."""
    mine = rows if dtype is None else rows[rows["dtypes"].map(lambda d: list(d) == [dtype])]
    return mine.sort_values("n", kind="stable").groupby("model", sort=False).tail(1)


def pooled_options(folds: pd.DataFrame, dtype: str | None) -> tuple[dict[str, list[float]], int]:
    """(model -> per-seed mean APE pooled over the held-out folds' rows of ``dtype`` (None: all), rows): each fold's
    figure weighted by its rows, which is the pooled mean APE of every held-out row."""
    parts = [_exactly(block, dtype) for _, block in folds.groupby("held_out", sort=True)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return {}, 0
    rows = pd.concat(parts, ignore_index=True)
    rows = rows[~rows["model"].isin(NOT_CANDIDATES)]
    out = {}
    for model, mine in rows.groupby("model", sort=True):
        seeds = np.array([list(s) for s in mine["seeds"]], dtype=float)
        out[str(model)] = list(np.average(seeds, axis=0, weights=mine["n"].to_numpy(dtype=float)))
    return out, int(sum(int(p["n"].max()) for p in parts))


def route_choices(figures: pd.DataFrame, incumbents: dict[str, str], gpus: set[str],
                  exclude: str | None = None) -> list[dict[str, Any]]:
    """Every choice behind the routes, with its evidence: ``family``, ``side`` (unseen / seen), ``key`` (a dtype,
    a "<device>/<dtype>", or "*" for the side's default), ``rows`` behind it, ``options`` (model -> per-seed mean
    APE) and ``chosen`` (None where too few rows: the side's default applies). ``figures``: the results' rows;
    ``incumbents``: family -> the shipped bundle's kind; ``gpus``: the held-out devices that are GPUs, whose device
    folds the unseen choices pool; ``exclude``: a device whose figures the unseen choices leave out (the nested
    choice for that device)."""
    from estimator.unseen import POOLED

    out = []
    for family in sorted(set(figures["family"])):
        mine = figures[figures["family"] == family]
        device = mine[(mine["split"] == "device") & mine["held_out"].isin(gpus - {exclude})]
        shapes = mine[mine["split"] == "shapes"]
        if not len(device) or not len(shapes):
            continue
        incumbent = incumbents.get(family)

        def add(side: str, key: str, options: dict[str, list[float]], rows: int, default: bool = False) -> None:
            enough = bool(options) and (default or rows >= MIN_ROWS)
            out.append({"family": family, "side": side, "key": key, "rows": rows, "options": options,
                        "chosen": choose(options, incumbent) if enough else None})

        options, rows = pooled_options(device, None)
        add("unseen", "*", options, rows, default=True)
        for dtype in sorted({d for ds in device["dtypes"] for d in ds}):
            add("unseen", dtype, *pooled_options(device, dtype))
        pooled = _exactly(shapes[shapes["held_out"] == POOLED], None)
        add("seen", "*", _options(pooled), int(pooled["n"].max()) if len(pooled) else 0, default=True)
        for held_out, block in shapes[shapes["held_out"] != POOLED].groupby("held_out", sort=True):
            for dtype in sorted({d for ds in block["dtypes"] for d in ds}):
                chosen = _exactly(block, dtype)
                add("seen", f"{held_out}/{dtype}", _options(chosen), int(chosen["n"].min()) if len(chosen) else 0)
    return out


def choose_routes(figures: pd.DataFrame, incumbents: dict[str, str], gpus: set[str],
                  exclude: str | None = None) -> dict[str, FamilyRoutes]:
    """Routes for every family with device-split and shapes-split figures (``route_choices``' arguments);
    ``pairs`` are the shapes split's (device, dtype) pairs."""
    out = {}
    choices = route_choices(figures, incumbents, gpus, exclude)
    for family in dict.fromkeys(c["family"] for c in choices):
        mine = [c for c in choices if c["family"] == family]
        default = {c["side"]: c["chosen"] for c in mine if c["key"] == "*"}
        if None in default.values() or len(default) < 2:
            continue
        chosen = {(c["side"], c["key"]): c["chosen"] for c in mine if c["key"] != "*" and c["chosen"]}
        out[family] = FamilyRoutes(
            default["seen"], default["unseen"], {k: v for (side, k), v in chosen.items() if side == "seen"},
            {k: v for (side, k), v in chosen.items() if side == "unseen"},
            [c["key"] for c in mine if c["side"] == "seen" and c["key"] != "*"], family in DEVICE_ONLY)
    return out


def incumbents_of(doc: dict[str, Any]) -> dict[str, str]:
    """family -> the shipped bundle's kind, as the results recorded it."""
    return {f: str(r["kind"]) for f, r in doc.get("settings", {}).get("bundle_rules", {}).items()}


# -- what the routes change ----------------------------------------------------------------------------------------
def route_report(figures: pd.DataFrame, routes: dict[str, FamilyRoutes], nested: dict[str, Any]) -> pd.DataFrame:
    """Per held-out GPU, family and dtype (device split): mean APE of what the shipped rule runs (``bundle``), the
    route the bundle would take (``routed``: chosen on every GPU's figures) and the honest figure of routing
    (``routed_ape``: the ``routed`` candidate of the results, whose choice for each device was made without it,
    ``nested`` naming it)."""
    from estimator.unseen import POOLED

    device = figures[(figures["split"] == "device") & (figures["held_out"] != POOLED)]
    rows = []
    for (family, held_out), block in device.groupby(["family", "held_out"], sort=True):
        if family not in routes or held_out not in nested.get(family, {}):
            continue
        for dtype in sorted({d for ds in block["dtypes"] for d in ds}):
            here = _exactly(block, dtype).set_index("model")
            figure = here["mean_ape"].to_dict()
            spread = here["seeds"].map(np.ptp).to_dict()
            chosen = nested[family][held_out].get(dtype, nested[family][held_out].get("*"))
            rows.append({"family": family, "device": held_out, "dtype": dtype, "n": int(here["n"].max()),
                         "bundle": figure.get("bundle", np.nan), "bundle_spread": spread.get("bundle", np.nan),
                         "route": routes[family].unseen.get(dtype, routes[family].unseen_default),
                         "nested": chosen, "routed": figure.get("routed", np.nan),
                         "routed_spread": spread.get("routed", np.nan)})
    return pd.DataFrame(rows)


def print_report(report: pd.DataFrame, routes: dict[str, FamilyRoutes]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    table = Table(title="Routes chosen by the unseen protocol (unseen: by dtype; seen: by device and dtype)")
    for column in ("family", "unseen default", "unseen by dtype", "seen default", "seen (device/dtype) not default"):
        table.add_column(column)
    for family, r in routes.items():
        table.add_row(family, r.unseen_default, ", ".join(f"{d}: {k}" for d, k in r.unseen.items()), r.seen_default,
                      ", ".join(f"{d}: {k}" for d, k in r.seen.items() if k != r.seen_default) or "-")
    console.print(table)
    table = Table(title="Each GPU held out: mean APE % (range over seeds) of what the shipped rule runs (bundle) and "
                        "of the routed bundle, its choice made without that GPU (nested)")
    for column in ("family", "device", "dtype", "rows", "bundle", "route", "nested", "routed"):
        table.add_column(column, justify="right" if column in ("rows", "bundle", "routed") else "left")
    for r in report.itertuples(index=False):
        table.add_row(r.family, r.device, r.dtype, f"{r.n:,}", f"{r.bundle:.1f} ({r.bundle_spread:.1f})", r.route,
                      str(r.nested), f"{r.routed:.1f} ({r.routed_spread:.1f})")
    console.print(table)


def routes_from_results(doc: dict[str, Any]) -> dict[str, FamilyRoutes]:
    """The routes a results document's figures choose."""
    from estimator.unseen_results import frame

    figures = frame(doc)
    return choose_routes(figures, incumbents_of(doc), gpus_of(figures))


def gpus_of(figures: pd.DataFrame) -> set[str]:
    """The held-out devices of the device split that are GPUs."""
    from estimator.unseen import POOLED, is_gpu

    return {d for d in set(figures.loc[figures["split"] == "device", "held_out"]) if d != POOLED and is_gpu(d)}


def main(argv: list[str] | None = None) -> int:
    from estimator import unseen_results

    parser = argparse.ArgumentParser(prog="python -m estimator.routing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=unseen_results.RESULTS, help="the unseen protocol's results")
    args = parser.parse_args(argv)
    try:
        doc = unseen_results.read(args.results)
    except (FileNotFoundError, ValueError) as exc:
        print(f"stepcast: {exc}")
        return 2
    routes = routes_from_results(doc)
    print_report(route_report(unseen_results.frame(doc), routes, doc.get("routing", {}).get("nested", {})), routes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
