"""Why a GEMM split scores what it does: where the held-out error sits, and how low any model could go on the data.

    python -m benchmarks.estimator.diagnose [--suites neusight,vidur,out_of_range] [--gemm-train-rows 40000]
                                            [--json out.json]

The two GEMM aims of ``python -m benchmarks.estimator.accuracy`` that fail are read here, on the benchmark's own folds
and with the default XGBoost:

- ``neusight`` (fp32 GEMMs, leave one GPU out): held-out error by GPU and runtime bucket; each GPU's profile from
  its own rows (the floor of an op, the median time of the GEMMs under a MFLOP, set by the host's launch path; the
  share of the catalog's fp32 peak and memory bandwidth that the biggest GEMMs reach, which a power cap lowers); and
  the *transfer bound*: every other GPU's measured time of the same shape, mapped to this GPU by the best map
  fitted on this GPU's own rows (one ratio per decade of the other GPU's time). A model that sees the other GPUs'
  measurements and this GPU's spec sheet has less to go on than that map, which knows this GPU's times.
- ``vidur`` (H100 GEMMs, whole models held out): held-out error by m bucket and by layer; the *level oracle*: the
  same predictions with each held-out series (one weight: model, layer, n, k) rescaled, per fifth (twentieth) of its
  m range, by its median error, i.e. the error left if a model knew every series' level; and the *neighbour bound*:
  each row predicted by the mean of its two m-neighbours' measured times in its own series (Vidur's m step is 8 to
  32), the roughness of the data itself (Vidur's times are rounded to 0.5 us).

Both suites also score feature variants of the same XGBoost on the same folds (``FEATURE_VARIANTS``): roofline
terms added, the whole-device spec figures dropped, the device described per SM instead (NeuSight's normalisation),
the operands' size over L2 added. ``out_of_range`` scores the variants on every source's GEMMs with the largest
tenth held out (the bundle card's split): the check that a variant does not trade extrapolation for what it gains.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from benchmarks.estimator.accuracy import chosen_suites
from stepcast.estimator.evaluate import evaluate_fold, select_folds
from stepcast.estimator.metrics import BUCKET_LABELS, ape, runtime_bucket
from stepcast.estimator.workload import work

console = Console(width=140)
SUITES = ("neusight", "vidur", "out_of_range")
#: GEMMs under this many FLOPs are all launch path: their median time is the op's floor on that device
FLOOR_FLOPS = 1e6
#: GEMMs over this many FLOPs (compute-bound) or bytes (memory-bound) show the device's sustained throughput
BIG_FLOPS = 1e11
BIG_BYTES = 1e8
#: the device's whole-device spec figures among the GEMM features: to a tree, one value per device, so a branch per
#: training device (the kind of device and its compute capability, which picks the library's kernels, are not here)
WHOLE_DEVICE_FEATURES = ("log2_peak_tflops", "log2_ridge", "hw_sm_count", "hw_clock_mhz", "hw_memory_bandwidth_gbps",
                         "hw_l2_cache_mib", "hw_smem_per_sm_kib", "hw_peak_fp32_tflops")
#: where a kernel sits on its device's roofline: compute and memory time at peak, their ratio, work per SM
ROOFLINE_TERMS = ("log2_compute_us", "log2_memory_us", "log2_memory_over_compute", "log2_flops_per_sm",
                  "log2_bytes_per_sm")
#: the device per SM (NeuSight's normalisation: the SM is the wave model's unit)
PER_SM_SPEC = ("log2_sm_gflops", "log2_sm_bandwidth_gbps", "log2_sm_l2_kib")
#: the variants scored beside the default features: (default features dropped, terms added)
FEATURE_VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default (whole-device spec figures)": ((), ()),
    "+ roofline terms": ((), ROOFLINE_TERMS),
    "no device figures, + roofline terms": (WHOLE_DEVICE_FEATURES, ROOFLINE_TERMS),
    "device per SM instead, + roofline terms": (WHOLE_DEVICE_FEATURES, ROOFLINE_TERMS + PER_SM_SPEC),
    "+ operands over L2": ((), ("log2_weight_over_l2", "log2_bytes_over_l2")),
}


def held_out_predictions(frame: pd.DataFrame, split: str, max_train_rows: int | None) -> pd.DataFrame:
    """``frame``'s held-out rows, each fold's default-XGBoost prediction in ``predicted_us`` and its fold name."""
    frame = frame.reset_index(drop=True)
    parts = []
    for fold in select_folds(frame, split):
        p = evaluate_fold("xgboost", "gemm", frame, fold, {}, "efficiency", max_train_rows)
        parts.append(frame.iloc[fold.test].assign(predicted_us=p["predicted_us"].to_numpy(), fold=fold.name))
    out = pd.concat(parts)
    return out.assign(ape=ape(out["predicted_us"].to_numpy(), out["runtime_us"].to_numpy()))


def error_table(pred: pd.DataFrame, rows: str, columns: str) -> pd.DataFrame:
    """Mean APE % by two columns of ``pred``, with an ``all`` column and the row counts."""
    table = pred.pivot_table(index=rows, columns=columns, values="ape", aggfunc="mean", observed=True)
    table["all"] = pred.groupby(rows, observed=True)["ape"].mean()
    table["rows"] = pred.groupby(rows, observed=True).size().astype(int)
    return table


def device_profile(frame: pd.DataFrame) -> pd.DataFrame:
    """Per device: the op floor (median time of GEMMs under FLOOR_FLOPS), and the median share of the catalog's peak
    FLOP/s reached by compute-bound GEMMs over BIG_FLOPS and of its memory bandwidth by memory-bound GEMMs over
    BIG_BYTES (bound by the roofline at the catalog's figures)."""
    from stepcast.estimator.hardware_table import row_hardware

    w = work("gemm", frame)
    hw = row_hardware(frame["hardware"], frame["dtype"])
    seconds = frame["runtime_us"].to_numpy() * 1e-6
    compute_bound = w.flops / hw.peak_flops >= w.bytes / hw.memory_bandwidth
    parts = pd.DataFrame({"hardware": frame["hardware"].astype(str).to_numpy(), "runtime_us": seconds * 1e6,
                          "small": w.flops < FLOOR_FLOPS, "big": w.flops > BIG_FLOPS, "big_bytes": w.bytes > BIG_BYTES,
                          "compute_bound": compute_bound, "peak_share": w.flops / seconds / hw.peak_flops * 100,
                          "bandwidth_share": w.bytes / seconds / hw.memory_bandwidth * 100})
    rows = []
    for device, g in parts.groupby("hardware", sort=True):
        rows.append({"hardware": device, "floor_us": g.loc[g["small"], "runtime_us"].median(),
                     "big_compute_peak_share_pct": g.loc[g["big"] & g["compute_bound"], "peak_share"].median(),
                     "big_memory_bandwidth_share_pct": g.loc[g["big_bytes"] & ~g["compute_bound"],
                                                             "bandwidth_share"].median()})
    return pd.DataFrame(rows).set_index("hardware")


def transfer_bound(frame: pd.DataFrame, shape: list[str]) -> pd.DataFrame:
    """Mean APE % of predicting each device's time of a shape from another device's measured time of the same shape,
    mapped by one ratio per decade of the other device's time, each ratio the median fitted on the target's own
    rows (an oracle map); one column per source device, ``best`` the lowest."""
    times = frame.pivot_table(index=shape, columns="hardware", values="runtime_us", aggfunc="median",
                              observed=True).dropna()
    log = np.log(times)
    out = pd.DataFrame(index=times.columns, columns=times.columns, dtype=float)
    for target in times.columns:
        for source in times.columns:
            if source == target:
                continue
            decade = np.floor(np.log10(times[source])).to_numpy()
            ratio = (log[target] - log[source]).to_numpy()
            fitted = pd.Series(ratio).groupby(decade).transform("median").to_numpy()
            out.loc[target, source] = float(np.mean(np.abs(np.exp(ratio - fitted) - 1)) * 100)
    out["best"] = out.min(axis=1)
    out["shapes"] = len(times)
    return out


def level_oracle(pred: pd.DataFrame, series: list[str], parts: int = 5) -> float:
    """Mean APE % of ``pred`` after rescaling each series (rows sharing ``series`` columns), per ``parts``-quantile of
    its m, by the median ratio of measured to predicted time inside it."""
    rank = pred.groupby(series, observed=True)["m"].rank(pct=True, method="first")
    part = np.minimum((rank * parts).astype(int), parts - 1)
    ratio = pred["runtime_us"] / pred["predicted_us"]
    scale = ratio.groupby([pred[c] for c in series] + [part], observed=True).transform("median")
    return float(np.mean(ape(pred["predicted_us"].to_numpy() * scale.to_numpy(), pred["runtime_us"].to_numpy())))


def extra_terms(frame: pd.DataFrame, feats) -> dict[str, np.ndarray]:
    """The terms FEATURE_VARIANTS may add: ROOFLINE_TERMS, PER_SM_SPEC and the operands' bytes over L2."""
    w, hw = work("gemm", frame), feats.hardware
    sms, l2 = hw.spec["hw_sm_count"], hw.spec["hw_l2_cache_mib"] * 2.0 ** 20
    compute_s, memory_s = w.flops / hw.peak_flops, w.bytes / hw.memory_bandwidth
    m, n, k, batch = (frame[c].to_numpy(dtype=np.float64) for c in ("m", "n", "k", "batch"))
    element = w.bytes / ((m * k + n * k + m * n) * batch)
    return {"log2_compute_us": np.log2(compute_s * 1e6 + 1e-6), "log2_memory_us": np.log2(memory_s * 1e6 + 1e-6),
            "log2_memory_over_compute": np.log2(memory_s / compute_s), "log2_flops_per_sm": np.log2(w.flops / sms + 1),
            "log2_bytes_per_sm": np.log2(w.bytes / sms + 1), "log2_sm_gflops": np.log2(hw.peak_flops / sms / 1e9),
            "log2_sm_bandwidth_gbps": np.log2(hw.memory_bandwidth / sms / 1e9),
            "log2_sm_l2_kib": np.log2(l2 / sms / 1024), "log2_weight_over_l2": np.log2(n * k * element / l2),
            "log2_bytes_over_l2": np.log2(w.bytes / l2)}


def feature_variants(frame: pd.DataFrame, split: str, max_train_rows: int | None) -> pd.DataFrame:
    """Mean APE % of the default XGBoost on ``split``'s folds for each of FEATURE_VARIANTS (same folds, same training
    rows, same parameters): one row per variant, one column per fold and ``pooled``."""
    from stepcast.estimator.evaluate import subsample
    from stepcast.estimator.features import features
    from stepcast.estimator.xgb import XGBoostEstimator

    frame = frame.reset_index(drop=True)
    feats = features("gemm", frame)
    extra = extra_terms(frame, feats)
    target = np.log(frame["runtime_us"].to_numpy() / feats.baseline_us)
    folds = select_folds(frame, split)
    rows = []
    for label, (drop, added) in FEATURE_VARIANTS.items():
        keep = [i for i, name in enumerate(feats.names) if name not in drop]
        x = np.column_stack([feats.matrix[:, keep]] + [extra[a] for a in added]).astype(np.float32)
        errors, row = [], {"variant": label}
        for fold in folds:
            train = subsample(frame.iloc[fold.train], max_train_rows).index.to_numpy()
            model = XGBoostEstimator()
            model.feature_names = [feats.names[i] for i in keep] + list(added)
            model._fit_matrix(x[train], target[train])
            pred = np.exp(model._predict_matrix(x[fold.test]).astype(np.float64)) * feats.baseline_us[fold.test]
            e = ape(pred, frame["runtime_us"].to_numpy()[fold.test])
            row[fold.name] = float(e.mean())
            errors.append(e)
        rows.append(row | {"pooled": float(np.concatenate(errors).mean())})
    return pd.DataFrame(rows).set_index("variant")


def neighbour_bound(frame: pd.DataFrame, series: list[str]) -> float:
    """Mean APE % of predicting each row by the mean measured time of its two m-neighbours in its own series (one at
    the ends of a series)."""
    frame = frame.sort_values(series + ["m"])
    t = frame["runtime_us"].to_numpy(dtype=np.float64)
    same = np.ones(len(frame), dtype=bool)
    for column in series:
        values = frame[column].astype(str).to_numpy()
        same &= np.r_[False, values[1:] == values[:-1]]
    before = np.where(same, np.r_[np.nan, t[:-1]], np.nan)
    after = np.where(np.r_[same[1:], False], np.r_[t[1:], np.nan], np.nan)
    neighbours = np.nanmean(np.c_[before, after], axis=1)
    return float(np.nanmean(ape(neighbours, t)))


def show(frame: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    table.add_column(str(frame.index.name or ""))
    for column in frame.columns:
        table.add_column(str(column), justify="right")
    counts = {"rows", "shapes"}  # the columns that count rows; every other one is a figure
    for key, row in frame.iterrows():
        table.add_row(str(key), *[f"{v:,.0f}" if c in counts else f"{v:.1f}" for c, v in row.items()])
    console.print(table)


def show_variants(frame: pd.DataFrame, split: str, max_train_rows: int | None, title: str) -> pd.DataFrame:
    variants = feature_variants(frame, split, max_train_rows)
    show(variants, f"{title}, XGBoost feature variants on the same folds: mean APE %")
    return variants


def suite_neusight(data: pd.DataFrame, max_train_rows: int | None) -> dict[str, pd.DataFrame]:
    frame = data[(data["family"] == "gemm") & (data["source"] == "neusight") & (data["dtype"] == "fp32")]
    frame = frame.reset_index(drop=True)
    pred = held_out_predictions(frame, "leave_one_hardware_out", max_train_rows)
    pred = pred.assign(runtime=runtime_bucket(pred["runtime_us"].to_numpy()))
    by_bucket = error_table(pred, "fold", "runtime")[[b for b in BUCKET_LABELS if b in set(pred["runtime"])]
                                                     + ["all", "rows"]]
    show(by_bucket, f"NeuSight fp32 GEMMs, leave one GPU out (XGBoost): mean APE % by held-out GPU and runtime; "
                    f"pooled {pred['ape'].mean():.1f}")
    profile = device_profile(frame)
    show(profile, f"NeuSight GPUs from their own rows: op floor (median of GEMMs < {FLOOR_FLOPS:.0e} FLOPs), and "
                  f"the median share of catalog peak / bandwidth the GEMMs > {BIG_FLOPS:.0e} FLOPs reach")
    bound = transfer_bound(frame, ["gemm_op", "m", "n", "k", "batch"])
    show(bound, "Transfer bound: each GPU (rows) from another GPU's measured time of the same shape (columns), one "
                "ratio per decade fitted on the target's own rows: mean APE %")
    variants = show_variants(frame, "leave_one_hardware_out", max_train_rows, "NeuSight leave one GPU out")
    return {"neusight_errors": by_bucket, "neusight_profile": profile, "neusight_transfer_bound": bound,
            "neusight_feature_variants": variants}


def suite_vidur(data: pd.DataFrame, max_train_rows: int | None) -> dict[str, pd.DataFrame]:
    frame = data[(data["family"] == "gemm") & (data["source"] == "vidur") & (data["hardware"] == "h100-sxm")]
    pred = held_out_predictions(frame, "held_out_shapes", max_train_rows)
    pred = pred.assign(m_bucket=pd.cut(pred["m"], [0, 16, 64, 256, 1024, np.inf], right=True,
                                       labels=["m<=16", "17-64", "65-256", "257-1024", ">1024"]))
    by_m = error_table(pred, "fold", "m_bucket")
    show(by_m, f"Vidur H100 GEMMs, whole models held out (XGBoost): mean APE % by held-out model and m; pooled "
               f"{pred['ape'].mean():.1f}")
    by_layer = error_table(pred, "fold", "vidur_op")
    show(by_layer, "... by held-out model and layer")
    series = ["model", "vidur_op", "n", "k"]
    levels = [level_oracle(pred, series, parts) for parts in (1, 5, 20)]
    oracle = pd.DataFrame({"mean_ape": [pred["ape"].mean(), *levels, neighbour_bound(frame, series)]},
                          index=pd.Index(["XGBoost", "level oracle, whole series", "level oracle, fifths of m",
                                          "level oracle, twentieths of m", "neighbour bound"], name="predictions"))
    show(oracle, "Vidur H100, held-out series (one weight each) rescaled to their measured level, and the data's own "
                 "roughness along m: mean APE %")
    variants = show_variants(frame, "held_out_shapes", max_train_rows, "Vidur H100 whole models held out")
    return {"vidur_errors_by_m": by_m, "vidur_errors_by_layer": by_layer, "vidur_bounds": oracle,
            "vidur_feature_variants": variants}


def suite_out_of_range(data: pd.DataFrame, max_train_rows: int | None) -> dict[str, pd.DataFrame]:
    variants = show_variants(data[data["family"] == "gemm"], "out_of_range", max_train_rows,
                             "All GEMMs, the largest tenth held out")
    return {"out_of_range_feature_variants": variants}


RUNNERS = {"neusight": suite_neusight, "vidur": suite_vidur, "out_of_range": suite_out_of_range}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimator.diagnose",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated subset of {','.join(SUITES)}")
    parser.add_argument("--gemm-train-rows", type=int, default=40000, help="training rows per fold")
    parser.add_argument("--json", type=Path, help="also write every table to this JSON file")
    args = parser.parse_args(argv)
    suites = chosen_suites(parser, args.suites, SUITES)
    from stepcast.estimator.data import load_measurements

    data = load_measurements(families=["gemm"])
    data = data[np.isfinite(data["runtime_us"]) & (data["runtime_us"] > 0)]
    tables: dict[str, pd.DataFrame] = {}
    for suite in suites:
        tables |= RUNNERS[suite](data, args.gemm_train_rows)
    if args.json:
        from stepcast.estimator.bundle import write_json_atomic

        write_json_atomic(args.json, {name: t.reset_index().to_dict(orient="records") for name, t in tables.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
