"""How well are fused mixture-of-experts layers timed on a GPU never measured? aiconfigurator's MoE tables.

    python -m benchmarks.emulate.moe                        # every GPU held out in turn, 3 seeds
    python -m benchmarks.emulate.moe --gpus h100-sxm,b200 --seeds 0 --json out.json

Rows: ``estimator.importers.aiconfigurator_moe`` (one fused MoE layer's forward, bf16 and fp8, balanced and
power-law routings, every framework's kernel, median over its releases). Model: ``estimator.moe`` (the layer's
roofline on the catalog spec times a learned, non-negative correction).

- **held out**: each GPU's rows are left out wholly; the model is fitted on the other GPUs' rows and predicts its.
- **seen**: every GPU is seen, a fifth of the shapes is not (a layer at one token count, :data:`SHAPE`, with its
  routings and kernels: fixed set ``seed mod 5`` of ``estimator.importers.aiconfigurator.shape_set``, the same
  shapes on every GPU); fitted on the rest.
- **seen layer**: the same with whole layers held out (:data:`LAYER`: every token count of a layer shape together,
  the ``group`` column), a model the fit never saw at any batch.

Each (GPU, dtype) draws at most ``--rows`` rows per seed (the tables hold 1.7 M), for training and scoring alike.
The table gives mean APE per GPU and dtype, the mean over seeds with the range, the roofline alone on the held-out
GPU (``roofline``: the expected loads' work at peak, no correction), and the pooled figure over every scored row of
each split; and ``releases``, what the data itself allows: how far one framework release's time of a layer lies from
the other releases' median for the same kernel, shape and routing
(``estimator.importers.aiconfigurator_moe.release_spread``). The rows are those medians, so a model's error on them
is bounded below by a share of that disagreement, whatever the model. ``--splits seen --rows 200000 --trees 600
--depth 12 --learning-rate 0.1`` fits the seen split on every row with a larger correction (about 3 minutes a fit on
two idle cores).
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from stepcast.estimator.importers import aiconfigurator_moe
from stepcast.estimator.importers.aiconfigurator import DATA_DIR, GROUP_SETS, shape_set
from stepcast.estimator.metrics import ape
from stepcast.estimator.moe import MoEEstimator, layer_work
from stepcast.errors import InputError
from stepcast.json_files import read_json
from stepcast.profiling.atomic import write_bytes_atomic, write_json_atomic
from stepcast.profiling.paths import shared_data_root

#: rows per (GPU, dtype) drawn per seed: keeps one run of every split near ten minutes on two cores
ROWS = 4000
SEEDS = (0, 1, 2)
DTYPES = ("bf16", "fp8_e4m3")
#: a shape of the seen split: one layer at one token count (its routings and kernels held out with it)
SHAPE = ("tokens", "hidden", "inter", "topk", "experts", "tp", "ep")
#: a layer of the seen-layer split: all its token counts held out together
LAYER = aiconfigurator_moe.LAYER
SPLITS = ("held out", "seen", "seen layer")


def sample(rows: pd.DataFrame, per_cell: int, seed: int) -> pd.DataFrame:
    """At most ``per_cell`` rows of each (hardware, dtype), drawn with ``seed``."""
    shuffled = rows.sample(frac=1.0, random_state=seed)
    return shuffled.groupby(["hardware", "dtype"]).head(per_cell).reset_index(drop=True)


def held_out_split(rows: pd.DataFrame, gpu: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training rows, scored rows): the scored rows are every row of ``gpu``; no row of it is trained on."""
    mine = (rows["hardware"] == gpu).to_numpy()
    return rows[~mine], rows[mine]


def seen_split(rows: pd.DataFrame, shape_set: int, by: tuple[str, ...] = SHAPE) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training rows, scored rows): the scored rows are the shapes (columns ``by``) of fixed set ``shape_set`` among
    ``GROUP_SETS``, on every GPU at once (``estimator.importers.aiconfigurator.shape_set``)."""
    held = shape_set_of(rows, by) == shape_set
    return rows[~held], rows[held]


def shape_set_of(rows: pd.DataFrame, by: tuple[str, ...]) -> np.ndarray:
    return shape_set(*(rows[c].to_numpy() for c in by))


def scores(train: pd.DataFrame, test: pd.DataFrame, seed: int, **model: Any) -> pd.DataFrame:
    """Per scored row: hardware, dtype, the model's APE and the roofline's (``model``: MoEEstimator's options)."""
    fitted = MoEEstimator(seed=seed, **model).fit(train, train["runtime_us"].to_numpy())
    true = test["runtime_us"].to_numpy()
    return pd.DataFrame({"hardware": test["hardware"].to_numpy(), "dtype": test["dtype"].to_numpy(),
                         "ape": ape(fitted.predict(test), true),
                         "roofline_ape": ape(layer_work(test).expected_us, true)})


def run(rows: pd.DataFrame, gpus: list[str], seeds: tuple[int, ...], per_cell: int,
        console: Console, splits: tuple[str, ...] = SPLITS, **model: Any) -> pd.DataFrame:
    """Per (split, seed, GPU, dtype): mean APE of the model and of the roofline, and the rows scored."""
    out = []
    for seed in seeds:
        drawn = sample(rows, per_cell, seed)
        for gpu in gpus if "held out" in splits else []:
            console.print(f"seed {seed}: {gpu} held out")
            out.append(scores(*held_out_split(drawn, gpu), seed, **model).assign(split="held out", seed=seed))
        for split, by in (("seen", SHAPE), ("seen layer", LAYER)):
            if split not in splits:
                continue
            console.print(f"seed {seed}: {split}: set {seed % GROUP_SETS} of {', '.join(by)} held out on every GPU")
            seen = scores(*seen_split(drawn, seed % GROUP_SETS, by), seed, **model)
            out.append(seen[seen["hardware"].isin(gpus)].assign(split=split, seed=seed))
    every = pd.concat(out, ignore_index=True)
    per_gpu = summarise(every, ["split", "seed", "hardware", "dtype"]).assign(pooled=False)
    return pd.concat([per_gpu, summarise(every, ["split", "seed", "dtype"]).assign(hardware="pooled", pooled=True)],
                     ignore_index=True)


def summarise(every: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per ``keys``: the mean APE of the model and of the roofline over the scored rows, and their count (without
    ``hardware`` among the keys: pooled over every GPU)."""
    cells = every.groupby(keys)
    return cells.agg(mean_ape=("ape", "mean"), roofline_ape=("roofline_ape", "mean"),
                     rows=("ape", "size")).reset_index()


def _figure(values: pd.Series) -> str:
    if values.empty:
        return "-"
    if len(values) == 1:
        return f"{values.iat[0]:.1f}"
    return f"{values.mean():.1f} ({values.min():.1f}-{values.max():.1f})"


COLUMNS = ("GPU", "dtype", "held out", "roofline", "seen", "seen layer", "releases", "rows/seed")
GOAL = "goal: held out <= 15, seen <= 6"


def table_rows(cells: pd.DataFrame, spread: pd.DataFrame | None = None) -> list[list[str]]:
    """The table's rows (:data:`COLUMNS`), one per GPU and dtype, pooled last: the console table and the docs page
    both print these. ``spread``: the releases' disagreement per GPU and dtype (``release_spread``), if known."""
    releases = {} if spread is None or spread.empty else \
        {(r.hardware, r.dtype): r.mean_ape for r in spread.itertuples()}
    out = []
    for gpu in sorted(cells["hardware"].unique(), key=lambda h: (h == "pooled", h)):
        for dtype in DTYPES:
            cell = cells[(cells["hardware"] == gpu) & (cells["dtype"] == dtype)]
            if cell.empty:
                continue
            held = cell[cell["split"] == "held out"]
            out.append([gpu, dtype, _figure(held["mean_ape"]), _figure(held["roofline_ape"]),
                        _figure(cell.loc[cell["split"] == "seen", "mean_ape"]),
                        _figure(cell.loc[cell["split"] == "seen layer", "mean_ape"]),
                        f"{releases[gpu, dtype]:.1f}" if (gpu, dtype) in releases else "-",
                        f"{int(cell['rows'].max()):,}"])
    return out


def print_table(cells: pd.DataFrame, console: Console, spread: pd.DataFrame | None = None) -> None:
    seeds = cells["seed"].nunique()
    table = Table(title=f"Fused-MoE layer forward, aiconfigurator tables: mean APE % (mean over {seeds} seeds, "
                        f"range); {GOAL}")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("GPU", "dtype") else "right")
    for row in table_rows(cells, spread):
        table.add_row(*row)
    console.print(table)


#: the correction's options: estimator argument -> (command-line flag, the command's default, what it is)
MODEL_OPTIONS = {"n_estimators": ("--trees", 200, "trees of the correction"),
                 "max_depth": ("--depth", 8, "their depth"),
                 "learning_rate": ("--learning-rate", 0.15, "their learning rate")}
PAGE_TITLE = "# Fused-MoE layer accuracy"
WIDTH = 120  # the docs' prose width (tests/test_docs.py)


def render_page(results: list[tuple[Path, dict[str, Any]]]) -> str:
    """The docs page of one or more results files (``--json``'s): per file, the command that wrote it and its
    table. Never edited by hand: ``--page PAGE --from FILE [FILE ...]`` rewrites it."""
    sources = " ".join(f"docs/results/{path.name}" for path, _ in results)
    lines = [PAGE_TITLE, "",
             f"Generated by `python -m benchmarks.emulate.moe --page docs/moe_accuracy.md --from {sources}` from the "
             "results the commands below wrote; do not edit by hand. One fused MoE layer's forward (routing, the "
             "experts' grouped GEMMs, combine) on one GPU, aiconfigurator's tables (`estimator/moe.py`: the layer's "
             f"roofline on the catalog spec times a learned correction). Mean APE %, the mean over seeds with the "
             f"range in brackets; {GOAL}. Splits: `held out`, every row of the GPU left out of training; `seen`, "
             "a fifth of the shapes (a layer at one token count) left out on every GPU; `seen layer`, whole layer "
             "shapes left out at every token count; `roofline`, the layer's roofline alone on the held-out GPU; "
             "`releases`, how far one framework release's time of a layer lies from the median of the other releases "
             "that timed the same kernel, shape and routing (mean APE over every such timing: the data's own "
             "disagreement about the medians the model is scored on)."]
    for path, doc in results:
        model = doc.get("model", {})
        options = [f"--splits {','.join(doc['splits'])}"] if tuple(doc.get("splits", SPLITS)) != SPLITS else []
        options += [f"--rows {doc['rows_per_cell']}"] if doc.get("rows_per_cell", ROWS) != ROWS else []
        options += [f"--seeds {','.join(map(str, doc['seeds']))}"] if tuple(doc.get("seeds", SEEDS)) != SEEDS else []
        options += [f"{flag} {model[key]}" for key, (flag, default, _) in MODEL_OPTIONS.items()
                    if key in model and model[key] != default]
        command = " ".join(["python -m benchmarks.emulate.moe", *options, f"--json docs/results/{path.name}"])
        cells = pd.DataFrame(doc["cells"])
        spread = pd.DataFrame(doc["release_spread"]) if doc.get("release_spread") else None
        lines += ["", f"## `{path.name}`", "", f"`{command}`: {doc['rows_per_cell']:,} rows per GPU and dtype, "
                  f"{len(doc['seeds'])} seed{'s' if len(doc['seeds']) > 1 else ''}.", "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in table_rows(cells, spread)]
    return "\n".join(line if line.startswith(("|", "#")) else textwrap.fill(line, WIDTH, break_on_hyphens=False)
                     for line in lines) + "\n"


def read_results(path: Path) -> dict[str, Any]:
    """A ``--json`` results file, or a one-line error naming it."""
    return read_json(path, "a file written by --json", ("cells", "rows_per_cell", "seeds", "splits"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.moe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default=None, help="comma-separated catalog ids to hold out (default: all)")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows per (GPU, dtype) and seed (default {ROWS})")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    parser.add_argument("--splits", default=",".join(SPLITS),
                        help=f"comma-separated splits to run (default: {','.join(SPLITS)})")
    for key, (flag, default, what) in MODEL_OPTIONS.items():
        parser.add_argument(flag, dest=key, metavar=flag.lstrip("-").upper().replace("-", "_"), type=type(default),
                            default=default, help=f"{what} (default {default})")
    parser.add_argument("--json", type=Path, default=None, help="write every cell here (JSON)")
    parser.add_argument("--page", type=Path, default=None,
                        help="write the docs page of the results files --from names (runs nothing)")
    parser.add_argument("--from", dest="sources", type=Path, nargs="+", default=None,
                        help="results files (--json's) the --page is made from")
    args = parser.parse_args(argv)
    if args.page or args.sources:
        if not (args.page and args.sources):
            print("stepcast: --page and --from go together", file=sys.stderr)
            return 2
        try:
            page = render_page([(path, read_results(path)) for path in args.sources])
        except InputError as exc:
            print(f"stepcast: {exc}", file=sys.stderr)
            return 2
        write_bytes_atomic(args.page, page.encode())
        return 0
    root = args.root or shared_data_root()
    measured = aiconfigurator_moe.measurements(root)   # read once: the rows and the releases' spread
    rows = aiconfigurator_moe.layers(measured)
    if rows.empty:
        print(f"stepcast: no fused-MoE tables under {root / DATA_DIR} (set STEPCAST_SHARED_DATA)",
              file=sys.stderr)
        return 2
    known = sorted(rows["hardware"].unique())
    gpus = [g.strip() for g in args.gpus.split(",")] if args.gpus else known
    unknown = [g for g in gpus if g not in known]
    if unknown:
        print(f"stepcast: --gpus: no fused-MoE rows for '{unknown[0]}' (expected some of {', '.join(known)})",
              file=sys.stderr)
        return 2
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        print(f"stepcast: --seeds: expected comma-separated integers, got '{args.seeds}'", file=sys.stderr)
        return 2
    splits = tuple(s.strip() for s in args.splits.split(","))
    if not splits or any(s not in SPLITS for s in splits):
        print(f"stepcast: --splits: expected some of {', '.join(SPLITS)}, got '{args.splits}'", file=sys.stderr)
        return 2
    console = Console(width=140)
    model = {key: getattr(args, key) for key in MODEL_OPTIONS}
    cells = run(rows, gpus, seeds, args.rows, console, splits, **model)
    spread = aiconfigurator_moe.release_spread(measured)
    print_table(cells, console, spread)
    if args.json:
        doc: dict[str, Any] = {"rows_per_cell": args.rows, "seeds": list(seeds), "splits": list(splits), "model": model,
                               "cells": cells.to_dict("records"), "release_spread": spread.to_dict("records")}
        write_json_atomic(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
