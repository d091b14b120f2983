"""The accuracy page (``docs/accuracy.md``), generated from the unseen protocol's results file.

    python -m benchmarks.estimator.accuracy_table [--results docs/results/unseen.json] [--out docs/accuracy.md]
                                                  [--check]

``--check`` writes nothing and exits 1 when the page differs from what the results give (a stale page).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.estimator.unseen import POOLED, ROUTED
from stepcast.estimator.unseen_results import figure, spread

PAGE = Path("docs/accuracy.md")
#: column order of the candidates (others follow in the order the results give them)
ORDER = ("xgboost", "mlp", "tiled", "nccl", "roofline", "bundle", ROUTED)
#: the goals of issue 33 on the device split: (what, family, dtype, source, held-out devices, goal per device,
#: goal pooled over them)
GOALS = (
    ("NeuSight fp32 GEMMs", "gemm", "fp32", "neusight", ("a100-pcie-40gb", "p100", "p4", "t4", "v100-pcie-32gb"),
     18.0, 12.0),
    ("aiconfigurator bf16 GEMMs", "gemm", "bf16", "aiconfigurator", ("a100-sxm-80gb", "b200", "h100-sxm", "h200"),
     10.0, None),
)
LEGEND = {
    "bundle": "what the shipped bundle's rule runs today (its learned model, or the roofline where the rule sends "
              "a row: an unseen device for families with rule `unseen_hardware`, a device outside the model's "
              "spec range)",
    ROUTED: "the routed bundle (`estimator.routing`): on the device split each held-out device's routes were "
            "chosen without its own figures; on the within-device split the routes chosen on every figure",
}


def cell(row: pd.Series | None) -> str:
    if row is None:
        return "-"
    return f"{row['mean_ape']:.1f} ({spread(row['seeds']):.1f})"


def models_of(figures: pd.DataFrame) -> list[str]:
    present = list(dict.fromkeys(figures["model"]))
    return [m for m in ORDER if m in present] + [m for m in present if m not in ORDER]


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(r) + " |" for r in rows], ""]


def breakdown_rows(figures: pd.DataFrame, split: str, held_out: str, family: str, models: list[str],
                   by_source: bool = False) -> list[tuple[str, str, list[str]]]:
    """(dtype, source, cells) of one held-out block: all rows, then per dtype (and per dtype and source)."""
    block = figures[(figures["split"] == split) & (figures["held_out"] == held_out) & (figures["family"] == family)]
    dtypes = sorted({d for ds in block["dtypes"] for d in ds})
    wanted: list[tuple[str | None, str | None]] = [(None, None)]
    wanted += [(d, None) for d in dtypes] if len(dtypes) > 1 else []
    if by_source:
        for d in dtypes:
            sources = sorted({s for ss in block.loc[block["dtypes"].map(lambda x: d in x), "sources"] for s in ss})
            wanted += [(d, s) for s in sources] if len(sources) > 1 else []
    out = []
    for d, s in wanted:
        found = {m: figure(figures, split, held_out, family, m, d, s) for m in models}
        n = next((int(f["n"]) for f in found.values() if f is not None), 0)
        if n:
            out.append((d or "all", s or "all", [f"{n:,}", *[cell(found[m]) for m in models]]))
    return out


def goal_section(figures: pd.DataFrame, models: list[str]) -> list[str]:
    lines = ["## Goals of issue 33 (device split)", "",
             "Each GPU held out whole; its rows of the named source and dtype. Goal: at most the figure given, on the "
             "unseen protocol.", ""]
    rows = []
    for what, family, dtype, source, devices, each, pooled in GOALS:
        goals = [(d, each, [figure(figures, "device", d, family, m, dtype, source) for m in models]) for d in devices]
        if pooled is not None:
            goals.append((POOLED, pooled, [_pooled_over(figures, devices, family, m, dtype, source) for m in models]))
        for held_out, goal, found in goals:
            n = next((int(f["n"]) for f in found if f is not None), 0)
            if n:
                rows.append([what, held_out, f"<= {goal:g}", f"{n:,}", *[cell(f) for f in found]])
    return lines + table(["figure", "held out", "goal", "rows", *models], rows) if rows else []


def _pooled_over(figures: pd.DataFrame, devices: tuple[str, ...], family: str, model: str, dtype: str,
                 source: str) -> pd.Series | None:
    """The figure pooled over ``devices``' rows of ``dtype`` and ``source``: each device's per-seed figures weighted
    by its rows (the pooled row of the results also holds other GPUs' rows of that dtype and source, if any)."""
    found = [figure(figures, "device", d, family, model, dtype, source) for d in devices]
    found = [f for f in found if f is not None]
    if not found:
        return None
    n = np.array([f["n"] for f in found], dtype=float)
    seeds = list(np.average(np.array([list(f["seeds"]) for f in found], dtype=float), axis=0, weights=n))
    return pd.Series({"n": int(n.sum()), "mean_ape": float(np.mean(seeds)), "seeds": seeds})


def routing_section(doc: dict[str, Any], figures: pd.DataFrame) -> list[str]:
    from stepcast.estimator.routing import describe, pairs_of, route_report, routes_from_results

    routes = routes_from_results(doc)
    if not routes:
        return []
    lines = ["## Routing (`estimator.routing`)", "",
             "Which candidate a routed bundle runs. A (device, dtype) with training rows (seen): the one best on the "
             "within-device split for that device and dtype. Without: the one best on the device split pooled over "
             "the held-out GPUs' rows of that dtype in the same situation, **sibling** (another device of its SM "
             "design, the same compute capability, has rows of that dtype) or **unseen** (none has), among the bounded "
             "models (not the MLP). A challenger replaces the shipped kind only where it is better by more than the "
             "larger range over seeds.", ""]
    rows = [[f, describe(r.unseen_default, r.unseen), describe(r.sibling_default, r.sibling), r.seen_default,
             ", ".join(f"{p}: {k}" for p, k in r.seen.items() if k != r.seen_default) or "-"]
            for f, r in routes.items()]
    lines += table(["family", "unseen", "sibling", "seen", "seen, where not the default"], rows)
    report = route_report(figures, routes, doc.get("routing", {}).get("nested", {}), pairs_of(doc))
    if len(report):
        lines += ["What it changes on each held-out device: mean APE % (range over seeds) of the shipped rule "
                  "(`bundle`) and of the routed bundle whose choice for that device was made without it "
                  "(`nested` names it; `route`: the choice made on every device, which a bundle ships).", ""]
        lines += table(["family", "device", "dtype", "situation", "rows", "bundle", "route", "nested", "routed"], [
            [r.family, r.device, r.dtype, r.situation, f"{r.n:,}", f"{r.bundle:.1f} ({r.bundle_spread:.1f})",
             r.route, str(r.nested), f"{r.routed:.1f} ({r.routed_spread:.1f})"]
            for r in report.itertuples(index=False)])
    return lines


def split_section(figures: pd.DataFrame, split: str, title: str, text: str, by_source: bool = False) -> list[str]:
    mine = figures[figures["split"] == split]
    if not len(mine):
        return []
    lines = [f"## {title}", "", text, ""]
    for family in sorted(set(mine["family"])):
        block = mine[mine["family"] == family]
        models = models_of(block)
        rows = []
        names = sorted(set(block["held_out"]) - {POOLED}) + [POOLED]
        for name in names:
            for d, s, cells in breakdown_rows(figures, split, name, family, models, by_source):
                rows.append([name, d, s, *cells] if by_source else [name, d, *cells])
        lines += [f"### {family}", ""] + table(["held out", "dtype", *(["source"] if by_source else []), "rows",
                                                *models], rows)
    return lines


def headline(figures: pd.DataFrame) -> list[str]:
    pooled = figures[(figures["split"] == "device") & (figures["held_out"] == POOLED)]
    if not len(pooled):
        return []
    models = models_of(pooled)
    rows = []
    for family in sorted(set(pooled["family"])):
        for d, _, cells in breakdown_rows(figures, "device", POOLED, family, models):
            rows.append([family, d, *cells])
    return ["## Headline: each device held out whole, pooled over the GPUs", ""] + \
        table(["family", "dtype", "rows", *models], rows)


def render(doc: dict[str, Any]) -> str:
    from stepcast.estimator.unseen_results import frame

    figures = frame(doc)
    settings = doc.get("settings", {})
    machine = doc.get("machine", {})
    libraries = ", ".join(f"{k} {v}" for k, v in doc.get("libraries", {}).items())
    models = models_of(figures[figures["split"] == "device"]) if len(figures) else []
    lines = [
        "# Accuracy on devices, models and sources the estimators never saw", "",
        "Generated by `python -m benchmarks.estimator.accuracy_table` from `docs/results/unseen.json`, which "
        "`python -m benchmarks.estimator.accuracy --protocol unseen` writes; do not edit by hand.", "",
        f"Run at commit `{str(doc.get('commit'))[:12]}`{' (with uncommitted changes)' if doc.get('dirty') else ''}, "
        f"shipped bundle version {doc.get('bundle', {}).get('version')}, on {machine.get('cpu')} "
        f"({machine.get('cores')} cores); {libraries}. {settings.get('seeds')} seeds, at most "
        f"{settings.get('max_train_rows'):,} training rows per fit; {doc.get('seconds', 0) / 60:.0f} min "
        f"({doc.get('fits', {}).get('cached', 0):,} of {doc.get('fits', {}).get('total', 0):,} fits from the cache)."
        if settings.get("max_train_rows") else "", "",
        "Every figure is the mean absolute percentage error (mean APE, %) of the held-out rows, the mean over the "
        "seeds (each seed draws the training sample and seeds the model), with the range over the seeds in "
        "brackets: a difference inside it is not a difference. Splits: **device**: every row of one device held out "
        "(all sources and dtypes), trained on the other devices; **model**: one Vidur model held out on every "
        "device, training rows of its shapes and weights dropped; **source**: one source held out; "
        "**within-device**: a fifth of the shapes held out on every device (a device the bundle has data of). See "
        "`benchmarks/estimator/unseen.py`.", "",
        *[f"- `{m}`: {text}" for m, text in LEGEND.items() if m in models], "",
        *goal_section(figures, models), *headline(figures), *routing_section(doc, figures),
        *split_section(figures, "device", "Each device held out", "Per held-out device (a CPU is listed but not "
                       "pooled), by dtype and, where a dtype has several, by source.", by_source=True),
        *split_section(figures, "model", "Each Vidur model held out", "Its rows on every device held out; the "
                       "training rows lose its shapes (and for GEMMs its weights' GEMMs in any source)."),
        *split_section(figures, "source", "Each source held out", "Trained on the other sources only."),
        *split_section(figures, "shapes", "Within-device: a fifth of the shapes held out", "Per device; what a "
                       "device with training rows gets (each seed holds out another fifth)."),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def write(path: Path, doc: dict[str, Any]) -> None:
    from stepcast.profiling.atomic import write_bytes_atomic

    write_bytes_atomic(Path(path), render(doc).encode())


def main(argv: list[str] | None = None) -> int:
    from stepcast.estimator import unseen_results

    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimator.accuracy_table",

                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=unseen_results.RESULTS, help="the unseen protocol's results")
    parser.add_argument("--out", type=Path, default=unseen_results.REPO_ROOT / PAGE, help=f"the page [{PAGE}]")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page is stale")
    args = parser.parse_args(argv)
    try:
        doc = unseen_results.read(args.results)
    except (FileNotFoundError, ValueError) as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != render(doc):
            print(f"stepcast: {args.out} is stale: python -m benchmarks.estimator.accuracy_table", file=sys.stderr)
            return 1
        return 0
    write(args.out, doc)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
