"""Model features per kernel family, vectorised over whole columns (numpy, no per-row Python).

Every family gets: log2 of its shape columns, dtype width, FLOPs, bytes moved, arithmetic intensity, the pure
roofline time from the catalog, and the device's spec figures (so a device with no measurements is still described,
by its yaml). GEMMs add wave quantisation: for each plausible output tile, the tile count and the quantisation
overhead (the tile slots of all waves over the SM count, over the useful output elements: 1 when the tiles divide the
output and fill the last wave), plus the smallest overhead over the tiles (what the best tile choice would pay).
Time steps up where the tiles cross a multiple of the SM count, and these features put the steps of every (n, k) at
the same values, which is what lets a model place them for shapes it has not seen. Collectives add bytes, ranks,
intra/inter node and the link bandwidth. With ``kernel_config``, GEMMs add the configuration of the kernel that
runs (``estimator.kernel_config``: tile, stages, split-K, cluster, architecture path, grid waves, alignment).

``baseline_us`` is the analytical estimate (``RooflineEstimator`` with its default parameters); the ``efficiency``
target of the learned models is log(runtime / baseline).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stepcast.estimator.analytical import DEFAULT_ROOFLINE, link_bandwidth
from stepcast.estimator.frames import Kernels, by_code, factorize, flag, num, text
from stepcast.estimator.hardware_table import RowHardware, row_hardware
from stepcast.estimator.kernel_config import kernel_config_features
from stepcast.estimator.workload import (
    COLLECTIVE_BUS_FACTOR, ELEMENTWISE_OPS, NORM_OPS, OPTIMIZER_OPS, Work, element_bytes, work,
)
from stepcast.profiling.families import DTYPES, FAMILIES
from stepcast.errors import InputError

#: (rows, cols) of output tiles cuBLAS/CUTLASS commonly pick; the model learns which matters where.
GEMM_TILES: tuple[tuple[int, int], ...] = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128),
                                          (64, 256), (256, 64))

#: categorical columns encoded as integer codes over a fixed vocabulary (unknown values -> -1)
VOCABULARY: dict[str, tuple[str, ...]] = {
    "dtype": DTYPES,
    "pass": ("fwd", "bwd"),
    "op:elementwise": tuple(ELEMENTWISE_OPS),
    "op:norm": tuple(NORM_OPS),
    "op:collective": tuple(COLLECTIVE_BUS_FACTOR),
    "op:optimizer": tuple(f"{o}_{v}" for o in OPTIMIZER_OPS for v in ("foreach", "fused", "single")),
}

#: timing method of each source (the ``timing`` feature): the same kernel timed alone with cold weights, inside a
#: model's layer, in a loop with warm caches or out of a profiler trace differs by a few to tens of percent at small
#: shapes. The profiler and aiconfigurator both time the kernel alone with its weight read from HBM, which is how a
#: training step meets it (estimator/importers/aiconfigurator_gemm.py), so they share one method, and rows without
#: a source (what the emulator and ``stepcast predict`` ask) are predicted as that method. Sources not listed here
#: (a new importer) encode as -1 until they are.
TIMING_METHODS: dict[str, str] = {"profiler": "kernel_cold_l2", "aiconfigurator": "kernel_cold_l2", "vidur": "vidur",
                                  "neusight": "neusight", "kineto": "trace", "llmcompass": "llmcompass"}
TRAINING_STEP_METHOD = "kernel_cold_l2"
VOCABULARY["timing"] = tuple(dict.fromkeys(TIMING_METHODS.values()))

#: shape features (log2 of the family's numeric key columns) checked for out-of-range
SHAPE_COLUMNS: dict[str, tuple[str, ...]] = {
    family: tuple(c for c in cols if c not in {"op", "pass", "causal"}) for family, cols in FAMILIES.items()
}


@dataclass
class FeatureFrame:
    """Features of a single-family frame: a float32 matrix with named columns, plus the analytical baseline."""

    names: list[str]
    matrix: np.ndarray  # (rows, features) float32
    baseline_us: np.ndarray  # analytical estimate, microseconds
    hardware: RowHardware

    def column(self, name: str) -> np.ndarray:
        return self.matrix[:, self.names.index(name)]


def encode(values: pd.Series | np.ndarray, vocabulary: tuple[str, ...]) -> np.ndarray:
    codes, uniques = factorize(values)
    lookup = {v: i for i, v in enumerate(vocabulary)}
    return np.array([lookup.get(str(u), -1) for u in uniques], dtype=np.float64)[codes]


def _log2(x: np.ndarray) -> np.ndarray:
    """log2 in float32 (what the feature matrix holds; three times faster than float64 over a million rows)."""
    return np.log2(np.maximum(x, 1e-30, dtype=np.float32))


def _num(frame: Kernels, name: str) -> np.ndarray:
    return num(frame, name)


_TILE_ROWS = np.array([tm for tm, _ in GEMM_TILES], dtype=np.float32)[:, None]
_TILE_COLS = np.array([tn for _, tn in GEMM_TILES], dtype=np.float32)[:, None]
_LOG2_TILE_AREA = np.log2(_TILE_ROWS * _TILE_COLS)


def gemm_waves(m: np.ndarray, n: np.ndarray, batch: np.ndarray, sms: np.ndarray) -> dict[str, np.ndarray]:
    """Per tile: log2 tile count and log2 quantisation overhead; and the smallest overhead over the tiles.

    All tiles at once, as (tiles x rows) float32 arrays: a tenth of the numpy calls of a loop over tiles (what a
    single-kernel call pays for) and half the memory traffic of float64 (what a million-kernel batch pays for). Tile
    counts are exact in float32 up to 2**24 tiles, and beyond that a rounding of the wave count moves the overhead by
    less than 1e-7."""
    m, n, batch, sms = (np.asarray(a, dtype=np.float32) for a in (m, n, batch, sms))
    tiles = np.ceil(m / _TILE_ROWS) * np.ceil(n / _TILE_COLS)
    tiles *= batch
    # log2(slots / useful) = log2(waves) + log2(tm * tn) + log2(sms) - log2(m n batch)
    overhead = _log2(np.ceil(tiles / sms))
    overhead += _LOG2_TILE_AREA
    overhead += _log2(sms) - _log2(m * n * batch)
    log2_tiles = _log2(tiles)
    out: dict[str, np.ndarray] = {}
    for i, (tm, tn) in enumerate(GEMM_TILES):
        out[f"log2_tiles_{tm}x{tn}"] = log2_tiles[i]
        out[f"log2_overhead_{tm}x{tn}"] = overhead[i]
    out["log2_overhead_min"] = overhead.min(axis=0)
    return out


def family_features(family: str, frame: Kernels, w: Work, hw: RowHardware,
                    kernel_config: bool = False) -> dict[str, np.ndarray]:
    f: dict[str, np.ndarray] = {}
    sms = hw.spec["hw_sm_count"]
    if family == "gemm":
        m, n, k, b = (_num(frame, c) for c in ("m", "n", "k", "batch"))
        f |= {"log2_m": _log2(m), "log2_n": _log2(n), "log2_k": _log2(k), "log2_batch": _log2(b)}
        f |= gemm_waves(m, n, b, sms)
        if kernel_config:
            f |= kernel_config_features(frame, m, n, k, b, sms, element_bytes(frame),
                                        hw.spec["hw_compute_capability"])
    elif family == "attention":
        b, hq, hkv, sq, skv, d = (_num(frame, c)
                                  for c in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"))
        f |= {"log2_batch": _log2(b), "log2_heads_q": _log2(hq), "log2_heads_kv": _log2(hkv), "log2_seq_q": _log2(sq),
              "log2_seq_kv": _log2(skv), "head_dim": d, "causal": flag(frame, "causal").astype(float),
              "pass": encode(frame["pass"], VOCABULARY["pass"])}
        tiles = np.ceil(sq / 128) * b * hq  # FlashAttention: one block per 128 query rows per head
        waves = np.ceil(tiles / sms)
        f |= {"log2_tiles": _log2(tiles), "waves": waves, "wave_eff": tiles / (waves * sms)}
    elif family == "elementwise":
        numel = _num(frame, "numel")
        f |= {"log2_numel": _log2(numel), "op": encode(frame["op"], VOCABULARY["op:elementwise"]),
              "log2_numel_per_sm": _log2(numel / sms)}
    elif family == "norm":
        rows, cols = _num(frame, "rows"), _num(frame, "cols")
        f |= {"log2_rows": _log2(rows), "log2_cols": _log2(cols), "op": encode(frame["op"], VOCABULARY["op:norm"]),
              "pass": encode(frame["pass"], VOCABULARY["pass"]), "log2_rows_per_sm": _log2(rows / sms)}
    elif family == "collective":
        size, ranks, rpn = (_num(frame, c) for c in ("bytes", "ranks", "ranks_per_node"))
        link = link_bandwidth(ranks, rpn, hw, text(frame, "op"))
        f |= {"log2_bytes": _log2(size), "ranks": ranks, "ranks_per_node": rpn,
              "inter_node": (ranks > np.maximum(rpn, 1)).astype(float),
              "op": encode(frame["op"], VOCABULARY["op:collective"]),
              "log2_link_gbps": _log2(link / 1e9), "log2_wire_bytes": _log2(w.wire_bytes + 1.0),
              "latency_steps": w.latency_steps, "log2_wire_us": _log2(w.wire_bytes / link * 1e6 + 1e-3)}
    elif family == "optimizer":
        params = _num(frame, "params")
        op = text(frame, "op")
        f |= {"log2_params": _log2(params), "op": encode(op, VOCABULARY["op:optimizer"]),
              "fused": np.char.endswith(op.astype(str), "fused").astype(float)}
    else:
        raise InputError(f"unknown family '{family}': expected one of {', '.join(FAMILIES)}")
    return f


#: string key columns turned into categoricals once per call (each is read by several helpers; factorising a million
#: strings costs tens of milliseconds every time, a categorical's codes nothing)
CATEGORICAL_KEYS = ("hardware", "dtype", "op", "pass")


def categorical_keys(frame: Kernels) -> Kernels:
    """``frame`` with its string key columns as categoricals (a shallow copy; the frame itself if none is left)."""
    if not isinstance(frame, pd.DataFrame):
        return frame
    convert = {c: pd.Categorical(frame[c]) for c in CATEGORICAL_KEYS
               if c in frame.columns and not isinstance(frame[c].dtype, pd.CategoricalDtype)}
    return frame.assign(**convert) if convert else frame


def timing_codes(frame: Kernels) -> np.ndarray:
    """The ``timing`` feature: each row's source's timing method (TIMING_METHODS), the training-step method where a
    row has no source."""
    lookup = {v: i for i, v in enumerate(VOCABULARY["timing"])}
    standard = lookup[TRAINING_STEP_METHOD]
    if not isinstance(frame, pd.DataFrame) or "source" not in frame.columns:
        return np.full(len(frame), standard, dtype=np.float64)
    codes, uniques = factorize(frame["source"])
    table = np.array([standard if not isinstance(u, str) or not u else lookup.get(TIMING_METHODS.get(u, ""), -1)
                      for u in uniques] + [standard], dtype=np.float64)
    return by_code(table, codes)


def features(family: str, frame: Kernels, kernel_config: bool = False, timing: bool = False) -> FeatureFrame:
    """Features of every row of a frame holding only ``family``'s rows. ``kernel_config``: GEMMs also get the
    kernel-configuration features of their labelled kernel (``estimator.kernel_config``); ``timing``: the timing
    method of the row's source (``TIMING_METHODS``)."""
    frame = categorical_keys(frame)
    w = work(family, frame)
    hw = row_hardware(frame["hardware"], frame["dtype"])
    roof_s = np.maximum(w.flops / hw.peak_flops, w.bytes / hw.memory_bandwidth)
    cols: dict[str, np.ndarray] = {
        "dtype": encode(frame["dtype"], VOCABULARY["dtype"]),
        "log2_flops": _log2(w.flops + 1.0),
        "log2_bytes": _log2(w.bytes + 1.0),
        "log2_intensity": _log2((w.flops + 1.0) / (w.bytes + 1.0)),
        "log2_roofline_us": _log2(roof_s * 1e6 + 1e-6),
        "compute_bound": (w.flops / hw.peak_flops > w.bytes / hw.memory_bandwidth).astype(float),
        "log2_peak_tflops": _log2(hw.peak_flops / 1e12),
        "log2_ridge": _log2(hw.peak_flops / hw.memory_bandwidth),
    }
    cols |= family_features(family, frame, w, hw, kernel_config)
    if timing:
        cols["timing"] = timing_codes(frame)
    cols |= hw.spec
    names = list(cols)
    matrix = np.empty((len(frame), len(names)), dtype=np.float32, order="F")  # column writes stay contiguous
    for i, name in enumerate(names):
        matrix[:, i] = cols[name]
    baseline = DEFAULT_ROOFLINE.family_us(family, frame, w, hw)
    return FeatureFrame(names, matrix, baseline, hw)

