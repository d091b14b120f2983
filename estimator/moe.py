"""A fused mixture-of-experts layer's forward time on one GPU, from its shape, its routing and the catalog spec.

    time = max(bound, expected x 2^c),    roofline = max(FLOPs / peak FLOP/s,  bytes / memory bandwidth)

- **Routing** (``estimator.moe_routing``): the routes the GPU runs, its busiest expert and its experts with work,
  as expected (the correction's facts) and as the least a routing with that skew can give (what the bound counts,
  so that it holds whatever the draw).
- **Work**: the two grouped GEMMs of its experts with work, each a batch of GEMMs of the mean m
  (``estimator.workload.gemm``): gate+up [m, hidden] x [hidden, 2 inter / tp] (inter / tp for a non-gated
  model, :func:`is_gated`) and down [m, inter / tp] x [inter / tp, hidden]. Their bytes count every such expert's
  weights once (a small-m layer is a weight read) and their permuted inputs and outputs, plus the router's logits
  and the combine in bf16 (:func:`routing_bytes`). Peak FLOP/s for the row's dtype, bandwidth and L2 size come
  from the catalog (``estimator.hardware_table``), so the bound is the layer's roofline on any catalog GPU;
  bytes that fit in L2 are charged at a bound on L2's bandwidth from the spec sheet (:func:`l2_bandwidth`).
- **Correction** c: log2 of measured over ``expected`` (the roofline of the expected loads' work), learned by
  gradient-boosted trees (absolute log error) on the seen GPUs from dimensionless facts (backend, dtype, routing,
  tiles and waves, compute share of the roofline) and the GPU's catalog figures (:func:`features`). The
  prediction is never below ``bound``, the roofline of the least work the routing can give (equal to ``expected``
  for a balanced routing), so it is never faster than the roofline of its work. The device enters through the
  roofline and those spec figures only, which is what lets it transfer to an unseen GPU
  (``python -m benchmarks.emulate.moe``: each GPU held out).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import xgboost as xgb

from stepcast.estimator.analytical import roofline_seconds
from stepcast.estimator.hardware_table import RowHardware, row_hardware
from stepcast.estimator.moe_routing import ExpertLoads, expert_loads, least_loads
from stepcast.estimator.workload import Work, gemm

#: the columns a fused-MoE row needs (``estimator.importers.aiconfigurator_moe``)
KEYS = ("hardware", "dtype", "backend", "tokens", "hidden", "inter", "topk", "experts", "tp", "ep", "skew")
#: activations stay bf16 around the GEMMs (routing, permute, unpermute), whatever the weights' dtype
ACTIVATION_BYTES = 2.0
#: the grouped GEMM's tile along m: how a group's rows are padded (CUTLASS / Triton MoE kernels' common 128 x 128)
TILE_M = 128.0
#: L2 bytes an SM can read per clock, at most, on the catalog's GPUs (the A100 whitepaper's 5,120 bytes a clock over
#: 108 SMs is 47): with the SM count and boost clock, an upper bound on a GPU's L2 bandwidth (:func:`l2_bandwidth`)
L2_BYTES_PER_SM_CLOCK = 64.0


@dataclass(frozen=True)
class LayerWork:
    """A layer's work on its GPU and the pieces of its bound (arrays of the frame's length)."""

    loads: ExpertLoads  # the routing's expected loads (estimator.moe_routing.expert_loads): the correction's facts
    least: ExpertLoads  # the least any such routing costs (least_loads): what the work and the bound count
    work: Work
    compute_us: np.ndarray  # FLOPs at the dtype's peak
    memory_us: np.ndarray  # the bytes at DRAM bandwidth, those L2 holds at its bandwidth (l2_bandwidth)
    bound_us: np.ndarray  # their roofline (estimator.analytical.roofline_seconds): no prediction is below it
    expected_us: np.ndarray  # the same roofline with the expected loads: what the correction multiplies


def is_gated(frame: pd.DataFrame) -> np.ndarray:
    """A gated (SwiGLU) layer's first GEMM is 2 x inter wide: the ``gated`` column where the rows carry it
    (``estimator.importers.aiconfigurator_moe.gated``), else all but backends named ``nongated``."""
    if "gated" in frame.columns:
        return frame["gated"].to_numpy(dtype=bool)
    return ~frame["backend"].astype(str).str.contains("nongated").to_numpy()


def routing_bytes(tokens: np.ndarray, experts: np.ndarray, local_routes: np.ndarray,
                  hidden: np.ndarray) -> np.ndarray:
    """Bytes of the work around the GEMMs that the GEMMs' own bytes do not count (their inputs and outputs are
    the permuted tokens and the experts' outputs): the router's logits (fp32) read for top-k, and the combine, which
    reads every route's output and writes the combined tokens."""
    return 4.0 * tokens * experts + ACTIVATION_BYTES * hidden * (tokens + local_routes)


def _gemm_frame(m: np.ndarray, n: np.ndarray, k: np.ndarray, batch: np.ndarray, dtype: pd.Series) -> pd.DataFrame:
    return pd.DataFrame({"m": m, "n": n, "k": k, "batch": batch, "dtype": dtype.to_numpy()})


def layer_work(frame: pd.DataFrame) -> LayerWork:
    """The routing, work and roofline of every row (columns :data:`KEYS`)."""
    num = {c: frame[c].to_numpy(dtype=np.float64) for c in KEYS[3:]}
    shape = (num["tokens"], num["experts"], num["topk"], num["ep"], num["skew"])
    loads = expert_loads(*shape)
    least = least_loads(*shape, loads)
    hw = row_hardware(frame["hardware"], frame["dtype"])
    work, compute_us, memory_us, bound_us = _roofline(frame, num, least, hw)
    expected_us = _roofline(frame, num, loads, hw)[3]
    return LayerWork(loads, least, work, compute_us, memory_us, bound_us, expected_us)


def _roofline(frame: pd.DataFrame, num: dict[str, np.ndarray], loads: ExpertLoads,
              hw: RowHardware) -> tuple[Work, np.ndarray, np.ndarray, np.ndarray]:
    """(work, compute us, memory us, roofline us) of the layer with these expert loads."""
    inter = num["inter"] / num["tp"]
    up = np.where(is_gated(frame), 2.0, 1.0) * inter
    m, groups = loads.mean_expert, np.maximum(loads.active_experts, 1.0)
    first = gemm(_gemm_frame(m, up, num["hidden"], groups, frame["dtype"]))
    second = gemm(_gemm_frame(m, num["hidden"], inter, groups, frame["dtype"]))
    moved = first.bytes + second.bytes + routing_bytes(num["tokens"], num["experts"], loads.local_routes,
                                                       num["hidden"])
    zeros = np.zeros(len(frame))
    work = Work(first.flops + second.flops, moved, zeros, zeros)
    resident = np.minimum(work.bytes, l2_bytes(hw))
    dram = Work(work.flops, work.bytes - resident * (1.0 - hw.memory_bandwidth / l2_bandwidth(hw)), zeros, zeros)
    compute_us = work.flops / hw.peak_flops * 1e6
    memory_us = dram.bytes / hw.memory_bandwidth * 1e6
    return work, compute_us, memory_us, roofline_seconds(dram, hw) * 1e6


def l2_bytes(hw: RowHardware) -> np.ndarray:
    """Bytes of each row's L2 cache (catalog): a layer timed back to back under CUDA graphs finds that much of its
    weights still in L2 (L40S, 96 MiB: small layers run at 3x its DRAM roofline), so only the rest must come from
    DRAM; the bound charges the resident bytes at :func:`l2_bandwidth`."""
    return hw.spec["hw_l2_cache_mib"] * 2.0 ** 20


def l2_bandwidth(hw: RowHardware) -> np.ndarray:
    """Bytes/s an upper bound on each row's L2 read bandwidth: SM count x boost clock x
    :data:`L2_BYTES_PER_SM_CLOCK` (catalog). Its ratio to DRAM bandwidth is what sets a GPU apart where the weights
    stay in L2: about 5 on the H100 and A100, 2.4 on the B200, 27 on the L40S, whose GDDR6 is the slowest and whose
    L2 the largest (a fixed 8x of DRAM made its held-out layers 40 % off, 29 % with this:
    ``python -m benchmarks.emulate.moe``)."""
    return hw.spec["hw_sm_count"] * hw.spec["hw_clock_mhz"] * 1e6 * L2_BYTES_PER_SM_CLOCK


def features(frame: pd.DataFrame, lw: LayerWork, backends: tuple[str, ...]) -> pd.DataFrame:
    """The facts of each row the correction learns from: dimensionless shape and routing facts, and the device's
    catalog figures per SM (its ridge point, bandwidth and peak per SM, L2, SM count and generation), which set
    an unseen GPU among the seen ones (leave-one-GPU-out H100 bf16 22.4 -> 20.8 %, seen shapes 1 point better with
    them; ``python -m benchmarks.emulate.moe``). ``backends``: the training vocabulary (others encode as -1)."""
    loads = lw.loads
    hw = row_hardware(frame["hardware"], frame["dtype"])
    num = {c: frame[c].to_numpy(dtype=np.float64) for c in KEYS[3:]}
    codes = {b: i for i, b in enumerate(backends)}
    padded = np.ceil(loads.mean_expert / TILE_M) * TILE_M * loads.active_experts
    inter = num["inter"] / num["tp"]
    up = np.where(is_gated(frame), 2.0, 1.0) * inter
    sms = hw.spec["hw_sm_count"]
    tiles = np.maximum(loads.active_experts, 1.0) * np.ceil(loads.mean_expert / TILE_M) \
        * (np.ceil(up / TILE_M) + np.ceil(num["hidden"] / TILE_M))
    waves = np.ceil(tiles / sms)
    return pd.DataFrame({
        "backend": frame["backend"].astype(str).map(codes).fillna(-1).to_numpy(),
        "fp8": (frame["dtype"].astype(str) != "bf16").to_numpy(dtype=np.float64),
        "gated": is_gated(frame).astype(np.float64),
        "skew": num["skew"],
        "log2_tokens": np.log2(num["tokens"]),
        "log2_routes": np.log2(np.maximum(loads.local_routes, 1.0)),
        "log2_mean_m": np.log2(np.maximum(loads.mean_expert, 1e-3)),
        "log2_max_m": np.log2(np.maximum(loads.max_expert, 1.0)),
        "max_over_mean": loads.max_expert / np.maximum(loads.mean_expert, 1e-3),
        "log2_active": np.log2(np.maximum(loads.active_experts, 1.0)),
        "log2_expected_over_least_active": np.log2(np.maximum(loads.active_experts, 1.0) / lw.least.active_experts),
        "log2_expected_over_least_routes": np.log2(np.maximum(loads.local_routes, 1.0)
                                                   / np.maximum(lw.least.local_routes, 1.0)),
        "log2_local_experts": np.log2(num["experts"] / num["ep"]),
        "log2_hidden": np.log2(num["hidden"]),
        "log2_inter": np.log2(num["inter"] / num["tp"]),
        "topk": num["topk"],
        "tile_fill": loads.local_routes / np.maximum(padded, 1.0),
        "log2_waves": np.log2(waves),
        "last_wave_fill": tiles / (waves * sms),
        "log2_max_expert_tiles_per_sm": np.log2(np.ceil(loads.max_expert / TILE_M) * np.ceil(up / TILE_M) / sms),
        "log2_compute_over_memory": np.log2(lw.compute_us / np.maximum(lw.memory_us, 1e-6)),
        "log2_bytes_over_l2": np.log2(lw.work.bytes / l2_bytes(hw)),
        "log2_dram_us": np.log2(np.maximum(lw.memory_us, 1e-6)),
        "log2_bound_us": np.log2(lw.expected_us),
        "log2_ridge": np.log2(hw.peak_flops / hw.memory_bandwidth),
        "generation": np.floor(hw.spec["hw_compute_capability"] / 10.0),
        "log2_bandwidth_per_sm": np.log2(hw.memory_bandwidth / sms),
        "log2_peak_per_sm": np.log2(hw.peak_flops / sms),
        "log2_l2_mib": np.log2(hw.spec["hw_l2_cache_mib"]),
        "log2_l2_over_dram": np.log2(l2_bandwidth(hw) / hw.memory_bandwidth),
        "sms": sms,
    })


class MoEEstimator:
    """The bounded fused-MoE model: roofline of the layer's expected work times a learned log2 correction, never
    below the roofline of its least work. The default size (200 trees of depth 8) keeps the benchmark's 30 fits
    within ten minutes on two cores; more trees and rows help where the GPU is seen: 600 of depth 12 took the
    seen-shape split at 12,000 rows per (GPU, dtype) from 10-15 to 8-13 % and leave-B200-out from 13.3 to 11.6 %
    (bf16), and on every row to 5.9-8.5 % (``python -m benchmarks.emulate.moe`` options)."""

    def __init__(self, n_estimators: int = 200, max_depth: int = 8, learning_rate: float = 0.15,
                 seed: int = 0, n_jobs: int = 2, objective: str = "reg:absoluteerror") -> None:
        self.params = {"n_estimators": n_estimators, "max_depth": max_depth, "learning_rate": learning_rate,
                       "subsample": 0.8, "colsample_bytree": 0.8, "objective": objective, "tree_method": "hist",
                       "random_state": seed, "n_jobs": n_jobs}
        self.backends: tuple[str, ...] = ()
        self.model: xgb.XGBRegressor | None = None

    def fit(self, frame: pd.DataFrame, runtime_us: np.ndarray) -> MoEEstimator:
        self.backends = tuple(sorted(frame["backend"].astype(str).unique()))
        lw = layer_work(frame)
        target = np.log2(np.asarray(runtime_us, dtype=np.float64) / lw.expected_us)
        self.model = xgb.XGBRegressor(**self.params).fit(features(frame, lw, self.backends), target)
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Microseconds per row; never below the roofline of the least work the row's routing can give."""
        lw = layer_work(frame)
        if self.model is None:
            return lw.expected_us
        correction = self.model.predict(features(frame, lw, self.backends))
        return np.maximum(lw.expected_us * np.exp2(correction), lw.bound_us)
