"""Accuracy and speed of the estimators, side by side (prints tables; a few minutes on 2 cores).

    python -m benchmarks.estimator.accuracy --protocol unseen [...] # the headline: every device, model, source held out
    python -m benchmarks.estimator.accuracy
        [--suites vidur,neusight,families,one_model,speed,training_models,aiconfigurator,nccl]
        [--gemm-train-rows 40000] [--max-train-rows 10000] [--max-folds 1] [--json out.json]

``--protocol unseen`` runs :mod:`benchmarks.estimator.unseen` (its own options: ``--protocol unseen --help``): each
device, Vidur model and source held out whole, figures with their spread over seeds, written to docs/results/unseen.json
(``--compare``: each figure's change against the committed file). The suites below are the older, narrower views.

1. Vidur H100 GEMMs, whole models held out (one fold per model). Where the profiler (``datasets/``) or
   aiconfigurator has measured 16-bit GEMMs on an H100 or H200, one more column per source adds them to each fold's
   training rows, less the held-out model's weights (subsampled to fit ``--gemm-train-rows``, every Vidur row kept).
2. NeuSight fp32 GEMMs, leave one GPU out (mean APE per held-out GPU).
   Both also compare the two targets of the XGBoost model (efficiency vs log-time) and the default ensemble (32 trees
   of depth 6) with one 9.4 times costlier (300 of depth 6); training rows are subsampled to ``--gemm-train-rows``.
3. Every family with data: random / held-out shapes / leave-one-hardware-out / out-of-range splits (at most
   ``--max-folds`` folds per split, those with the most test rows; training rows subsampled to ``--max-train-rows``).
4. One XGBoost across all families against one per family (random split; why the bundles hold one per family).
5. How the held-out-model error falls with the number of training models: Vidur's A100 GEMMs (the only device
   with more than four models: eight), each model held out and predicted by XGBoost trained on 3, 5 or all 7 others
   (3 and 5: the mean of three random draws); and the H100's four models, one held out, on every device Vidur
   measured them on. Why the H100 figure of suite 1, trained on three models, is data-bound.
6. Prediction throughput (1,000,000 GEMM rows of distinct random shapes, batched; the median of three calls) and
   single-kernel latency of the shipped default bundle (run first, before the training of the other suites).
7. aiconfigurator (``--suites aiconfigurator``): H100/H200 bf16 Linear GEMMs with whole (n, k) pairs held out (five
   fixed sets), each of its four GPUs' GEMMs trained on the other three only, Hopper FlashAttention-3 prefill and
   decode with whole head configurations held out; XGBoost against the roofline, ``--gemm-train-rows`` per fold.
8. NCCL (``--suites nccl``): the NCCL-structured model (``estimator.nccl``) with and without its learned residual
   against alpha-beta and XGBoost on GPU collectives, held-out sizes (a fifth of each source's sizes) and held-out GPU
   counts (2, 4, 8 within a node), and multi-node rows predicted from single-node ones (the catalog's network
   figures); by source, op and size bucket.
9. fp8 (``--suites fp8``): the shipped default bundle's fp8 GEMMs, which no training row teaches (its GEMM rows are
   bf16, fp16, tf32 and fp32), against cuBLASLt's FP8 GEMMs as aiconfigurator timed them in TensorRT-LLM's PyTorch
   flow (``estimator.importers.aiconfigurator_gemm.cublaslt_fp8``: their input quantisation taken off), per GPU,
   GEMMs of 1e10 FLOPs or more (below, most of a row is the quantisation taken off); signed median error and median
   TFLOP/s, measured and predicted.

Every GEMM suite also scores ``xgboost(+kernel config)``: the default XGBoost with the kernel-configuration features
(``estimator.kernel_config``: the recorded kernel where a row names one, else cuBLASLt's heuristic on the virtual
device, ``estimator.kernel_labels``; fill the label cache first with ``python -m stepcast.estimator.kernel_labels``,
else the folds ask cuBLASLt as they go), on the same folds. Suite 1's aiconfigurator column is repeated with the rows'
timing method as a feature (``timing``), and with both. They also score ``tiled``, the NeuSight-structured model
(``estimator.tiled``: floor + the tile bound of the kernel that runs over a learned utilisation), same folds.

Every learned model is fit on each fold's training rows only; the roofline has nothing to fit.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from stepcast.estimator.evaluate import evaluate_fold, select_folds
from stepcast.estimator.metrics import summary
from stepcast.estimator.routing import is_gpu
from stepcast.estimator.splits import SPLITS

console = Console(width=140)

#: the models compared, with benchmark-sized parameters (RF: 50 trees on half the features, to fit the time budget)
MODELS: dict[str, tuple[str, dict, str | None]] = {
    "xgboost": ("xgboost", {}, "efficiency"),
    "mlp": ("mlp", {"epochs": 40}, "efficiency"),
    "random_forest": ("random_forest", {"n_estimators": 50, "max_features": 0.5}, "log_time"),
    "roofline": ("roofline", {}, None),
}
SUITES = ("vidur", "neusight", "families", "one_model", "speed", "training_models", "aiconfigurator", "nccl", "fp8")
#: for the two GEMM suites: the other target, and the 9.4-times-costlier ensemble the default was cut down from
GEMM_COMPARISONS = {
    "xgboost(log_time)": ("xgboost", {}, "log_time"),
    "xgboost(300x6)": ("xgboost", {"n_estimators": 300, "max_depth": 6, "learning_rate": 0.08}, "efficiency"),
}
#: the default model with the kernel-configuration features (estimator.kernel_config), beside it on the same folds
KERNEL_CONFIG = "xgboost(+kernel config)"
WITH_KERNEL_CONFIG = {KERNEL_CONFIG: ("xgboost", {"kernel_config": True}, "efficiency")}
#: the NeuSight-structured GEMM model (estimator.tiled: tile bound over a learned utilisation), on the same folds
TILED = {"tiled": ("tiled", {}, "efficiency")}


POOLED = "pooled"  # the row of every held-out prediction of a split scored together


def score_folds(frame: pd.DataFrame, split: str, models: dict, max_train_rows: int | None,
                max_folds: int | None, folds: list | None = None, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per (fold, model): the fold's summary; plus the pooled rows (fold=POOLED). ``folds``: these instead
    of ``split``'s own. ``by``: columns of ``frame``; adds pooled rows per value of each (fold ``pooled <value>``).

    A model entry is (kind, params, target) for ``estimator.models.make_estimator``, or (a callable returning an
    unfitted estimator, None, None)."""
    rows, pooled = [], {}
    for fold in folds if folds is not None else select_folds(frame, split, max_folds=max_folds):
        for label, (kind, params, target) in models.items():
            family = str(frame["family"].iat[0])
            if callable(kind):
                p = fit_predict(kind(), frame, fold, max_train_rows)
            else:
                p = evaluate_fold(kind, family, frame, fold, params, target, max_train_rows)
            for column in by:
                p[column] = frame[column].to_numpy()[fold.test]
            rows.append({"split": split, "fold": fold.name, "model": label}
                        | summary(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
            pooled.setdefault(label, []).append(p)
    for label, parts in pooled.items():
        p = pd.concat(parts)
        rows.append({"split": split, "fold": POOLED, "model": label}
                    | summary(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
        for value, part in (item for column in by for item in p.groupby(column, sort=True)):
            rows.append({"split": split, "fold": f"{POOLED} {value}", "model": label}
                        | summary(part["predicted_us"].to_numpy(), part["runtime_us"].to_numpy()))
    return pd.DataFrame(rows)


def fit_predict(model, frame: pd.DataFrame, fold, max_train_rows: int | None) -> pd.DataFrame:
    """``evaluate_fold`` for an estimator instance that ``estimator.models`` does not build by name."""
    from stepcast.estimator.evaluate import subsample

    train = subsample(frame.iloc[fold.train], max_train_rows)
    test = frame.iloc[fold.test]
    model.fit(train, train["runtime_us"].to_numpy())
    return test[["family", "hardware", "runtime_us"]].assign(predicted_us=model.predict(test), split=fold.split,
                                                            fold=fold.name)


def side_by_side(results: pd.DataFrame, title: str, metric: str = "mean_ape", by: str = "fold") -> None:
    table = Table(title=title)
    labels = list(pd.unique(results["model"]))
    table.add_column(by)
    table.add_column("rows", justify="right")
    for label in labels:
        table.add_column(f"{label}\n{metric}", justify="right")
    for key, group in results.groupby(by, sort=False):
        values = group.set_index("model")[metric]
        n = int(group["n"].iloc[0])
        table.add_row(str(key), str(n), *[f"{values.get(label, np.nan):.1f}" for label in labels])
    console.print(table)


#: other GEMMs that may join the Vidur H100 folds' training rows: the same 132-SM Hopper die, 16-bit dtypes, from the
#: profiler (column xgboost(+profiled)) and from aiconfigurator (xgboost(+aiconfigurator))
HOPPER_PROFILES = {"hardware": ("h100-sxm", "h200"), "dtype": ("fp16", "bf16")}
EXTRA_SOURCES = {"profiler": "xgboost(+profiled)", "aiconfigurator": "xgboost(+aiconfigurator)"}
WITH_PROFILES = EXTRA_SOURCES["profiler"]


def suite_vidur_h100(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    frame = data[(data["family"] == "gemm") & (data["source"] == "vidur") & (data["hardware"] == "h100-sxm")]
    frame = frame.reset_index(drop=True)
    res = score_folds(frame, "held_out_shapes", MODELS | GEMM_COMPARISONS | WITH_KERNEL_CONFIG | TILED, max_train_rows,
                      None)
    notes = []
    for source, label in EXTRA_SOURCES.items():
        extra = data[(data["family"] == "gemm") & (data["source"] == source)
                     & data["hardware"].astype(str).isin(HOPPER_PROFILES["hardware"])
                     & data["dtype"].astype(str).isin(HOPPER_PROFILES["dtype"])]
        if len(extra):
            # the rows' timing method as a feature (estimator.features.TIMING_METHODS): each source its own offset
            models = {label: MODELS["xgboost"], label[:-1] + ", timing)": ("xgboost", {"timing": True}, "efficiency"),
                      label[:-1] + ", timing, kernel config)": ("xgboost", {"timing": True, "kernel_config": True},
                                                                 "efficiency")}
            res = pd.concat([res, with_profiles(frame, extra, max_train_rows, label, models)], ignore_index=True)
            notes.append(f"{label}: plus up to {len(extra):,} {source} Hopper GEMMs")
    side_by_side(res, "Vidur H100 GEMMs, whole models held out: mean APE % (target <= 5, aim 2)"
                 + "".join(f"; {n}" for n in notes))
    return res.assign(suite="vidur_h100_held_out_models")


def without_weights_of(extra: pd.DataFrame, held_out: pd.DataFrame) -> pd.DataFrame:
    """``extra`` without the GEMMs of the held-out model's weights: a row goes when two of its (m, n, k) are one of
    the held-out (n, k) pairs in either order (forward, input-gradient and weight-gradient GEMMs of that weight)."""
    held = {tuple(p) for p in np.sort(held_out[["n", "k"]].to_numpy(dtype=np.int64), axis=1)}
    dims = extra[["m", "n", "k"]].to_numpy(dtype=np.int64)
    hit = np.zeros(len(extra), dtype=bool)
    for i, j in ((1, 2), (0, 1), (0, 2)):
        hit |= np.fromiter((tuple(p) in held for p in np.sort(dims[:, [i, j]], axis=1)), dtype=bool, count=len(dims))
    return extra[~hit]


def with_profiles(frame: pd.DataFrame, profiled: pd.DataFrame, max_train_rows: int | None,
                  label: str = WITH_PROFILES, models: dict | None = None) -> pd.DataFrame:
    """Suite 1's folds with other Hopper GEMMs (the profiler's, aiconfigurator's) added to each fold's training rows,
    less the held-out model's weights (what the profiler's token series, conf/profiling/gemm/llm_series.yaml, is
    for). The added rows are subsampled so that, with the fold's own rows, they fit ``max_train_rows``: every Vidur
    training row is kept."""
    from stepcast.estimator.splits import Fold

    profiled = profiled.reset_index(drop=True)  # positions, which the folds index by
    both = pd.concat([frame, profiled], ignore_index=True)
    folds = []
    rng = np.random.default_rng(0)
    for fold in select_folds(frame, "held_out_shapes"):
        allowed = without_weights_of(profiled, frame.iloc[fold.test]).index.to_numpy()
        room = len(allowed) if max_train_rows is None else max(max_train_rows - len(fold.train), 0)
        allowed = np.sort(rng.choice(allowed, min(room, len(allowed)), replace=False)) + len(frame)
        folds.append(Fold(fold.split, fold.name, np.concatenate([fold.train, allowed]), fold.test))
    return score_folds(both, "held_out_shapes", models or {label: MODELS["xgboost"]}, None, None, folds)


def suite_neusight_logo(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    frame = data[(data["family"] == "gemm") & (data["source"] == "neusight") & (data["dtype"] == "fp32")]
    res = score_folds(frame.reset_index(drop=True), "leave_one_hardware_out",
                      MODELS | GEMM_COMPARISONS | WITH_KERNEL_CONFIG | TILED, max_train_rows, None)
    side_by_side(res, "NeuSight fp32 GEMMs, leave one GPU out: mean APE % per held-out GPU (aim < 15)")
    return res.assign(suite="neusight_fp32_gemm_logo")


def suite_training_models(data: pd.DataFrame, max_train_rows: int | None, draws: int = 3,
                          sizes: tuple[int, ...] = (3, 5, 7)) -> pd.DataFrame:
    from stepcast.estimator.splits import Fold

    frame = data[(data["family"] == "gemm") & (data["source"] == "vidur") & (data["hardware"] == "a100-sxm-80gb")]
    frame = frame.reset_index(drop=True)
    model = frame["model"].astype(str).to_numpy()
    names = list(pd.unique(model))
    kind, params, target = MODELS["xgboost"]
    rng = np.random.default_rng(0)
    rows = []
    for held in names:
        others = [m for m in names if m != held]
        for size in (s for s in sizes if s <= len(others)):
            picks = [others] if size == len(others) else [list(rng.choice(others, size, replace=False))
                                                          for _ in range(draws)]
            for pick in picks:
                fold = Fold("held_out_shapes", held, np.flatnonzero(np.isin(model, pick)),
                            np.flatnonzero(model == held))
                p = evaluate_fold(kind, "gemm", frame, fold, params, target, max_train_rows)
                rows.append({"held_out": held, "model": f"{size} models", "draw": ",".join(pick)}
                            | summary(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
    res = pd.DataFrame(rows)
    mean = res.groupby(["held_out", "model"], sort=False)[["mean_ape", "n"]].mean().reset_index()
    overall = (mean.assign(weighted=mean["mean_ape"] * mean["n"]).groupby("model", sort=False)[["weighted", "n"]].sum()
               .reset_index())  # every held-out row counts once, as in suite 1's pooled row
    overall = overall.assign(mean_ape=overall["weighted"] / overall["n"], held_out=POOLED)
    side_by_side(pd.concat([mean, overall], ignore_index=True),
                 "Vidur A100 GEMMs, each model held out, XGBoost trained on N other models: mean APE %", by="held_out")
    return pd.concat([res.assign(suite="vidur_a100_training_models"), same_models_elsewhere(data, max_train_rows)],
                     ignore_index=True)


def same_models_elsewhere(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    """The H100's models, one held out and the other three trained on, on every device Vidur measured them on:
    whether the H100 figure is about those models or about the H100."""
    vidur = data[(data["family"] == "gemm") & (data["source"] == "vidur")]
    h100_models = set(vidur.loc[vidur["hardware"] == "h100-sxm", "model"].astype(str))
    rows = []
    for device, frame in vidur[vidur["model"].astype(str).isin(h100_models)].groupby("hardware", sort=True):
        if frame["model"].nunique() < len(h100_models):
            continue
        res = score_folds(frame.reset_index(drop=True), "held_out_shapes", {"xgboost": MODELS["xgboost"]},
                          max_train_rows, None)
        rows.append(res[res["fold"] == POOLED].assign(fold=str(device)))
    if not rows:
        return pd.DataFrame()
    res = pd.concat(rows, ignore_index=True)
    side_by_side(res, f"The H100's {len(h100_models)} Vidur models, one held out, on each device: mean APE %")
    return res.assign(suite="vidur_h100_models_per_device")


#: aiconfigurator's Hopper GPUs (the same 132-SM die), whose GEMM and attention tables the suite scores
HOPPER = ("h100-sxm", "h200")
AIC_MODELS = {"xgboost": MODELS["xgboost"], "roofline": MODELS["roofline"]}
AIC_GEMM_MODELS = {"xgboost": MODELS["xgboost"]} | WITH_KERNEL_CONFIG | {"roofline": MODELS["roofline"]}


def suite_aiconfigurator(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    """aiconfigurator's tables (estimator.importers.aiconfigurator_*): bf16 Linear GEMMs on H100/H200 with whole
    (n, k) pairs held out (five fixed sets; the rows' ``group``), every GPU's GEMMs trained on the other GPUs only,
    and Hopper FlashAttention-3 prefill / decode with whole head configurations held out."""
    aic = data[data["source"] == "aiconfigurator"]
    out = []
    gemm = aic[aic["family"] == "gemm"].reset_index(drop=True)
    if len(gemm):
        hopper = gemm[gemm["hardware"].astype(str).isin(HOPPER)].reset_index(drop=True)
        res = score_folds(hopper, "held_out_shapes", AIC_GEMM_MODELS, max_train_rows, None, by=("hardware",))
        side_by_side(res, "aiconfigurator H100/H200 bf16 Linear GEMMs, whole (n, k) pairs held out: mean APE % "
                          "(target <= 5)")
        out.append(res.assign(suite="aiconfigurator_gemm_held_out_nk"))
        res = score_folds(gemm, "leave_one_hardware_out", AIC_GEMM_MODELS, max_train_rows, None)
        side_by_side(res, "aiconfigurator bf16 Linear GEMMs, each GPU trained on the others only: mean APE %")
        out.append(res.assign(suite="aiconfigurator_gemm_logo"))
    attention = aic[(aic["family"] == "attention") & aic["hardware"].astype(str).isin(HOPPER)]
    if len(attention):
        attention = attention.assign(phase=np.where(attention["seq_q"] == 1, "decode", "prefill")).reset_index(
            drop=True)
        res = score_folds(attention, "held_out_shapes", AIC_MODELS, max_train_rows, None, by=("phase",))
        side_by_side(res, "aiconfigurator Hopper attention (FA3, bf16), whole head configurations held out: "
                          "mean APE % (target <= 8)")
        out.append(res.assign(suite="aiconfigurator_attention_held_out_heads"))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


#: size buckets of the NCCL suite (bytes per rank, left-closed)
SIZE_BUCKETS = (0, 2 ** 16, 2 ** 20, 2 ** 24, np.inf)
SIZE_LABELS = ("<64KiB", "64KiB-1MiB", "1-16MiB", ">=16MiB")


def nccl_models() -> dict:
    """The NCCL-structured model through the plug-in interface (``estimator.models`` kind ``nccl``)."""
    return {"alpha-beta": MODELS["roofline"], "xgboost": MODELS["xgboost"],
            "nccl": ("nccl", {"residual": False}, None), "nccl+residual": ("nccl", {"residual": True}, None)}


def nccl_folds(frame: pd.DataFrame, test_share: float = 0.2, seed: int = 0) -> list:
    """Held-out sizes (a random fifth of each source's distinct sizes, every op, count and device) and held-out GPU
    counts (every single-node row at 2, 4 or 8 ranks, trained on the other counts and on multi-node rows); trained
    within nodes, tested across them; across nodes, each count of ranks per node held out (trained on the others:
    how the network's bandwidth grows with the NICs a node's ranks reach); and each device held out whose catalog
    links another measured device shares (``estimator.nccl.same_links_as``: how a catalog variant of a measured GPU
    is timed)."""
    from stepcast.estimator.splits import Fold

    folds = []
    sizes = frame[["source", "bytes"]].drop_duplicates()
    chosen = sizes[np.random.default_rng(seed).random(len(sizes)) < test_share]
    test = frame.set_index(["source", "bytes"]).index.isin(chosen.set_index(["source", "bytes"]).index)
    folds.append(Fold("held_out_sizes", "sizes", np.flatnonzero(~test), np.flatnonzero(test)))
    single = (frame["ranks"] <= frame["ranks_per_node"]).to_numpy()
    for count in (2, 4, 8):
        test = single & (frame["ranks"] == count).to_numpy()
        if test.any():
            folds.append(Fold("held_out_gpu_counts", f"{count} GPUs", np.flatnonzero(~test), np.flatnonzero(test)))
    if (~single).any():
        folds.append(Fold("multi_node", "trained within nodes", np.flatnonzero(single), np.flatnonzero(~single)))
    per_node = frame["ranks_per_node"].to_numpy()
    counts = np.unique(per_node[~single])
    for count in counts if len(counts) > 1 else ():  # across nodes, one count of ranks per node held out
        test = ~single & (per_node == count)
        folds.append(Fold("held_out_per_node", f"{count:g} per node", np.flatnonzero(~test), np.flatnonzero(test)))
    from stepcast.estimator.nccl import same_links_as

    hardware = frame["hardware"].astype(str)
    devices = sorted(pd.unique(hardware))
    for device in devices:  # a device held out whose links a measured one shares: the sibling's figures time it
        sibling = same_links_as(device, [d for d in devices if d != device])
        if sibling is not None:
            test = (hardware == device).to_numpy()
            folds.append(Fold("held_out_devices", f"{device} (as {sibling})", np.flatnonzero(~test),
                              np.flatnonzero(test)))
    return folds


def suite_nccl(data: pd.DataFrame) -> pd.DataFrame:
    """NCCL on GPUs (aiconfigurator's nccl-tests tables, Vidur's torch.distributed tables): the NCCL-structured model
    (estimator.nccl) with and without its learned residual against alpha-beta and XGBoost, on held-out sizes and
    held-out GPU counts, across nodes and on devices held out that share a measured device's links; errors by
    source, op and size bucket."""
    frame = data[(data["family"] == "collective") & data["hardware"].astype(str).map(is_gpu)].reset_index(drop=True)
    if not len(frame):
        return pd.DataFrame()
    bucket = pd.cut(frame["bytes"], SIZE_BUCKETS, right=False, labels=SIZE_LABELS).astype(str)
    frame = frame.assign(where=frame["source"].astype(str) + " " + frame["op"].astype(str),
                         size_bucket=frame["source"].astype(str) + " " + bucket)
    out = []
    folds = nccl_folds(frame)
    for split in ("held_out_sizes", "held_out_gpu_counts", "multi_node", "held_out_per_node", "held_out_devices"):
        res = score_folds(frame, split, nccl_models(), None, None, [f for f in folds if f.split == split],
                          by=("source", "where", "size_bucket", "hardware"))
        side_by_side(res, f"NCCL, {split.replace('_', ' ')}: mean APE % per fold, then by source, source and op, "
                          "source and size, device (target <= 10 within a node)")
        out.append(res.assign(suite=f"nccl_{split}"))
    return pd.concat(out, ignore_index=True)


def suite_fp8(root: Path | None = None) -> pd.DataFrame:
    """Suite 9: the shipped bundle's fp8 GEMMs against cuBLASLt's, per GPU (module docstring)."""
    from stepcast import estimator
    from stepcast.estimator.importers.aiconfigurator_gemm import cublaslt_fp8
    from stepcast.estimator.metrics import ape
    from stepcast.profiling.paths import shared_data_root

    rows = cublaslt_fp8(root or shared_data_root())
    rows = rows[rows["m"] > 8].reset_index(drop=True)   # TensorRT-LLM runs m <= 8 on CUDA cores, not cuBLASLt
    predicted = estimator.load(None).predict(rows)
    flops = 2.0 * rows["m"].to_numpy() * rows["n"].to_numpy() * rows["k"].to_numpy()
    measured = rows["runtime_us"].to_numpy()
    out = []
    for hardware in sorted(rows["hardware"].unique()):
        mine = rows["hardware"].to_numpy() == hardware
        # small GEMMs are mostly their quantisation, so what is left of them after taking it off is noise
        for label, keep in ((">= 1e10 FLOPs", mine & (flops >= 1e10)),):
            if not keep.any():
                continue
            e = (predicted[keep] - measured[keep]) / measured[keep] * 100.0
            out.append({"suite": "fp8", "hardware": hardware, "rows": label, "n": int(keep.sum()),
                        "mean_ape": float(ape(predicted[keep], measured[keep]).mean()),
                        "signed_median": float(np.median(e)),
                        "tflops_measured": float(np.median(flops[keep] / measured[keep] / 1e6)),
                        "tflops_predicted": float(np.median(flops[keep] / predicted[keep] / 1e6))})
    frame = pd.DataFrame(out)
    table = Table(title="fp8 GEMMs (no training row): the shipped bundle against cuBLASLt's, input quantisation off")
    for col in ("GPU", "rows", "n", "mean APE %", "signed median %", "TFLOP/s measured", "predicted"):
        table.add_column(col, justify="left" if col in ("GPU", "rows") else "right")
    for r in out:
        table.add_row(r["hardware"], r["rows"], f"{r['n']:,}", f"{r['mean_ape']:.1f}", f"{r['signed_median']:+.1f}",
                      f"{r['tflops_measured']:.0f}", f"{r['tflops_predicted']:.0f}")
    console.print(table)
    return frame


def suite_families(data: pd.DataFrame, max_train_rows: int | None, max_folds: int | None) -> pd.DataFrame:
    out = []
    for family, frame in data.groupby("family", sort=True):
        frame = frame.reset_index(drop=True)
        if len(frame) < 100:
            console.print(f"[dim]{family}: {len(frame)} rows, too few for a benchmark (roofline only)[/dim]")
            continue
        models = MODELS | (WITH_KERNEL_CONFIG | TILED if family == "gemm" else {})  # the only family with kernel labels
        parts = [score_folds(frame, split, models, max_train_rows, max_folds) for split in SPLITS]
        res = pd.concat([p for p in parts if len(p)], ignore_index=True)
        pooled = res[res["fold"] == POOLED]
        side_by_side(pooled, f"{family}: mean APE % by split (pooled over folds)", by="split")
        side_by_side(pooled, f"{family}: time-weighted error % by split", metric="time_weighted_ape", by="split")
        out.append(res.assign(suite=f"family_{family}"))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def suite_one_model(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    """One XGBoost model across every family against one per family, on each family's random split: the measurement
    behind shipping one model per family. The shared model sees the union of the families' features (NaN where a
    family has no such feature) plus a family code, and the same efficiency target and parameters."""
    from stepcast.estimator.evaluate import subsample
    from stepcast.estimator.features import features
    from stepcast.estimator.splits import folds
    from stepcast.estimator.xgb import XGBoostEstimator

    train, test = {}, {}
    for family, frame in data.groupby("family", sort=True):
        if len(frame) < 100:
            continue
        frame = frame.reset_index(drop=True)
        fold = next(folds("random", frame))
        train[family], test[family] = subsample(frame.iloc[fold.train], max_train_rows), frame.iloc[fold.test]
    families = list(train)

    def union(parts: dict[str, pd.DataFrame], names: list[str] | None = None):
        feats = {f: features(f, rows) for f, rows in parts.items()}
        names = names or ["family"] + sorted({n for ff in feats.values() for n in ff.names})
        blocks = []
        for f, ff in feats.items():
            block = np.full((len(ff.matrix), len(names)), np.nan, dtype=np.float32)
            block[:, 0] = families.index(f)
            for i, name in enumerate(ff.names):
                block[:, names.index(name)] = ff.matrix[:, i]
            blocks.append(block)
        return np.concatenate(blocks), np.concatenate([ff.baseline_us for ff in feats.values()]), names

    x, base, names = union(train)
    y = np.log(np.concatenate([rows["runtime_us"].to_numpy() for rows in train.values()]) / base)
    shared = XGBoostEstimator(family="all")
    shared.feature_names = names
    shared._fit_matrix(x, y)
    x_test, base_test, _ = union(test, names)
    pred_shared = np.exp(shared._predict_matrix(x_test).astype(np.float64)) * base_test
    rows, start = [], 0
    for f in families:
        truth = test[f]["runtime_us"].to_numpy()
        own = XGBoostEstimator(family=f).fit(train[f], train[f]["runtime_us"].to_numpy()).predict(test[f])
        for label, pred in (("per family", own), ("one model", pred_shared[start:start + len(truth)])):
            rows.append({"family": f, "model": label} | summary(pred, truth))
        start += len(truth)
    res = pd.DataFrame(rows)
    side_by_side(res, "One XGBoost per family vs one across families, random split: mean APE %", by="family")
    return res.assign(suite="one_model_vs_per_family")


def random_gemms(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "family": pd.Categorical(np.repeat("gemm", n)), "hardware": rng.choice(["h100-sxm", "a100-sxm-80gb"], n),
        "dtype": rng.choice(["bf16", "fp16"], n), "m": rng.integers(1, 16384, n), "n": rng.integers(64, 16384, n),
        "k": rng.integers(64, 16384, n), "batch": np.ones(n, dtype=np.int64),
    })


def trace_like_gemms(n: int, distinct: int = 2000, seed: int = 1) -> pd.DataFrame:
    """n GEMMs drawn from ``distinct`` shapes: what an emulated training step looks like (layers repeat)."""
    shapes = random_gemms(distinct, seed)
    return shapes.iloc[np.random.default_rng(seed).integers(0, distinct, n)].reset_index(drop=True)


def speed(n: int = 1_000_000) -> dict[str, float]:
    from stepcast import estimator
    from stepcast.estimator.features import features

    model = estimator.load()
    gemm = model.estimators.get("gemm") if hasattr(model, "estimators") else None
    frame = random_gemms(n)
    assert np.all(np.isfinite(model.predict(frame)))  # also the warm-up
    results: dict[str, float] = {}

    def per_second(call, rows: int) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return rows / float(np.median(times))

    results["batched_kernels_per_s"] = per_second(lambda: model.predict(frame), n)
    trace = trace_like_gemms(n)
    results["batched_trace_like_kernels_per_s"] = per_second(lambda: model.predict(trace), n)  # 2,000 shapes
    results["features_one_thread_kernels_per_s"] = per_second(lambda: features("gemm", frame), n)
    if gemm is not None and hasattr(gemm, "_predict_matrix"):
        feats = features("gemm", frame)
        results["model_one_thread_kernels_per_s"] = per_second(lambda: gemm._predict_matrix(feats.matrix), n)
    one = frame.head(1).copy()
    spec = {k: (v.item() if hasattr(v, "item") else v) for k, v in one.iloc[0].to_dict().items()}
    for label, arg in (("single_call_frame_ms", one), ("single_call_dict_ms", [spec])):
        times = []
        for _ in range(200):
            t = time.perf_counter()
            model.predict(arg)
            times.append(time.perf_counter() - t)
        results[label] = float(np.median(times) * 1e3)
    label = f"{gemm.name}@{gemm.version}" if gemm else "roofline"
    table = Table(title=f"Prediction speed, shipped default bundle ({label}); {n:,} GEMMs of random shapes, "
                        "trace-like: drawn from 2,000 distinct shapes")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in results.items():
        table.add_row(key, f"{value:,.0f}" if key.endswith("per_s") else f"{value:.3f}")
    console.print(table)
    return results


def chosen_suites(parser: argparse.ArgumentParser, text: str, allowed: tuple[str, ...]) -> list[str]:
    """The comma-separated suites of ``text``; an unknown one stops the command (argparse's usage error, exit 2)."""
    suites = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(suites) - set(allowed))
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}: expected some of {', '.join(allowed)}")
    return suites


PROTOCOLS = ("suites", "unseen")


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    chooser = argparse.ArgumentParser(add_help=False)
    chooser.add_argument("--protocol", choices=PROTOCOLS, default="suites")
    chosen, rest = chooser.parse_known_args(argv)
    if chosen.protocol == "unseen":
        from benchmarks.estimator.unseen import main as unseen_main

        return unseen_main(rest)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimator.accuracy",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=PROTOCOLS, default="suites",
                        help="unseen: every device, model and source held out (--protocol unseen --help)")
    parser.add_argument("--gemm-train-rows", type=int, default=40000, help="training rows per fold, suites 1-2")
    parser.add_argument("--max-train-rows", type=int, default=10000, help="training rows per fold, suite 3")
    parser.add_argument("--max-folds", type=int, default=1, help="folds per split, suite 3")
    parser.add_argument("--suites", default=",".join(SUITES),
                        help=f"comma-separated subset of {','.join(SUITES)}")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    suites = chosen_suites(parser, args.suites, SUITES)
    results: dict[str, object] = {}
    if "speed" in suites:  # first: timed before ten minutes of training have heated the machine and filled the heap
        results["speed"] = speed()
    if set(suites) - {"speed"}:
        from stepcast.estimator.data import load_measurements

        data = load_measurements()
        data = data[np.isfinite(data["runtime_us"]) & (data["runtime_us"] > 0)]
        parts = []
        if "vidur" in suites:
            parts.append(suite_vidur_h100(data, args.gemm_train_rows))
        if "neusight" in suites:
            parts.append(suite_neusight_logo(data, args.gemm_train_rows))
        if "families" in suites:
            parts.append(suite_families(data, args.max_train_rows, args.max_folds))
        if "one_model" in suites:
            parts.append(suite_one_model(data, args.max_train_rows))
        if "training_models" in suites:
            parts.append(suite_training_models(data, args.gemm_train_rows))
        if "aiconfigurator" in suites:
            parts.append(suite_aiconfigurator(data, args.gemm_train_rows))
        if "nccl" in suites:
            parts.append(suite_nccl(data))
        if "fp8" in suites:
            parts.append(suite_fp8())
        results["accuracy"] = pd.concat(parts, ignore_index=True).to_dict(orient="records")
    if args.json:
        from stepcast.estimator.bundle import write_json_atomic

        write_json_atomic(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
