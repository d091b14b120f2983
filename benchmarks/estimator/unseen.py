"""The unseen protocol: each device, Vidur model and source held out whole and predicted by models that never saw it.

    python -m benchmarks.estimator.accuracy --protocol unseen [--seeds 3] [--max-train-rows 20000]
        [--families gemm,norm] [--splits device,model,source,shapes] [--quick]
        [--out docs/results/unseen.json] [--compare] [--markdown]

Splits, per family (one fold per held-out thing; a fold is skipped where nothing is left to train on):

- ``device``: every row of one device (all sources, dtypes) held out, trained on every other device's rows. The
  question a user of a GPU nobody profiled asks. Nothing else the candidates read is fitted: each model fits its
  own per-device pieces (tiled's energies and floors, the NCCL model's figures) on the fold's training rows, the
  roofline's shares are fixed constants and the catalog holds spec sheets only. Pooled figures are over the GPUs
  (a CPU held out is listed but not pooled: no GPU-trained model speaks for it, and the router sends it to the
  roofline by its spec);
- ``model``: one Vidur model's rows on every device held out; training rows of the same shapes (key columns but
  the device), and for GEMMs of the same weights (``benchmarks.estimator.accuracy.without_weights_of``: aiconfigurator
  and the profiler measure popular models' layers too), are dropped;
- ``source``: one source's rows held out, trained on the other sources (a source that alone measured a device
  makes that device unseen too);
- ``shapes`` (within-device): a random fifth of the distinct shapes (a new fifth per seed) held out across every
  device, trained on the rest: what a device the bundle was trained on gets; the routing's evidence for devices
  with data (``estimator.routing``). Its figures are per device.

Every figure is repeated over ``--seeds`` seeds: the seed draws the training sample (``training_sample``: each
(device, source, dtype) keeps a floor of rows, the rest of ``--max-train-rows`` is drawn at random) and seeds the
model (XGBoost, the networks); the results give each figure's mean and its per-seed values (the spread).

The candidates are the shipped configs of ``conf/estimator/model/`` (xgboost, mlp, roofline; tiled for GEMMs, the
NCCL model for collectives), plus ``bundle``: the shipped default bundle's rule applied to the same fold's learned
model (its fallback rule sends unseen or out-of-spec rows to the roofline), i.e. what users get today.

Each fold's predictions are cached under ``<cache>/unseen/`` keyed by the candidate's code (``code_digest``: the
modules its estimator imports), the library versions, the fold's training and test rows and the model's parameters
and seed, so an interrupted run resumes and a rerun after a change to one model refits that model's folds only.
GEMM rows are labelled from the kernel-label cache only (``estimator.kernel_labels.cache_only``): fill it first
(``python -m stepcast.estimator.kernel_labels``) for tiled's labels.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stepcast.estimator.models import ModelSpec, shipped_config
from stepcast.estimator.routing import is_gpu
from stepcast.estimator.splits import Fold, shape_hash
from stepcast.estimator.unseen_results import POOLED

log = logging.getLogger(__name__)

SPLITS = ("device", "model", "source", "shapes")
#: held-out groups with fewer test rows are not scored
MIN_TEST_ROWS = 20
#: families with fewer rows are not scored (the optimizer's 26 profiler rows: one device, nothing to hold out)
MIN_FAMILY_ROWS = 100
#: the share of distinct shapes the ``shapes`` split holds out
SHAPE_SHARE = 0.2
#: at most this share of the training budget goes to the per-group floors of ``training_sample``
FLOOR_SHARE = 0.5
FLOOR_ROWS = 500
#: the learned kinds each family's candidates include besides ``roofline`` (GEMMs: the NeuSight-structured model;
#: collectives: the NCCL-structured one)
FAMILY_KINDS: dict[str, tuple[str, ...]] = {"gemm": ("xgboost", "mlp", "tiled"),
                                            "collective": ("nccl", "xgboost", "mlp")}
DEFAULT_KINDS = ("xgboost", "mlp")
#: --quick: the candidates cut down to seconds (a smoke test of the protocol, not figures to compare)
QUICK_PARAMS: dict[str, dict[str, Any]] = {"xgboost": {"n_estimators": 8}, "mlp": {"epochs": 2},
                                           "tiled": {"epochs": 2, "min_steps": 50, "networks": 1},
                                           "nccl": {"residual": False}}
#: the derived candidates (``benchmarks.estimator.unseen_derived``): the shipped bundle's rule on the fold's learned
#: model, and the routed bundle; the splits whose predictions the routed one needs (unseen routes: device; seen: shapes)
BUNDLE = "bundle"
ROUTED = "routed"
ROUTED_SPLITS = ("device", "shapes")


def candidates(family: str, quick: bool = False) -> dict[str, ModelSpec]:
    """label -> spec of every candidate of ``family`` (``FAMILY_KINDS``, then the roofline)."""
    out = {}
    for kind in FAMILY_KINDS.get(family, DEFAULT_KINDS) + ("roofline",):
        spec = shipped_config(kind)
        if quick and kind in QUICK_PARAMS:
            spec = ModelSpec(kind, spec.params | QUICK_PARAMS[kind], spec.target)
        out[kind] = spec
    return out


# -- folds ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Holdout:
    """One fold of one family: ``train`` and ``test`` are positions in the family's frame."""
    split: str
    name: str
    train: np.ndarray
    test: np.ndarray


def text_of(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.full(len(frame), "", dtype=object)
    return frame[column].astype(object).where(frame[column].notna(), "").astype(str).to_numpy()


def device_holdouts(frame: pd.DataFrame) -> Iterator[Holdout]:
    hardware = text_of(frame, "hardware")
    for device in sorted(set(hardware)):
        test = hardware == device
        yield Holdout("device", device, np.flatnonzero(~test), np.flatnonzero(test))


def model_holdouts(frame: pd.DataFrame) -> Iterator[Holdout]:
    """Each Vidur model's rows; the training rows lose every shape the held-out rows have (and, for GEMMs, every
    GEMM of the held-out model's weights)."""
    from benchmarks.estimator.accuracy import without_weights_of

    model = np.where(text_of(frame, "source") == "vidur", text_of(frame, "model"), "")
    if not (model != "").any():
        return
    shapes = shape_hash(frame)
    family = str(frame["family"].iat[0])
    for name in sorted(set(model) - {""}):
        test = model == name
        train = ~test & ~np.isin(shapes, shapes[test])
        if family == "gemm":
            kept = without_weights_of(frame[train], frame[test]).index
            train = np.isin(np.arange(len(frame)), kept)
        yield Holdout("model", name, np.flatnonzero(train), np.flatnonzero(test))


def source_holdouts(frame: pd.DataFrame) -> Iterator[Holdout]:
    source = text_of(frame, "source")
    for name in sorted(set(source)):
        test = source == name
        yield Holdout("source", name, np.flatnonzero(~test), np.flatnonzero(test))


def shape_holdout(frame: pd.DataFrame, seed: int) -> Holdout:
    """A random ``SHAPE_SHARE`` of the distinct shapes (a new draw per seed), on every device that measured them."""
    shapes = shape_hash(frame)
    distinct = pd.unique(shapes)
    chosen = distinct[np.random.default_rng(seed).random(len(distinct)) < SHAPE_SHARE]
    test = np.isin(shapes, chosen)
    return Holdout("shapes", "shapes", np.flatnonzero(~test), np.flatnonzero(test))


def holdouts(split: str, frame: pd.DataFrame, seed: int = 0) -> list[Holdout]:
    """The folds of ``split`` over one family's frame that have test rows to score and training rows to fit."""
    if split == "device":
        found = device_holdouts(frame)
    elif split == "model":
        found = model_holdouts(frame)
    elif split == "source":
        found = source_holdouts(frame)
    elif split == "shapes":
        found = iter([shape_holdout(frame, seed)])
    else:
        raise ValueError(f"unknown split '{split}': expected one of {', '.join(SPLITS)}")
    return [h for h in found if len(h.test) >= MIN_TEST_ROWS and len(h.train)]


def sample_groups(frame: pd.DataFrame) -> np.ndarray:
    """Each row's (device, source, dtype) group as an integer: what ``training_sample`` keeps a floor of."""
    keys = pd.Series(text_of(frame, "hardware")) + "/" + text_of(frame, "source") + "/" + text_of(frame, "dtype")
    return pd.factorize(keys)[0]


def training_sample(groups: np.ndarray, positions: np.ndarray, max_rows: int | None, seed: int) -> np.ndarray:
    """At most ``max_rows`` of ``positions``: every group (``sample_groups``: device, source, dtype) first keeps up
    to a floor of rows (``FLOOR_ROWS``, less where the groups' floors would take more than ``FLOOR_SHARE`` of the
    budget), the rest is drawn at random from the remaining rows. A plain random draw would give a 20-row source one
    row or none, and a device measured by it would vanish from the training rows."""
    positions = np.asarray(positions)
    if max_rows is None or len(positions) <= max_rows:
        return positions
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(positions)
    keys = pd.Series(np.asarray(groups)[shuffled])
    floor = max(1, min(FLOOR_ROWS, int(max_rows * FLOOR_SHARE) // max(keys.nunique(), 1)))
    first = (keys.groupby(keys, sort=False).cumcount() < floor).to_numpy()
    rest = shuffled[~first][:max(0, max_rows - int(first.sum()))]
    return np.sort(np.concatenate([shuffled[first][:max_rows], rest]))


# -- running folds -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    family: str
    holdout: Holdout
    label: str
    spec: ModelSpec
    seed: int


#: the packages whose modules a candidate's code closure follows (the data's own code is in the data's digest)
CODE_PACKAGES = ("stepcast.estimator", "stepcast.profiling")


def module_source(name: str) -> Path | None:
    """The file of module ``name`` (``stepcast.estimator.xgb``) in this checkout, where ``stepcast.<part>`` is the
    top-level folder ``<part>/``; None for a module that is not the project's."""
    from stepcast.profiling.paths import REPO_ROOT

    parts = name.split(".")
    if parts[0] != "stepcast" or len(parts) < 2:
        return None
    relative = "/".join(parts[1:]) if (REPO_ROOT / parts[1]).is_dir() else "/".join(parts)
    for path in (REPO_ROOT / f"{relative}.py", REPO_ROOT / relative / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_closure(root: str) -> set[str]:
    """``root`` and every module of ``CODE_PACKAGES`` it imports, directly or through another, at module level or
    inside a function (a lazy import is as much the code that runs): read from the sources, nothing is imported."""
    import ast

    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        path = module_source(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                todo += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        todo = [t for t in todo if t in CODE_PACKAGES or t.startswith(tuple(f"{p}." for p in CODE_PACKAGES))]
    return seen


@functools.cache
def code_digest(kind: str) -> str:
    """What a cached fold of ``kind`` depends on besides its rows: the source of every module its estimator imports
    (``module_closure``), of the fit-and-score (``estimator.evaluate``, ``estimator.models``), the hardware catalog
    and the training libraries' versions. A change to one model's code refits that model's folds only."""
    from stepcast.estimator.model_card import trained_with
    from stepcast.estimator.models import MODEL_KINDS
    from stepcast.profiling.paths import REPO_ROOT

    modules = module_closure(MODEL_KINDS[kind].partition(":")[0]) | {"stepcast.estimator.evaluate",
                                                                     "stepcast.estimator.models"}
    files = sorted(path for path in map(module_source, modules) if path is not None)
    files += sorted((REPO_ROOT / "conf" / "hardware").glob("*.yaml"))
    digest = hashlib.sha256(json.dumps(trained_with(), sort_keys=True).encode())
    for path in files:
        digest.update(str(path.relative_to(REPO_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def frame_digest(frame: pd.DataFrame) -> str:
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()).hexdigest()


def job_key(job: Job, train: np.ndarray, data: str) -> str:
    h = hashlib.sha256(json.dumps({"code": code_digest(job.spec.kind), "data": data, "family": job.family,
                                   "split": job.holdout.split, "fold": job.holdout.name, "kind": job.spec.kind,
                                   "params": job.spec.params, "target": job.spec.target, "seed": job.seed},
                                  sort_keys=True, default=str).encode())
    h.update(np.asarray(train, dtype=np.int64).tobytes())
    h.update(np.asarray(job.holdout.test, dtype=np.int64).tobytes())
    return h.hexdigest()[:32]


FLAGS = ("shape_ok", "hardware_seen", "spec_ok")


def run_job(job: Job, frame: pd.DataFrame, groups: np.ndarray, max_train_rows: int | None, cache_dir: Path | None,
            data: str) -> tuple[pd.DataFrame, bool]:
    """(predicted_us and the support flags of the held-out rows, whether they came from the cache); ``groups``: the
    frame's ``sample_groups``."""
    from stepcast.estimator.evaluate import evaluate_fold
    from stepcast.profiling.atomic import atomic_path

    train = training_sample(groups, job.holdout.train, max_train_rows, job.seed)
    path = cache_dir / f"{job_key(job, train, data)}.parquet" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            return pd.read_parquet(path), True
        except (OSError, ValueError):
            log.warning("%s: unreadable cached fold, refitting", path)
    spec = job.spec.seeded(job.seed)
    fold = Fold(job.holdout.split, job.holdout.name, train, job.holdout.test)
    start = time.perf_counter()
    p = evaluate_fold(spec.kind, job.family, frame, fold, spec.params, spec.target, None, job.seed)
    out = pd.DataFrame({"predicted_us": p["predicted_us"].to_numpy(dtype=np.float64)}
                       | {c: p[c].to_numpy(dtype=bool) for c in FLAGS if c in p.columns})
    out["fit_s"] = time.perf_counter() - start
    if path is not None:
        with atomic_path(path) as tmp:
            out.to_parquet(tmp, index=False)
    return out, False


# -- the protocol --------------------------------------------------------------------------------------------------
@dataclass
class Settings:
    seeds: int = 3
    max_train_rows: int | None = 20000
    splits: tuple[str, ...] = SPLITS
    families: tuple[str, ...] | None = None
    quick: bool = False
    cache_dir: Path | None = None
    bundle: Path | None = None
    #: the device split's folds limited to these devices (catalog ids; None: every device): a partial run, e.g. the
    #: accuracy to expect on GPUs just added to the catalog, at a fraction of the full protocol's fits
    held_out: tuple[str, ...] | None = None


def label_gemms_from_cache(frame: pd.DataFrame) -> pd.DataFrame:
    """GEMM rows with their kernel labels from the label cache (never asking cuBLASLt: see ``kernel_labels``)."""
    from stepcast.estimator.kernel_labels import label_gemms

    return label_gemms(frame, ask=False)


def label_coverage(frame: pd.DataFrame) -> dict[str, float]:
    """Per source, the share of GEMM rows with a kernel label (recorded or from the cache): tiled's figures depend
    on it, so the results record it."""
    if "kernel_name" not in frame.columns:
        return {}
    labelled = frame["kernel_name"].notna()
    return {str(s): round(float(v), 4) for s, v in labelled.groupby(text_of(frame, "source")).mean().items()}


def label_losses(new: dict[str, float], old: dict[str, float], tolerance: float = 0.01) -> list[str]:
    """One line per source whose GEMM rows have fewer kernel labels than in ``old`` (results' ``gemm_labels``): the
    label cache is kept per driver build (``estimator.kernel_labels.device_key``), so a changed driver leaves it
    empty and the protocol, which never asks cuBLASLt itself, runs ``tiled`` without its kernel features there, a
    different model whose figures are no comparison."""
    return [f"kernel labels cover {new.get(source, 0.0):.0%} of {source}'s GEMM rows against {share:.0%} in the "
            f"committed results: tiled's figures there are not comparable (fill the cache first: python -m "
            f"stepcast.estimator.kernel_labels --sources {source})"
            for source, share in sorted(old.items()) if new.get(source, 0.0) < share - tolerance]


def family_frames(data: pd.DataFrame, families: tuple[str, ...] | None) -> dict[str, pd.DataFrame]:
    data = data[np.isfinite(data["runtime_us"]) & (data["runtime_us"] > 0)]
    out = {}
    for family, frame in data.groupby("family", sort=True, observed=True):
        if (families is None or family in families) and len(frame) >= MIN_FAMILY_ROWS:
            frame = frame.reset_index(drop=True)
            out[str(family)] = label_gemms_from_cache(frame) if family == "gemm" else frame
    return out


def run_protocol(data: pd.DataFrame, settings: Settings, progress: bool = True) -> dict[str, Any]:
    """Every split's figures for every family of ``data`` (rows per SCHEMA.md): ``{"figures": [...],
    "data": {...}, "settings": {...}, "seconds": ...}``."""
    from tqdm import tqdm

    from benchmarks.estimator.unseen_derived import add_routed, pairs_in, shipped_rules, with_bundle
    from benchmarks.estimator.unseen_figures import split_figures
    from stepcast.estimator.kernel_labels import cache_only

    start = time.perf_counter()
    frames = family_frames(data, settings.families)
    rules = shipped_rules(settings.bundle)
    cache_dir = settings.cache_dir
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
    plan = []  # (split, family, {seed: folds}, candidates)
    for split in settings.splits:
        for family, frame in frames.items():
            if split == "shapes":  # a new draw of shapes per seed; the other splits hold out the same rows
                folds = {seed: holdouts(split, frame, seed) for seed in range(settings.seeds)}
            else:
                found = [h for h in holdouts(split, frame)
                         if split != "device" or settings.held_out is None or h.name in settings.held_out]
                folds = {seed: found for seed in range(settings.seeds)}
            if any(folds.values()):
                plan.append((split, family, folds, candidates(family, settings.quick)))
    total = sum(len(f) * len(models) for _, _, folds, models in plan for f in folds.values())
    figures, cached, fit_s = [], 0, 0.0
    kept: dict[tuple[str, str], tuple[dict, dict]] = {}  # the predictions the routed candidate is made of
    bar = tqdm(total=total, desc="unseen protocol", unit="fit", disable=None if progress else True)
    with cache_only():
        for split, family, folds, models in plan:
            frame = frames[family]
            data_key, groups = frame_digest(frame), sample_groups(frame)
            results: dict[tuple[str, str, int], pd.DataFrame] = {}
            began, hits = time.perf_counter(), cached
            for seed, seed_folds in folds.items():
                for h in seed_folds:
                    for label, spec in models.items():
                        bar.set_postfix_str(f"{split} {family} {h.name} {label} seed {seed}"[:60])
                        out, hit = run_job(Job(family, h, label, spec, seed), frame, groups, settings.max_train_rows,
                                           cache_dir, data_key)
                        results[(h.name, label, seed)] = out
                        cached += hit
                        fit_s += 0.0 if hit else float(out["fit_s"].iat[0])
                        bar.update()
            if progress:  # a line per split and family, also where tqdm draws nothing (no terminal)
                tqdm.write(f"{split} {family}: {len(results)} fits ({cached - hits} cached) in "
                           f"{time.perf_counter() - began:.0f} s")
            with_bundle(results, rules.get(family))
            names = {h.name for f in folds.values() for h in f}
            pooled = {n for n in names if split != "device" or is_gpu(n)}
            figures += split_figures(split, family, frame, folds, results, pooled)
            if split in ROUTED_SPLITS:
                kept[(split, family)] = (folds, results)
    bar.close()
    routed, nested = add_routed(kept, frames, figures, rules)
    figures += routed
    return {
        "figures": figures,
        "data": {family: {"rows": int(len(frame)), "digest": frame_digest(frame)[:16],
                          "pairs": pairs_in(frame), "sources": sorted(set(text_of(frame, "source")))}
                 for family, frame in frames.items()},
        "gemm_labels": label_coverage(frames["gemm"]) if "gemm" in frames else {},
        "settings": {"seeds": settings.seeds, "max_train_rows": settings.max_train_rows,
                     "splits": list(settings.splits), "quick": settings.quick, "floor_rows": FLOOR_ROWS,
                     "held_out": list(settings.held_out) if settings.held_out is not None else None,
                     "shape_share": SHAPE_SHARE, "min_test_rows": MIN_TEST_ROWS,
                     "candidates": {family: {label: {"kind": s.kind, "params": s.params, "target": s.target}
                                             for label, s in candidates(family, settings.quick).items()}
                                    for family in frames},
                     "bundle_rules": {f: {"kind": k, "rule": r} for f, (k, r) in rules.items() if f in frames}},
        "routing": {"nested": nested},
        "fits": {"total": total, "cached": cached, "fit_seconds": round(fit_s, 1)},
        "seconds": round(time.perf_counter() - start, 1),
    }


# -- the command ---------------------------------------------------------------------------------------------------
def print_headline(doc: dict[str, Any]) -> None:
    """Device split, pooled over the GPUs: mean APE (spread over seeds) per family and dtype, per candidate."""
    from rich.console import Console
    from rich.table import Table

    from benchmarks.estimator.accuracy_table import models_of
    from stepcast.estimator.unseen_results import spread

    figures = pd.DataFrame(doc["figures"])
    if not len(figures):
        return
    console = Console(width=160)
    for split in [s for s in SPLITS if s in set(figures["split"])]:
        rows = figures[(figures["split"] == split) & (figures["held_out"] == POOLED) & (figures["source"] == "all")]
        labels = models_of(rows)
        table = Table(title=f"{split} split, pooled: mean APE % (range over seeds)")
        for column in ("family", "dtype", "rows", *labels):
            table.add_column(column, justify="left" if column in ("family", "dtype") else "right")
        for (family, dtype), group in rows.groupby(["family", "dtype"], sort=True):
            by = group.set_index("model")
            table.add_row(family, dtype, f"{int(group['n'].iloc[0]):,}", *[
                f"{by.at[m, 'mean_ape']:.1f} ({spread(by.at[m, 'seeds']):.1f})" if m in by.index else "-"
                for m in labels])
        console.print(table)


def print_comparison(changes: pd.DataFrame) -> int:
    """The figures that moved beyond their spread, then a count; returns how many got worse beyond it."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    moved = changes[changes["beyond"]].sort_values("change", key=np.abs, ascending=False)
    table = Table(title="changed beyond the spread over seeds (mean APE %)")
    for column in ("split", "held out", "family", "dtype", "source", "model", "rows", "old", "new", "change",
                   "spread"):
        table.add_column(column, justify="right" if column in ("rows", "old", "new", "change", "spread") else "left")
    for r in moved.itertuples(index=False):
        table.add_row(r.split, r.held_out, r.family, r.dtype, r.source, r.model, f"{r.n:,}", f"{r.old:.2f}",
                      f"{r.new:.2f}", f"[{'red' if r.change > 0 else 'green'}]{r.change:+.2f}", f"{r.spread:.2f}")
    if len(moved):
        console.print(table)
    worse = int((moved["change"] > 0).sum())
    console.print(f"{len(changes):,} figures compared: {len(moved):,} moved beyond their spread over seeds "
                  f"({worse:,} worse, {len(moved) - worse:,} better)")
    return worse


def main(argv: list[str] | None = None) -> int:
    import argparse

    from stepcast.estimator import unseen_results
    from stepcast.profiling.hardware import load_catalog
    from stepcast.profiling.paths import cache_root

    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimator.accuracy --protocol unseen",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per figure (training sample, model) [3]")
    parser.add_argument("--max-train-rows", type=int, default=20000, help="training rows per fit [20000]")
    parser.add_argument("--splits", default=",".join(SPLITS), help=f"some of {','.join(SPLITS)} [all]")
    parser.add_argument("--families", default="", help="comma-separated families [every family with data]")
    parser.add_argument("--quick", action="store_true", help="cut-down models and 2,000 training rows (a smoke "
                        "test; writes nothing unless --out)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results file [{unseen_results.RESULTS.relative_to(unseen_results.REPO_ROOT)}]")
    parser.add_argument("--compare", action="store_true", help="print each figure's change against the committed "
                        "docs/results/unseen.json; exit 1 when one got worse beyond its spread over seeds")
    parser.add_argument("--markdown", type=Path, nargs="?", const=unseen_results.REPO_ROOT / "docs" / "accuracy.md",
                        default=None,
                        help="also write the accuracy page from the results [docs/accuracy.md]")
    parser.add_argument("--no-cache", action="store_true", help="refit every fold (default: reuse cached folds)")
    parser.add_argument("--held-out", default="", help="comma-separated catalog ids: the device split holds out only "
                        "these (a partial run: writes nothing unless --out) [every device]")
    args = parser.parse_args(argv)
    splits = tuple(s.strip() for s in args.splits.split(",") if s.strip())
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown or not splits:
        parser.error(f"--splits: unknown split(s) {', '.join(unknown) or '(none)'}: expected some of "
                     f"{', '.join(SPLITS)}")
    if args.seeds < 1:
        parser.error("--seeds: expected at least 1")
    families = tuple(f.strip() for f in args.families.split(",") if f.strip()) or None
    held_out = tuple(d.strip() for d in args.held_out.split(",") if d.strip()) or None
    unknown = sorted(d for d in held_out or () if d not in load_catalog())
    if unknown:
        parser.error(f"--held-out: {', '.join(unknown)} not in the catalog (conf/hardware/<id>.yaml)")
    partial = args.quick or held_out is not None
    out = args.out if args.out is not None or partial else unseen_results.RESULTS
    settings = Settings(seeds=args.seeds, max_train_rows=2000 if args.quick else args.max_train_rows, splits=splits,
                        families=families, quick=args.quick,
                        cache_dir=None if args.no_cache else cache_root() / "unseen", held_out=held_out)
    from stepcast.estimator.data import load_measurements

    doc = unseen_results.provenance(settings.bundle) | run_protocol(load_measurements(), settings)
    doc["code_digests"] = {kind: code_digest(kind)[:16] for kind in sorted({
        c["kind"] for family in doc["settings"]["candidates"].values() for c in family.values()})}
    doc = unseen_results.parse(unseen_results.dumps(unseen_results.complete(doc)), "results")  # as the file has it
    print_headline(doc)
    worse = 0
    if args.compare:
        old = unseen_results.committed(unseen_results.RESULTS)
        if old is None:
            print(f"stepcast: --compare: git has no committed {unseen_results.RESULTS.name} to compare against")
        else:
            worse = print_comparison(unseen_results.compare(doc, old))
            losses = label_losses(doc.get("gemm_labels") or {}, old.get("gemm_labels") or {})
            for line in losses:
                print(f"stepcast: --compare: {line}")
            worse += len(losses)
    if out is not None:
        unseen_results.write(out, doc)
        print(f"results written to {out}")
    if args.markdown is not None:
        from benchmarks.estimator import accuracy_table

        accuracy_table.write(args.markdown, doc)
        print(f"accuracy page written to {args.markdown}")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
