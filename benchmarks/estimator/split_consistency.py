"""Does an estimator charge a GEMM split along m into chunks what it charges the whole? Async tensor parallelism,
micro-batching and chunked pipelines run the same FLOPs as several smaller GEMMs; once each chunk still fills every
SM for many waves, a GPU runs them at the rate of the whole, so the sum of the chunks' predicted times should not
fall below the whole's. Where it does, a chunked recipe is predicted faster than it can be.

    python -m benchmarks.estimator.split_consistency [--hardware h100-sxm,h100-sxm-96gb-500w,...] [--model NAME]
                                                    [--json FILE]

Prints, per device and split, the ratio sum(chunks) / whole over the large GEMMs of Llama 3 8B and 70B blocks
(tensor parallel 1 and 8, 65,536 to 131,072 tokens: each chunk keeps at least 4,096 rows), with the worst shape,
and beside it the same ratio over the measured GEMMs of that device (aiconfigurator's tables, m >= 32,768, chunks of
at least 4,096 rows, where both sizes were measured). Measured isolated kernels are not perfectly additive either:
wave quantisation and cuBLAS's kernel choice make about a third of large shapes run faster in chunks, so a single
shape below 1 is expected; a device whose median falls below 1 by more than the tolerance is flagged.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from stepcast.errors import cli_main

#: (model, hidden, ffn, heads, kv heads) of the Llama 3 blocks the shapes come from
BLOCKS = (("8b", 4096, 14336, 32, 8), ("70b", 8192, 28672, 64, 8))
TENSOR_PARALLEL = (1, 8)
TOKENS = (65536, 131072)
SPLITS = (2, 4, 8, 16)
DEVICES = ("h100-sxm", "h100-sxm-96gb-500w", "h200", "b200", "a100-sxm-80gb")
#: a sum of chunks below this share of the whole is reported as charging chunks less than the whole
TOLERANCE = 0.02


@dataclass(frozen=True)
class Split:
    """One device's ratios for one split: the median and the lowest sum(chunks) / whole over the shapes."""
    hardware: str
    dtype: str
    parts: int
    median: float
    lowest: float
    lowest_shape: str
    shapes: int


def block_gemms(hidden: int, ffn: int, heads: int, kv_heads: int, tp: int) -> list[tuple[int, int]]:
    """(n, k) of a Llama block's forward GEMMs on one tensor-parallel rank: fused QKV, output projection, fused
    gate and up projection, down projection."""
    head_dim = hidden // heads
    qkv = (heads + 2 * kv_heads) * head_dim // tp
    return [(qkv, hidden), (hidden, hidden // tp), (2 * ffn // tp, hidden), (hidden, ffn // tp)]


def shapes() -> list[tuple[str, int, int, int]]:
    """(label, m, n, k) of every GEMM checked."""
    out = []
    for model, hidden, ffn, heads, kv in BLOCKS:
        for tp in TENSOR_PARALLEL:
            for m in TOKENS:
                for n, k in block_gemms(hidden, ffn, heads, kv, tp):
                    out.append((f"{model} tp{tp} m{m} n{n} k{k}", m, n, k))
    return out


def predicted_ratios(estimator, hardware: str, dtype: str, pairs: pd.DataFrame) -> pd.Series:
    """Per row of ``pairs`` (columns parts, m, n, k), the predicted sum of the ``parts`` chunks' times (m / parts
    rows each) over the whole GEMM's; ``estimator``: anything with ``predict_frame``. One prediction call."""
    whole = pd.DataFrame({"family": "gemm", "hardware": hardware, "dtype": dtype, "m": pairs["m"].to_numpy(),
                          "n": pairs["n"].to_numpy(), "k": pairs["k"].to_numpy(), "batch": 1})
    chunk = whole.assign(m=pairs["m"].to_numpy() // pairs["parts"].to_numpy())
    times = estimator.predict_frame(pd.concat([whole, chunk], ignore_index=True))["predicted_us"].to_numpy()
    return pd.Series(times[len(pairs):] * pairs["parts"].to_numpy() / times[:len(pairs)], index=pairs.index)


def split_ratios(estimator, hardware: str, dtype: str = "bf16", splits: Sequence[int] = SPLITS) -> list[Split]:
    """For each split, sum(chunk times) / whole time over :func:`shapes` on ``hardware``."""
    pairs = pd.DataFrame([(label, parts, m, n, k) for parts in splits for label, m, n, k in shapes()],
                         columns=["label", "parts", "m", "n", "k"])
    pairs["ratio"] = predicted_ratios(estimator, hardware, dtype, pairs)
    out = []
    for parts, group in pairs.groupby("parts", sort=True):
        ratios = group.set_index("label")["ratio"]
        out.append(Split(hardware, dtype, int(parts), round(float(ratios.median()), 4),
                         round(float(ratios.min()), 4), str(ratios.idxmin()), len(ratios)))
    return out


def measured_pairs(hardware: str, dtype: str, frame: pd.DataFrame, splits: Sequence[int] = SPLITS) -> pd.DataFrame:
    """Every measured GEMM of ``hardware`` with m >= 32,768 whose chunk (m / parts, at least 4,096 rows) was measured
    too: columns parts, m, n, k and ``measured`` (sum of the chunks' times / the whole's)."""
    rows = frame[(frame["hardware"] == hardware) & (frame["dtype"] == dtype) & (frame["batch"] == 1)]
    times = rows.groupby(["m", "n", "k"])["runtime_us"].median()
    pairs = [(parts, m, n, k, times[(m // parts, n, k)] * parts / whole)
             for parts in splits for (m, n, k), whole in times.items()
             if m >= 32768 and m % parts == 0 and m // parts >= 4096 and (m // parts, n, k) in times.index]
    return pd.DataFrame(pairs, columns=["parts", "m", "n", "k", "measured"])


def measured_medians(hardware: str, frame: pd.DataFrame, dtype: str = "bf16", splits: Sequence[int] = SPLITS,
                     estimator=None) -> dict[int, dict[str, float]]:
    """Per split, the median of sum(chunks) / whole over :func:`measured_pairs` of ``frame`` (``measured``) and,
    given an ``estimator``, its prediction of the same ratio on the same shapes (``predicted``); empty for a device
    with no such measurements."""
    pairs = measured_pairs(hardware, dtype, frame, splits)
    if pairs.empty:
        return {}
    if estimator is not None:
        pairs["predicted"] = predicted_ratios(estimator, hardware, dtype, pairs)
    medians = pairs.groupby("parts").median(numeric_only=True)
    return {int(parts): {name: round(float(medians.loc[parts, name]), 4)
                         for name in ("measured", "predicted") if name in medians}
            for parts in medians.index}


def flagged(results: Sequence[Split], tolerance: float = TOLERANCE) -> list[Split]:
    """The splits whose median shape charges its chunks less than its whole by more than ``tolerance``."""
    return [r for r in results if r.median < 1 - tolerance]


def render(results: Sequence[Split], measured: dict[str, dict[int, dict[str, float]]]) -> str:
    """One line per (device, split): the median over the Llama shapes, then over the measured shapes the measured
    and the predicted median, then the lowest Llama shape."""
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    lines = [f"{'device':22s} {'dtype':6s} {'split':>5s} {'llama':>7s} {'meas.':>7s} {'pred.':>7s} {'lowest':>7s}  "
             "lowest at   (llama: predicted median over Llama 3 GEMMs; meas./pred.: over the measured GEMMs)"]
    for r in results:
        seen = measured.get(r.hardware, {}).get(r.parts, {})
        mark = "  <- chunks charged less" if flagged([r]) else ""
        lines.append(f"{r.hardware:22s} {r.dtype:6s} {r.parts:5d} {r.median:7.3f} {cell(seen.get('measured')):>7s} "
                     f"{cell(seen.get('predicted')):>7s} {r.lowest:7.3f}  {r.lowest_shape}{mark}")
    return "\n".join(lines)


@cli_main
def main(argv: list[str] | None = None) -> int:
    from stepcast import estimator as estimators
    from stepcast.profiling.hardware import lookup

    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimator.split_consistency",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hardware", default=",".join(DEVICES), help="catalog ids, comma-separated")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--model", default=None, help="estimator.load source (default: the shipped bundle)")
    parser.add_argument("--json", type=Path, default=None, help="also write the ratios here")
    args = parser.parse_args(argv)
    devices = [lookup(h.strip()).id for h in args.hardware.split(",") if h.strip()]
    model = estimators.load(args.model)
    results = [r for hardware in devices for r in split_ratios(model, hardware, args.dtype)]
    from stepcast.estimator.data import load_measurements

    frame = load_measurements(families=["gemm"], sources=["aiconfigurator"])
    measured = {hardware: measured_medians(hardware, frame, args.dtype, estimator=model) for hardware in devices}
    print(render(results, measured))
    if args.json:
        from stepcast.profiling.atomic import write_json_atomic

        write_json_atomic(args.json, {"predicted": [asdict(r) for r in results], "measured": measured})
    bad = flagged(results)
    print(f"{len(bad)} of {len(results)} (device, split) pairs: the median shape's chunks charged more than "
          f"{TOLERANCE:.0%} less than its whole")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
