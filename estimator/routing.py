"""Which candidate model a bundle runs for each (family, device, dtype), chosen by the unseen protocol's figures.

    python -m stepcast.estimator.routing [--results docs/results/unseen.json]     # the routes and what they would
    change

A row is in one of three situations: **seen** (the training data has rows of its device and dtype), **sibling**
(it has none, but another device of the same SM design, the same compute capability, has rows of that dtype: the
same SMs, and cuBLAS picks its kernels by the compute capability, so what differs is the board: SM count, clocks,
memory) or **unseen** (a new SM design at that dtype). The rule (``choose_routes``), per family:

- seen: the candidate with the lowest mean APE on the within-device split (``shapes``: a fifth of the shapes held
  out on every device) for that device and dtype; with fewer than ``MIN_ROWS`` held-out rows there, the family's
  choice on that split pooled over every device;
- sibling / unseen: the candidate with the lowest mean APE on the ``device`` split (each device held out whole)
  pooled over the held-out GPUs' rows of that dtype that were in the same situation (a device held out whose SM
  design another training device shares at that dtype counts as a sibling); with too few rows, the situation's
  choice over every dtype (unseen: over every held-out GPU's rows);
- sibling and unseen rows go to bounded models only (``UNBOUNDED``: not the MLP, whose output past its training
  inputs has no bound);
- a challenger replaces the **incumbent** (what the shipped bundle runs in that situation: its kind, or the roofline
  for a device it was not trained on where its fallback rule says so) only where its mean APE is lower by more than
  the larger of the two ranges over seeds (a difference inside the seeds' spread is not evidence) and, for sibling
  and unseen rows, where it rests on two or more held-out devices and still beats the incumbent with any one of
  them left out (one device's figures are no evidence about the next device: ``stable_choice``).

Fallbacks, at prediction time (``estimator.router``): a row whose device's spec lies outside what the chosen learned
model was trained on goes to the roofline (rule ``unsupported_spec``: a CPU asked of a GPU-trained model); a route
naming a model the bundle lacks runs the family's primary model; collectives are seen or unseen as the NCCL model
judges a device (one with a fitted device's catalog links takes its figures), whatever the dtype.

The report (``route_report``) gives, per held-out device and dtype, the model the shipped bundle's rule runs today
(``bundle``) and the routed one, with their unseen-protocol errors; ``nested`` is the honest figure for the routed
bundle on an unseen device: the choice made without that device's figures (choosing on the figures it is then
scored on would flatter it).
"""
from __future__ import annotations

import argparse
import functools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stepcast.estimator.frames import by_code, factorize
from stepcast.errors import InputError, cli_main

#: a specific (device, dtype) or dtype choice needs at least this many held-out rows behind it
MIN_ROWS = 20
#: derived figures of the results that are no model a bundle can hold
NOT_CANDIDATES = ("bundle", "routed")
#: models whose prediction beyond their training inputs has no bound (a network's output past its data is a straight
#: line to anywhere): routed only to devices trained on at that dtype. The others are bounded by construction: the
#: roofline and the NCCL model by their structure, tiled by its tile bound over clamped inputs, XGBoost by its trees
#: (an efficiency never outside the training rows' range). On the device split the MLP's range over three seeds
#: reached 2,100 points (attention fp16 on the A100) and 306 (bf16 GEMMs on the B200, whose spec lies beyond every
#: other device's): chosen for a device from the others' figures, it was 363 % off there.
UNBOUNDED = ("mlp",)
ROOFLINE = "roofline"


#: families whose situations ignore the dtype and whose model says what a sibling is: the NCCL model times any
#: dtype from its bytes, and a device whose catalog links equal a fitted device's takes that device's figures
#: (``estimator.nccl.same_links_as``): such a device is the collectives' sibling, whatever its SM design
DEVICE_ONLY = ("collective",)


#: the situations of a row: its (device, dtype) has training rows; a device of the same SM design (compute
#: capability: the same SMs, and cuBLAS picks its kernels by it) has them at that dtype; neither
SEEN, SIBLING, UNSEEN = "seen", "sibling", "unseen"
SITUATIONS = (UNSEEN, SIBLING, SEEN)


@functools.cache
def design_of(device: str) -> str:
    """A device's SM design, "sm_<major><minor>" of its compute capability ("" for a CPU or an unknown device)."""
    from stepcast.profiling.hardware import UnknownHardwareError, lookup

    try:
        capability = lookup(device).compute_capability
    except (UnknownHardwareError, KeyError):
        return ""
    return f"sm_{capability[0]}{capability[1]}" if capability else ""


def designs_of(pairs: list[str]) -> list[str]:
    """"<design>/<dtype>" of every "<device>/<dtype>" pair that has a design."""
    out = set()
    for pair in pairs:
        device, _, dtype = pair.rpartition("/")
        if design_of(device):
            out.add(f"{design_of(device)}/{dtype}")
    return sorted(out)


@dataclass
class FamilyRoutes:
    """One family's routes: the model of a row in each situation (``situations``): ``seen`` by "<device>/<dtype>",
    ``sibling`` and ``unseen`` by dtype, each with a default (a sibling without a default of its own takes the
    unseen one). ``pairs``: the training data's "<device>/<dtype>" pairs and ``designs`` its "<design>/<dtype>"
    ones, which decide a row's situation (for ``device_only`` families, the model's own test decides seen or
    unseen)."""
    seen_default: str
    unseen_default: str
    seen: dict[str, str] = field(default_factory=dict)
    unseen: dict[str, str] = field(default_factory=dict)
    pairs: list[str] = field(default_factory=list)
    device_only: bool = False
    sibling: dict[str, str] = field(default_factory=dict)
    sibling_default: str | None = None
    designs: list[str] = field(default_factory=list)

    def kinds(self) -> set[str]:
        """Every model the routes name."""
        return {self.seen_default, self.unseen_default, *self.seen.values(), *self.unseen.values(),
                *self.sibling.values(), *([self.sibling_default] if self.sibling_default else [])}

    def situations(self, hardware: Any, dtype: Any, model_seen: np.ndarray) -> np.ndarray:
        """Per row, its situation (``SITUATIONS``): seen where its (device, dtype) pair is in ``pairs`` and its
        model counts its device as seen; else sibling where its "<design>/<dtype>" is in ``designs``; else unseen.
        ``device_only``: seen where its device is in ``pairs`` (any dtype) and the model counts it as seen, a
        sibling where only the model does (a device it times by a fitted one's figures), else unseen."""
        model_seen = np.asarray(model_seen, dtype=bool)
        pairs, codes = _pairs(hardware, dtype)
        if self.device_only:
            trained = {p.rpartition("/")[0] for p in self.pairs}
            device_seen = by_code(np.array([p.rpartition("/")[0] in trained for p in pairs] + [False]), codes)
            return np.where(model_seen, np.where(device_seen, SEEN, SIBLING), UNSEEN).astype(object)
        known, designs = set(self.pairs), set(self.designs)
        seen = by_code(np.array([p in known for p in pairs] + [False]), codes) & model_seen
        sibling = by_code(np.array([f"{design_of(p.rpartition('/')[0])}/{p.rpartition('/')[2]}" in designs
                                    for p in pairs] + [False]), codes)
        return np.where(seen, SEEN, np.where(sibling, SIBLING, UNSEEN)).astype(object)

    def kind_of(self, pair: str, situation: str) -> str:
        """The model of a "<device>/<dtype>" pair in ``situation``."""
        dtype = pair.rpartition("/")[2]
        if situation == SEEN:
            return self.seen.get(pair, self.seen_default)
        if situation == SIBLING:
            return self.sibling.get(dtype, self.sibling_default or self.unseen_default)
        return self.unseen.get(dtype, self.unseen_default)

    def kinds_for(self, hardware: Any, dtype: Any, situations: np.ndarray) -> np.ndarray:
        """The model of each row, given each row's situation (``situations``); decided once per distinct (device,
        dtype, situation) (an emulated step's million kernels have a handful)."""
        pairs, codes = _pairs(hardware, dtype)
        where = pd.Index(SITUATIONS).get_indexer(np.asarray(situations, dtype=object))
        distinct, inverse = np.unique(codes * len(SITUATIONS) + where, return_inverse=True)
        table = [self.kind_of(pairs[v // len(SITUATIONS)], SITUATIONS[v % len(SITUATIONS)]) for v in distinct]
        return np.array(table, dtype=object)[inverse.reshape(-1)] if len(table) else np.empty(0, dtype=object)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "FamilyRoutes":
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in
                                                 ("seen_default", "unseen_default")):
            raise InputError(f"{source}: expected an object with 'seen_default' and 'unseen_default' model names")
        for name in ("seen", "unseen", "sibling"):
            value = data.get(name, {})
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise InputError(f"{source}: field '{name}': expected an object of key -> model name")
        for name in ("pairs", "designs"):
            if not isinstance(data.get(name, []), list):
                raise InputError(f"{source}: field '{name}': expected a list of '<device or design>/<dtype>'")
        return cls(data["seen_default"], data["unseen_default"], dict(data.get("seen", {})),
                   dict(data.get("unseen", {})), [str(p) for p in data.get("pairs", [])],
                   bool(data.get("device_only", False)), dict(data.get("sibling", {})),
                   data.get("sibling_default"), [str(d) for d in data.get("designs", [])])


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


def pooled_options(device: pd.DataFrame, cells: list[tuple[str, str | None]]) -> tuple[dict[str, list[float]], int]:
    """(model -> per-seed mean APE pooled over the held-out rows of ``cells`` ((held-out device, dtype or None for
    all its rows) of the device split's figures), rows): each cell's figure weighted by its rows, which is the
    pooled mean APE of every row in them."""
    blocks = dict(tuple(device.groupby("held_out", sort=True)))
    parts = [_exactly(blocks[held_out], dtype) for held_out, dtype in cells if held_out in blocks]
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


def situation_of(device: str, dtype: str, pairs: list[str], device_only: bool = False) -> str:
    """A held-out device's situation at ``dtype`` on the device split, whose training rows are ``pairs`` (every
    "<device>/<dtype>" of the family's data) less the device's own: sibling where another device of its SM design
    has rows of that dtype (``device_only``: where another device has its catalog links, any dtype)."""
    others = sorted({p.rpartition("/")[0] for p in pairs} - {device})
    if device_only:
        from stepcast.estimator.nccl import same_links_as

        return SIBLING if same_links_as(device, others) else UNSEEN
    design = design_of(device)
    return SIBLING if design and any(design_of(p.rpartition("/")[0]) == design and p.rpartition("/")[2] == dtype
                                     and p.rpartition("/")[0] != device for p in pairs) else UNSEEN


def stable_choice(device: pd.DataFrame, cells: list[tuple[str, str | None]], incumbent: str | None
                  ) -> tuple[dict[str, list[float]], int, str | None]:
    """(options pooled over ``cells``, their rows, the choice): the pooled choice (``choose``), kept only where it
    rests on two or more held-out devices and still beats the incumbent with any one of them left out, else the
    incumbent. A choice that one device decides says nothing about the next device (the norms' A100 held out: of the
    other two devices the roofline won on one by more than xgboost won on the other)."""
    options, rows = pooled_options(device, cells)
    options = {m: v for m, v in options.items() if m not in UNBOUNDED}
    if not options:
        return options, rows, None
    chosen = choose(options, incumbent)
    if chosen == incumbent or incumbent not in options:
        return options, rows, chosen
    devices = sorted({h for h, _ in cells})
    if len(devices) < 2:
        return options, rows, incumbent
    for left_out in devices:
        rest, _ = pooled_options(device, [c for c in cells if c[0] != left_out])
        if np.mean(rest[chosen]) >= np.mean(rest[incumbent]):
            return options, rows, incumbent
    return options, rows, chosen


def route_choices(figures: pd.DataFrame, incumbents: dict[str, dict[str, str]], gpus: set[str],
                  pairs: dict[str, list[str]], exclude: str | None = None) -> list[dict[str, Any]]:
    """Every choice behind the routes, with its evidence: ``family``, ``side`` (a situation), ``key`` (a dtype, a
    "<device>/<dtype>" on the seen side, or "*" for the side's default), ``rows`` behind it, ``options`` (model ->
    per-seed mean APE) and ``chosen`` (None where too few rows: the side's default applies). ``figures``: the
    results' rows; ``incumbents``: family -> situation -> what the shipped bundle runs there (``incumbents_from``);
    ``gpus``: the held-out devices that are GPUs, whose device folds the sibling and unseen choices pool, each
    (device, dtype) under its situation (``situation_of`` with the family's ``pairs``), with ``stable_choice``;
    ``exclude``: a device whose figures those choices leave out (the nested choice for that device)."""
    from stepcast.estimator.unseen_results import POOLED

    out = []
    for family in sorted(set(figures["family"])):
        mine = figures[figures["family"] == family]
        device = mine[(mine["split"] == "device") & mine["held_out"].isin(gpus - {exclude})]
        shapes = mine[mine["split"] == "shapes"]
        if not len(device) or not len(shapes) or family not in incumbents:
            continue
        incumbent = incumbents[family]

        def add(side: str, key: str, options: dict[str, list[float]], rows: int, chosen: str | None,
                default: bool = False) -> None:
            enough = bool(options) and (default or rows >= MIN_ROWS)
            out.append({"family": family, "side": side, "key": key, "rows": rows, "options": options,
                        "chosen": chosen if enough else None})

        cells = [(held_out, dtype) for held_out, block in device.groupby("held_out", sort=True)
                 for dtype in sorted({d for ds in block["dtypes"] for d in ds})]
        where = {cell: situation_of(*cell, pairs.get(family, []), family in DEVICE_ONLY) for cell in cells}
        add(UNSEEN, "*", *stable_choice(device, sorted({(h, None) for h, _ in cells}), incumbent[UNSEEN]),
            default=True)
        siblings = [c for c in cells if where[c] == SIBLING]
        if siblings:
            add(SIBLING, "*", *stable_choice(device, siblings, incumbent[SIBLING]))
        for side in (UNSEEN, SIBLING):
            for dtype in sorted({d for _, d in cells}):
                chosen = [c for c in cells if c[1] == dtype and where[c] == side]
                if chosen:
                    add(side, dtype, *stable_choice(device, chosen, incumbent[side]))
        pooled = _exactly(shapes[shapes["held_out"] == POOLED], None)
        options = _options(pooled)
        add(SEEN, "*", options, int(pooled["n"].max()) if len(pooled) else 0,
            choose(options, incumbent[SEEN]) if options else None, default=True)
        for held_out, block in shapes[shapes["held_out"] != POOLED].groupby("held_out", sort=True):
            for dtype in sorted({d for ds in block["dtypes"] for d in ds}):
                options = _options(_exactly(block, dtype))
                rows = int(_exactly(block, dtype)["n"].min()) if options else 0
                add(SEEN, f"{held_out}/{dtype}", options, rows, choose(options, incumbent[SEEN]) if options else None)
    return out


def choose_routes(figures: pd.DataFrame, incumbents: dict[str, dict[str, str]], gpus: set[str],
                  pairs: dict[str, list[str]], exclude: str | None = None) -> dict[str, FamilyRoutes]:
    """Routes for every family with device-split and shapes-split figures (``route_choices``' arguments); a
    family's ``pairs`` and ``designs`` are those of ``pairs`` (its data's "<device>/<dtype>")."""
    out = {}
    choices = route_choices(figures, incumbents, gpus, pairs, exclude)
    for family in dict.fromkeys(c["family"] for c in choices):
        mine = [c for c in choices if c["family"] == family]
        default = {c["side"]: c["chosen"] for c in mine if c["key"] == "*"}
        if default.get(SEEN) is None or default.get(UNSEEN) is None:
            continue
        chosen = {(c["side"], c["key"]): c["chosen"] for c in mine if c["key"] != "*" and c["chosen"]}
        family_pairs = sorted(pairs.get(family, []))
        out[family] = FamilyRoutes(
            default[SEEN], default[UNSEEN], {k: v for (side, k), v in chosen.items() if side == SEEN},
            {k: v for (side, k), v in chosen.items() if side == UNSEEN}, family_pairs, family in DEVICE_ONLY,
            {k: v for (side, k), v in chosen.items() if side == SIBLING}, default.get(SIBLING),
            designs_of(family_pairs))
    return out


def pairs_of(doc: dict[str, Any]) -> dict[str, list[str]]:
    """family -> the "<device>/<dtype>" pairs of its data, as the results recorded them."""
    return {f: list(d.get("pairs", [])) for f, d in doc.get("data", {}).items()}


#: fallback rules under which the shipped bundle runs the roofline for a device it was not trained on
ROOFLINE_WHEN_UNSEEN = ("unseen_hardware", "out_of_range")


def incumbents_from(rules: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    """family -> situation -> what a bundle with these (kind, fallback rule) pairs runs there: its kind, or for a
    device it was not trained on the roofline where its rule sends such rows there (a ``DEVICE_ONLY`` family's
    model counts its siblings as seen: the rule keeps them on the model)."""
    out = {}
    for family, (kind, rule) in rules.items():
        unseen = ROOFLINE if rule in ROOFLINE_WHEN_UNSEEN else kind
        out[family] = {SEEN: kind, SIBLING: kind if family in DEVICE_ONLY else unseen, UNSEEN: unseen}
    return out


def incumbents_of(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``incumbents_from`` the shipped bundle's kinds and rules, as the results recorded them."""
    return incumbents_from({f: (str(r["kind"]), str(r["rule"]))
                            for f, r in doc.get("settings", {}).get("bundle_rules", {}).items()})


# -- what the routes change ----------------------------------------------------------------------------------------
def route_report(figures: pd.DataFrame, routes: dict[str, FamilyRoutes], nested: dict[str, Any],
                 pairs: dict[str, list[str]]) -> pd.DataFrame:
    """Per held-out device, family and dtype (device split): its situation there, the mean APE of what the shipped
    rule runs (``bundle``), the model a bundle routed on every figure would run (``route``) and the honest figure of
    routing: the ``routed`` candidate of the results, whose choice for each device was made without its figures
    (``nested`` names it)."""
    from stepcast.estimator.unseen_results import POOLED

    device = figures[(figures["split"] == "device") & (figures["held_out"] != POOLED)]
    rows = []
    for (family, held_out), block in device.groupby(["family", "held_out"], sort=True):
        if family not in routes or held_out not in nested.get(family, {}):
            continue
        for dtype in sorted({d for ds in block["dtypes"] for d in ds}):
            here = _exactly(block, dtype).set_index("model")
            figure = here["mean_ape"].to_dict()
            spread = here["seeds"].map(np.ptp).to_dict()
            situation = situation_of(held_out, dtype, pairs.get(family, []), routes[family].device_only)
            rows.append({"family": family, "device": held_out, "dtype": dtype, "situation": situation,
                         "n": int(here["n"].max()), "bundle": figure.get("bundle", np.nan),
                         "bundle_spread": spread.get("bundle", np.nan),
                         "route": routes[family].kind_of(f"{held_out}/{dtype}", situation),
                         "nested": nested[family][held_out].get(dtype, nested[family][held_out].get("*")),
                         "routed": figure.get("routed", np.nan), "routed_spread": spread.get("routed", np.nan)})
    return pd.DataFrame(rows)


def print_report(report: pd.DataFrame, routes: dict[str, FamilyRoutes]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table(title="Routes chosen by the unseen protocol (unseen and sibling: by dtype; seen: by device and "
                        "dtype)")
    for column in ("family", "unseen", "sibling", "seen", "seen (device/dtype) not default"):
        table.add_column(column)
    for family, r in routes.items():
        table.add_row(family, describe(r.unseen_default, r.unseen), describe(r.sibling_default, r.sibling),
                      r.seen_default, ", ".join(f"{d}: {k}" for d, k in r.seen.items() if k != r.seen_default) or "-")
    console.print(table)
    table = Table(title="Each device held out: mean APE % (range over seeds) of what the shipped rule runs (bundle) "
                        "and of the routed bundle, its choice made without that device (nested)")
    for column in ("family", "device", "dtype", "situation", "rows", "bundle", "route", "nested", "routed"):
        table.add_column(column, justify="right" if column in ("rows", "bundle", "routed") else "left")
    for r in report.itertuples(index=False):
        table.add_row(r.family, r.device, r.dtype, r.situation, f"{r.n:,}", f"{r.bundle:.1f} ({r.bundle_spread:.1f})",
                      r.route, str(r.nested), f"{r.routed:.1f} ({r.routed_spread:.1f})")
    console.print(table)


def describe(default: str | None, by_dtype: dict[str, str]) -> str:
    """"<default>; <dtype>: <model>, ..." of one situation's routes."""
    return "; ".join([default or "(the unseen default)"] + [", ".join(f"{d}: {k}" for d, k in by_dtype.items())]
                     if by_dtype else [default or "(the unseen default)"])


def routes_from_results(doc: dict[str, Any]) -> dict[str, FamilyRoutes]:
    """The routes a results document's figures choose."""
    from stepcast.estimator.unseen_results import frame

    figures = frame(doc)
    return choose_routes(figures, incumbents_of(doc), gpus_of(figures), pairs_of(doc))


def is_gpu(hardware: str) -> bool:
    """Whether a catalog id is a GPU (the device folds whose figures the routes pool)."""
    from stepcast.profiling.hardware import lookup

    return lookup(hardware).kind == "gpu"


def gpus_of(figures: pd.DataFrame) -> set[str]:
    """The held-out devices of the device split that are GPUs."""
    from stepcast.estimator.unseen_results import POOLED

    return {d for d in set(figures.loc[figures["split"] == "device", "held_out"]) if d != POOLED and is_gpu(d)}


@cli_main
def main(argv: list[str] | None = None) -> int:
    from stepcast.estimator import unseen_results

    parser = argparse.ArgumentParser(prog="python -m stepcast.estimator.routing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=unseen_results.RESULTS, help="the unseen protocol's results")
    args = parser.parse_args(argv)
    try:
        doc = unseen_results.read(args.results)
    except (FileNotFoundError, ValueError) as exc:  # the results file is the user's input here
        raise InputError(f"--results: {exc}") from None
    routes = routes_from_results(doc)
    print_report(route_report(unseen_results.frame(doc), routes, doc.get("routing", {}).get("nested", {}),
                              pairs_of(doc)), routes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
