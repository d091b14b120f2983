"""Accuracy and speed of the estimators, side by side (prints tables; a few minutes on 2 cores).

    python -m estimator.benchmark [--suites vidur,neusight,families,speed] [--gemm-train-rows 40000]
                                  [--max-train-rows 10000] [--max-folds 1] [--json out.json]

1. Vidur H100 GEMMs, whole models held out (one fold per model).
2. NeuSight fp32 GEMMs, leave one GPU out (mean APE per held-out GPU).
   Both also compare the two targets of the XGBoost model: efficiency vs log-time; training rows are subsampled
   to ``--gemm-train-rows``.
3. Every family with data: random / held-out shapes / leave-one-hardware-out / out-of-range splits (at most
   ``--max-folds`` folds per split, those with the most test rows; training rows subsampled to ``--max-train-rows``).
4. Prediction throughput (1,000,000 GEMM rows, batched) and single-kernel latency of the shipped default bundle.

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

from estimator.evaluate import evaluate_fold, select_folds
from estimator.metrics import summary
from estimator.splits import SPLITS

console = Console(width=140)

#: the models compared, with benchmark-sized parameters (RF: 50 trees on half the features, to fit the time budget)
MODELS: dict[str, tuple[str, dict, str | None]] = {
    "xgboost": ("xgboost", {}, "efficiency"),
    "mlp": ("mlp", {"epochs": 40}, "efficiency"),
    "random_forest": ("random_forest", {"n_estimators": 50, "max_features": 0.5}, "log_time"),
    "roofline": ("roofline", {}, None),
}
SUITES = ("vidur", "neusight", "families", "speed")
TARGET_COMPARISON = {"xgboost(log_time)": ("xgboost", {}, "log_time")}


POOLED = "pooled"  # the row of every held-out prediction of a split scored together


def score_folds(frame: pd.DataFrame, split: str, models: dict, max_train_rows: int | None,
                max_folds: int | None) -> pd.DataFrame:
    """One row per (fold, model): the fold's summary; plus the pooled rows (fold=POOLED)."""
    rows, pooled = [], {}
    for fold in select_folds(frame, split, max_folds=max_folds):
        for label, (kind, params, target) in models.items():
            family = str(frame["family"].iat[0])
            p = evaluate_fold(kind, family, frame, fold, params, target, max_train_rows)
            rows.append({"split": split, "fold": fold.name, "model": label}
                        | summary(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
            pooled.setdefault(label, []).append(p)
    for label, parts in pooled.items():
        p = pd.concat(parts)
        rows.append({"split": split, "fold": POOLED, "model": label}
                    | summary(p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()))
    return pd.DataFrame(rows)


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


def suite_vidur_h100(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    frame = data[(data["family"] == "gemm") & (data["source"] == "vidur") & (data["hardware"] == "h100-sxm")]
    res = score_folds(frame.reset_index(drop=True), "held_out_shapes", MODELS | TARGET_COMPARISON, max_train_rows, None)
    side_by_side(res, "Vidur H100 GEMMs, whole models held out: mean APE % (target <= 5, aim 2)")
    return res.assign(suite="vidur_h100_held_out_models")


def suite_neusight_logo(data: pd.DataFrame, max_train_rows: int | None) -> pd.DataFrame:
    frame = data[(data["family"] == "gemm") & (data["source"] == "neusight") & (data["dtype"] == "fp32")]
    res = score_folds(frame.reset_index(drop=True), "leave_one_hardware_out", MODELS | TARGET_COMPARISON,
                      max_train_rows, None)
    side_by_side(res, "NeuSight fp32 GEMMs, leave one GPU out: mean APE % per held-out GPU (aim < 15)")
    return res.assign(suite="neusight_fp32_gemm_logo")


def suite_families(data: pd.DataFrame, max_train_rows: int | None, max_folds: int | None) -> pd.DataFrame:
    out = []
    for family, frame in data.groupby("family", sort=True):
        frame = frame.reset_index(drop=True)
        if len(frame) < 100:
            console.print(f"[dim]{family}: {len(frame)} rows, too few for a benchmark (roofline only)[/dim]")
            continue
        parts = [score_folds(frame, split, MODELS, max_train_rows, max_folds) for split in SPLITS]
        res = pd.concat([p for p in parts if len(p)], ignore_index=True)
        pooled = res[res["fold"] == POOLED]
        side_by_side(pooled, f"{family}: mean APE % by split (pooled over folds)", by="split")
        side_by_side(pooled, f"{family}: time-weighted error % by split", metric="time_weighted_ape", by="split")
        out.append(res.assign(suite=f"family_{family}"))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


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
    import estimator
    from estimator.features import features

    model = estimator.load()
    gemm = model.estimators.get("gemm") if hasattr(model, "estimators") else None
    frame = random_gemms(n)
    model.predict(frame.head(1000))  # warm up
    results: dict[str, float] = {}
    t = time.perf_counter()
    pred = model.predict(frame)
    results["batched_kernels_per_s"] = n / (time.perf_counter() - t)
    assert np.all(np.isfinite(pred))
    trace = trace_like_gemms(n)
    t = time.perf_counter()
    model.predict(trace)
    results["batched_trace_like_kernels_per_s"] = n / (time.perf_counter() - t)  # 2,000 distinct shapes
    t = time.perf_counter()
    feats = features("gemm", frame)
    results["features_kernels_per_s"] = n / (time.perf_counter() - t)
    if gemm is not None and hasattr(gemm, "_predict_matrix"):
        t = time.perf_counter()
        gemm._predict_matrix(feats.matrix)
        results["model_only_kernels_per_s"] = n / (time.perf_counter() - t)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator.benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gemm-train-rows", type=int, default=40000, help="training rows per fold, suites 1-2")
    parser.add_argument("--max-train-rows", type=int, default=10000, help="training rows per fold, suite 3")
    parser.add_argument("--max-folds", type=int, default=1, help="folds per split, suite 3")
    parser.add_argument("--suites", default=",".join(SUITES),
                        help=f"comma-separated subset of {','.join(SUITES)}")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}: expected some of {', '.join(SUITES)}")
    results: dict[str, object] = {}
    if set(suites) - {"speed"}:
        from estimator.data import load_measurements

        data = load_measurements()
        data = data[np.isfinite(data["runtime_us"]) & (data["runtime_us"] > 0)]
        parts = []
        if "vidur" in suites:
            parts.append(suite_vidur_h100(data, args.gemm_train_rows))
        if "neusight" in suites:
            parts.append(suite_neusight_logo(data, args.gemm_train_rows))
        if "families" in suites:
            parts.append(suite_families(data, args.max_train_rows, args.max_folds))
        results["accuracy"] = pd.concat(parts, ignore_index=True).to_dict(orient="records")
    if "speed" in suites:
        results["speed"] = speed()
    if args.json:
        from estimator.bundle import write_json_atomic

        write_json_atomic(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
