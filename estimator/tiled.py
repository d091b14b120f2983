"""A GEMM model with NeuSight's structure (ASPLOS'25): the GEMM is cut into the tiles the library runs, and a small
network predicts how much of a bound the tiles reach, so a prediction can never beat the bound (inside the training
range; see **Out of range**).

    time = floor + max(bound / utilisation, cap),     0 < utilisation < 1 (a sigmoid)
    bound = max(waves x one CTA's FLOPs / peak FLOP/s per SM,  unique bytes / memory bandwidth)
    cap = E^2 / (E + credit),  E = FLOPs x energy per FLOP / board power   (power="cap" only)
    energy per FLOP = min(the generation's, board power / (fp32 peak x base clock / boost clock))

- **Tiles and waves** come from the kernel that runs (``estimator.kernel_config``: the recorded launch, else
  cuBLASLt's heuristic on the virtual device, ``estimator.kernel_labels``): its output tile, split-K and grid;
  waves = ceil(CTAs / SMs), or for a persistent kernel (``estimator.kernel_config.persistent_kernel``: a grid of at
  most one CTA per SM that loops over more tiles) ceil(tiles x split / CTAs). A row without a label takes, of
  ``estimator.features.GEMM_TILES``, the tile with the least quantisation overhead. The compute term charges every
  CTA of every wave a whole tile, so wave and tile quantisation are in the bound exactly, for any device; the
  memory term is the whole GEMM's unique bytes (tiles re-read operands from L2, which a per-tile byte count would
  charge to DRAM and so over-bound).
- **Power share** (``power``): a board sustains at most its power over the energy per FLOP of its SM generation
  (compute capability major) and datapath (the dtype, with fp16 and bf16 one: ``estimator.power_floor.datapath``;
  apart, the A40's fp16 capped a held-out A100's fp16 GEMMs at half their rate: 36.9 % mean APE, 8.8 together).
  Each training device bounds that energy from above (board power as it runs, ``power_limit_w`` else ``tdp_w``,
  over its sustained FLOP/s, ``fit_joules_per_flop``: ``estimator.power_floor``'s); the least bound of a generation
  gives its devices' share of peak (``power_share``; a generation never measured gets 1). This is the figure the
  spec sheet lacks: the 70-75 W inference cards reach a third to a half of their rated fp32 peak on large GEMMs.
  ``power="feature"`` gives the share to the network, ``"bound"`` divides the bound's peak by it (a short kernel
  boosts past its board's power, so there it over-bounds: NeuSight leave-one-GPU-out 26.6 % against 23.4),
  ``"none"`` ignores it. ``"cap"``
  (default) gives the share to the network too and adds the power-limited time E as a second bound that the time
  cannot beat, less a fitted energy credit (the board boosts past its power until its limiter catches up): the
  low-power cards' share of the tile bound falls with the kernel's length (90th percentile, compute-bound, 4+
  waves: T4 0.69 at 0.1-0.3 ms, 0.60 at 1-3 ms, 0.44 beyond 30 ms; P4 0.76 / 0.61 / 0.35), which a share that
  every kernel gets cannot express and a network that saw four devices does not learn to carry over.
  ``base_clock`` (default) tightens the cap by each board's spec-sheet base clock, the clock it guarantees under
  sustained load within its power: its energy per FLOP is at most watts / (fp32 peak x base / boost)
  (``base_clock_joules``), and the cap takes the lower of that and its generation's figure, which is loose where
  no sibling is power-limited (the P4's only Pascal sibling, the P100, reaches 0.9 of its peak, so Pascal's
  figure caps the P4 at 0.38 of its peak; the base clock allows 0.80). The share the network sees is tightened
  the same way only for a device without training rows (``measured``: the training devices): a measured device's
  share is what its own data show, and tightening those too made the P4, whose long linears run at a fifth of
  its peak, the V100's nearest training device (leave-one-GPU-out V100 16 -> 22-25 %). Only the P4 fold changes
  (its base clock is the only one above its siblings' figure): 34 -> 22 %.
- **Utilisation** is what the network learns, from dimensionless tile facts (tile sides, K per CTA, waves,
  last-wave fill, the tile's arithmetic intensity over the SM's ridge, split-K, path, alignment), optionally with
  the device per SM (``device_features="per_sm"``: peak GFLOP/s, bandwidth and L2 per SM, NeuSight's
  normalisation). Inputs are clamped to their training range, so an unseen device cannot push the network beyond
  its data.
- **Floor**: a fitted per-op cost (the launch path) per timing method of the source (``estimator.features.
  TIMING_METHODS``: NeuSight times an op with its host launch, aiconfigurator under CUDA graphs) and, with
  ``host_floors`` (default), per training device: the launch cost is the host's, and NeuSight's hosts differ (no
  P100 op under 47 us, A100, T4 and P4 ones from 28-31 us); one floor for all leaves the slow hosts' cost to the
  utilisation network, which then makes every device's small kernels slow. A prediction takes, per timing method,
  the median of the training devices' floors (an unseen device's host is a typical one), and a timing method no
  training row had takes the analytical per-kernel cost (``estimator.analytical``): the fitted floors are other
  methods' launch paths (trained on NeuSight alone, the emulator's kernels took its 23 us host launch). The timing
  method is also a network input.
- **Out of range** (``fallback``, default): a row whose kernel the network never saw (a kernel path, label state,
  datapath or dtype no training row had, or a K per CTA beyond the longest measured, where cuBLAS splits K) takes
  floor + max(the analytical roofline of its useful work, cap) instead: the tile bound assumes a tiled kernel of
  known split, which a gemv or an unlabelled row is not, and the network's utilisation there is a guess (trained on
  NeuSight alone, KernelBench's matrix-vector product was predicted 24-40x too slow, K = 131,072 7-11x).
- **Ensemble**: ``networks`` members (seeds ``seed``, ``seed`` + 1, ...), each with its own floors and credit; a
  prediction is the mean of their log times (one network's seed alone moves a held-out GPU by up to 10 points).

Fitted by minimising the absolute log error of the whole formula (torch, CPU). Weights as safetensors, the floors,
credits, energies and normalisation in meta.json (``estimator.mlp``'s persistence).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from stepcast.estimator.analytical import DEFAULT_ROOFLINE
from stepcast.estimator.features import GEMM_TILES, FeatureFrame, categorical_keys, encode, timing_codes, VOCABULARY
from stepcast.estimator.frames import Kernels, by_code, factorize, num
from stepcast.estimator.hardware_table import row_hardware
from stepcast.estimator.kernel_config import kernel_config_features, launch_waves, persistent_kernel
from stepcast.estimator.kernel_labels import label_for_features
from stepcast.estimator.mlp import MLPEstimator, build_network
from stepcast.estimator.power_floor import board_watts, energy_us, row_joules
from stepcast.estimator.power_floor import fit_joules_per_flop as fit_at_quantile
from stepcast.estimator.workload import element_bytes, work
from stepcast.errors import InputError

#: the structural column: log2 of the bound (microseconds); the prediction is floor + bound / utilisation
BOUND = "log2_bound_us"
#: the timing method of the row's source (estimator.features.TIMING_METHODS), which sets the per-op floor
TIMING = "timing"
#: device descriptions the network may see: none (the device enters through the bound only) or per SM (NeuSight's)
DEVICE_FEATURES = ("none", "per_sm", "generation")
#: where the board's power share enters: nowhere, the bound, the network's inputs, or a power-limited time beside the
#: bound that a long kernel cannot beat (``cap``: see ``_log_time``)
POWER_MODES = ("none", "bound", "feature", "cap")
#: the structural column of ``power="cap"``: log2 of the time (us) the row's useful FLOPs take at its board's power
#: (its generation's energy per FLOP x FLOPs / board power); NaN where the generation was never measured
ENERGY = "log2_energy_us"
#: the structural column of the out-of-range fallback: log2 of the analytical roofline's time (us) of the row's useful
#: work (``estimator.analytical``: FLOPs and unique bytes at typical shares of peak, whatever kernel runs)
ROOFLINE = "log2_roofline_us"
#: columns the formula reads but the network does not see
STRUCTURAL = (ENERGY, ROOFLINE)
#: network inputs that say whether the tile bound holds for a row: a value never seen in training (a gemv or other
#: kernel path, a row without a kernel label where every training row had one, another dtype or datapath) means a
#: kernel whose tiles the bound may misstate (a matrix-vector product is no tiled GEMM; an unlabelled row's tile is
#: a guess) and whose utilisation the network never learned, so the row takes the fallback (``_fallback``)
KERNEL_VALUES = ("labelled", "path", "tensor_cores", "dtype")
#: ... and a K per CTA beyond the longest K loop measured: cuBLAS splits such a K (NeuSight's longest is 65,371),
#: and a label's split-K comes only from a recorded grid, so past it the bound's one CTA down the whole K is likely a
#: split the label missed (KernelBench's 256 x 256 x 131,072 on a T4: a 5.3 ms bound, 4.3 ms measured). Other tile
#: facts beyond the range (an unseen tile size, more tile waste) are left to clamping: the bound charges whole tiles
#: exactly (a fallback on those took 25 held-out A100 rows from a few % to -80 %).
KERNEL_ABOVE = ("log2_k_per_cta",)
#: log microseconds of "no power-limited time" (a generation never measured): far below any kernel
NO_CAP = -50.0
#: starting value of the fitted energy credit of ``power="cap"``, in microseconds of power-limited time: next to
#: nothing, so the cap starts as the plain power-limited time and the data decide whether short kernels escape it
#: (NeuSight leave-one-GPU-out cannot tell 1 from 100 us: 20.4 vs 20.6 %, one seed)
CREDIT_US = 1.0


def _tile_fallback(m: np.ndarray, n: np.ndarray, batch: np.ndarray, sms: np.ndarray) -> tuple[np.ndarray, ...]:
    """(tile along cuBLAS M = the row's n, tile along cuBLAS N = the row's m) of least quantisation overhead."""
    best, tile_m, tile_n = np.full(len(m), np.inf), np.zeros(len(m)), np.zeros(len(m))
    for tm, tn in GEMM_TILES:
        tiles = np.ceil(n / tm) * np.ceil(m / tn) * batch
        slots = np.ceil(tiles / sms) * sms * tm * tn
        better = slots < best
        best = np.where(better, slots, best)
        tile_m, tile_n = np.where(better, tm, tile_m), np.where(better, tn, tile_n)
    return tile_m, tile_n


#: the sustained rate a device shows for the cap: this quantile of its achieved FLOP/s over GEMMs of
#: ``estimator.power_floor.MIN_FLOPS`` or more (its best kernels but a tenth; the cap has a fitted credit and the
#: network beside it, where the bundle's floor, which nothing corrects, takes each device's fastest)
POWER_QUANTILE = 0.9


def fit_joules_per_flop(frame: Kernels, runtime_us: np.ndarray) -> dict[str, float]:
    """Per SM generation and datapath, the least energy per FLOP a training device implies at ``POWER_QUANTILE``
    (``estimator.power_floor.fit_joules_per_flop``, board power as the board runs)."""
    return fit_at_quantile(frame, runtime_us, POWER_QUANTILE)


def _joules(frame: Kernels, joules_per_flop: dict[str, float], base_clock: bool = False) -> np.ndarray:
    """Each row's energy per FLOP: its generation's (``fit_joules_per_flop``), with ``base_clock`` tightened by its
    own board's base clock (``base_clock_joules``) where that is lower; NaN where the generation was never measured
    (a spec figure alone never creates a cap: a base clock is a floor on the sustained clock, often far below it)."""
    generation = row_joules(frame, joules_per_flop)
    if not base_clock:
        return generation
    return np.where(np.isfinite(generation), np.fmin(generation, base_clock_joules(frame)), np.nan)


def base_clock_joules(frame: Kernels) -> np.ndarray:
    """Per row, the most energy per FLOP its board can spend: its spec sheet's base clock is the clock it guarantees
    under sustained load within its board power, so it runs at least base / boost of its rated fp32 peak within
    ``tdp_w`` (J per FLOP <= watts / (fp32 peak x base / boost)); NaN where the catalog lacks a figure."""
    from stepcast.profiling.hardware import lookup

    codes, devices = factorize(frame["hardware"])
    per_device = []
    for device in devices:
        spec = lookup(str(device))
        rated = spec.rated_clock_mhz or spec.max_clock_mhz
        base, watts = spec.base_clock_mhz, spec.tdp_w
        per_device.append(watts / (spec.peak_flops("fp32") / spec.power_clock_scale * base / rated)
                          if base and watts else np.nan)
    return by_code(np.array(per_device + [np.nan], dtype=np.float64), codes)


def power_share(frame: Kernels, peak_flops: np.ndarray, joules_per_flop: dict[str, float],
                base_clock: bool = False) -> np.ndarray:
    """The share of the dtype's peak a board can sustain within its power: min(1, watts / (J per FLOP x peak)), with
    the energy per FLOP of its generation (``fit_joules_per_flop``); 1 where its generation was never measured."""
    share = board_watts(frame) / (_joules(frame, joules_per_flop, base_clock) * peak_flops)
    return np.where(np.isfinite(share), np.minimum(share, 1.0), 1.0)


def tile_features(frame: Kernels, device_features: str = "none", joules_per_flop: dict[str, float] | None = None,
                  power: str = "feature", base_clock: bool = False, measured: tuple[str, ...] = ()) -> FeatureFrame:
    """The bound (``BOUND``) and the utilisation network's inputs for every GEMM row; ``baseline_us`` is the bound.
    ``joules_per_flop`` gives each row its board's power share (``power_share``): with ``power="bound"`` the bound's
    compute term runs at that share of peak, with ``"feature"`` the share is an input of the network instead; with
    ``"cap"`` also the power-limited time (``ENERGY``), at an energy per FLOP that ``base_clock`` tightens, as it
    does the share of a device not in ``measured`` (the training devices)."""
    frame = categorical_keys(label_for_features(frame))
    w = work("gemm", frame)
    hw = row_hardware(frame["hardware"], frame["dtype"])
    m, n, k, batch = (np.asarray(num(frame, c), dtype=np.float64) for c in ("m", "n", "k", "batch"))
    elem = element_bytes(frame)
    sms = hw.spec["hw_sm_count"]

    kc = kernel_config_features(frame, m, n, k, batch, sms, elem, hw.spec["hw_compute_capability"])
    fallback_m, fallback_n = _tile_fallback(m, n, batch, sms)
    known = np.isfinite(kc["kc_tile_m"]) & np.isfinite(kc["kc_tile_n"])
    tile_m = np.where(known, kc["kc_tile_m"], fallback_m)
    tile_n = np.where(known, kc["kc_tile_n"], fallback_n)
    split = np.where(np.isfinite(kc["kc_split_k"]), kc["kc_split_k"], 1.0)
    tiles = np.ceil(n / tile_m) * np.ceil(m / tile_n) * batch
    units = np.maximum(tiles * split, 1.0)  # (tile, K slice) pairs: the CTA-sized pieces of work
    ctas = np.where(np.isfinite(kc["kc_log2_ctas"]), np.round(2.0 ** kc["kc_log2_ctas"]), units)
    ctas = np.maximum(ctas, 1.0)
    waves, ctas = launch_waves(persistent_kernel(kc), ctas, units, sms)  # ctas: the pieces the waves fill
    k_cta = np.ceil(k / split)
    cta_flops = 2.0 * tile_m * tile_n * k_cta
    cta_bytes = elem * (tile_m * k_cta + tile_n * k_cta + tile_m * tile_n)
    share = power_share(frame, hw.peak_flops, joules_per_flop) if joules_per_flop else np.ones(len(m))
    if base_clock and joules_per_flop:  # a device without training rows: its base clock may tighten its siblings'
        unseen = ~np.isin(np.asarray(frame["hardware"], dtype=object).astype(str), list(measured))
        share = np.where(unseen, power_share(frame, hw.peak_flops, joules_per_flop, True), share)
    sm_flops = hw.peak_flops * (share if power == "bound" else 1.0) / sms
    sm_bandwidth = hw.memory_bandwidth / sms
    compute_us = waves * cta_flops / sm_flops * 1e6
    memory_us = w.bytes / hw.memory_bandwidth * 1e6
    bound_us = np.maximum(np.maximum(compute_us, memory_us), 1e-3)
    cols: dict[str, np.ndarray] = {
        BOUND: np.log2(bound_us),
        "log2_compute_over_memory": np.log2(np.maximum(compute_us, 1e-6) / np.maximum(memory_us, 1e-6)),
        "log2_tile_m": np.log2(tile_m), "log2_tile_n": np.log2(tile_n), "log2_k_per_cta": np.log2(k_cta),
        "log2_split_k": np.log2(split), "log2_batch": np.log2(np.maximum(batch, 1.0)),
        "log2_waves": np.log2(waves), "inverse_waves": 1.0 / waves, "last_wave_fill": ctas / (waves * sms),
        "log2_tile_overhead": np.log2(tiles * tile_m * tile_n / np.maximum(m * n * batch, 1.0)),
        "log2_tile_intensity_over_ridge": np.log2(cta_flops / cta_bytes) - np.log2(sm_flops / sm_bandwidth),
        "log2_operands_over_l2": np.log2(w.bytes / (hw.spec["hw_l2_cache_mib"] * 2.0 ** 20)),
        "labelled": known.astype(np.float64),
        "path": np.where(np.isfinite(kc["kc_path"]), kc["kc_path"], -1.0),
        "tensor_cores": np.nan_to_num(kc["kc_tensor"], nan=0.0),
        "log2_slices": np.log2(np.nan_to_num(kc["kc_slices"], nan=1.0)),
        "log2_shape_align_bytes": np.log2(kc["kc_shape_align_bytes"]),
        "dtype": encode(frame["dtype"], VOCABULARY["dtype"]),
    }
    if power in ("feature", "cap"):
        cols["log2_power_share"] = np.log2(share)
    if power == "cap":
        joules = _joules(frame, joules_per_flop or {}, base_clock)
        cols[ENERGY] = np.log2(energy_us(frame, {}, joules, w.flops))
    cols[ROOFLINE] = np.log2(np.maximum(DEFAULT_ROOFLINE.family_us("gemm", frame, w, hw), 1e-3))
    if device_features == "generation":
        cols["sm_generation"] = hw.spec["hw_compute_capability"] // 10
    if device_features == "per_sm":
        cols |= {"log2_sm_gflops": np.log2(sm_flops / 1e9), "log2_sm_bandwidth_gbps": np.log2(sm_bandwidth / 1e9),
                 "log2_sm_l2_kib": np.log2(hw.spec["hw_l2_cache_mib"] * 1024.0 / sms)}
    cols[TIMING] = timing_codes(frame)  # the floor's key, and an input: sources time the same kernel differently
    names = list(cols)
    matrix = np.empty((len(m), len(names)), dtype=np.float32, order="F")
    for i, name in enumerate(names):
        matrix[:, i] = cols[name]
    return FeatureFrame(names, matrix, bound_us, hw)


class TiledEstimator(MLPEstimator):
    """GEMMs only: floor + tile bound / learned utilisation (see the module docstring). ``kernel_config`` and
    ``timing`` are accepted for the common interface; this model always uses both (the tiles are its structure, the
    timing method sets its floor)."""

    kind = "tiled"

    def __init__(self, family: str = "gemm", target: str = "efficiency", spec_tolerance: float = 2.0,
                 kernel_config: bool = True, timing: bool = False, hidden: tuple[int, ...] | list[int] = (64, 64),
                 epochs: int = 30, batch_size: int = 1024, learning_rate: float = 3e-3, weight_decay: float = 1e-5,
                 threads: int = 1, seed: int = 0, device_features: str = "none", floor_us: float = 30.0,
                 clamp_inputs: bool = True, power: str = "cap", min_steps: int = 1500, networks: int = 5,
                 host_floors: bool = True, base_clock: bool = True, fallback: bool = True) -> None:
        if family != "gemm":
            raise ValueError(f"tiled estimator: family '{family}' is not modelled (expected 'gemm')")
        if device_features not in DEVICE_FEATURES:
            raise ValueError(f"device_features '{device_features}': expected one of {', '.join(DEVICE_FEATURES)}")
        super().__init__(family, "efficiency", spec_tolerance, True, True, hidden, epochs, batch_size,
                         learning_rate, weight_decay, threads, seed)
        self.device_features = device_features
        self.floor_us = float(floor_us)
        self.clamp_inputs = bool(clamp_inputs)
        if power not in POWER_MODES:
            raise ValueError(f"power '{power}': expected one of {', '.join(POWER_MODES)}")
        self.power = power
        self.min_steps = int(min_steps)
        if int(networks) < 1:
            raise ValueError(f"networks {networks}: expected at least 1")
        self.networks = int(networks)
        self.host_floors = bool(host_floors)
        self.base_clock = bool(base_clock)
        self.fallback = bool(fallback)
        self.joules_per_flop: dict[str, float] = {}

    def get_params(self) -> dict[str, Any]:
        return super().get_params() | {"device_features": self.device_features, "floor_us": self.floor_us,
                                      "clamp_inputs": self.clamp_inputs, "power": self.power,
                                      "min_steps": self.min_steps, "networks": self.networks,
                                      "host_floors": self.host_floors, "base_clock": self.base_clock,
                                      "fallback": self.fallback}

    def fit(self, frame, runtime_us) -> "TiledEstimator":
        """Fits the generations' energy per FLOP first (the bound depends on it), then the networks, with one floor
        per training device (``host_floors``) or one for all."""
        from stepcast.estimator.frames import as_kernels

        frame = as_kernels(frame)
        runtime_us = np.asarray(runtime_us, dtype=np.float64)
        self.feature_names = []
        self.joules_per_flop = fit_joules_per_flop(frame, runtime_us) if self.power != "none" else {}
        self.norm = {"measured": sorted(str(h) for h in factorize(frame["hardware"])[1])}
        hosts = np.maximum(factorize(frame["hardware"])[0], 0) if self.host_floors else np.zeros(len(frame))
        self._hosts = torch.from_numpy(hosts.astype(np.int64))  # read by _fit_matrix, which sees no frame
        try:
            return super().fit(frame, runtime_us)
        finally:
            del self._hosts

    def _features(self, frame: Kernels) -> FeatureFrame:
        codes, uniques = factorize(frame["family"])
        if len(uniques) and (len(uniques) > 1 or str(uniques[0]) != "gemm"):
            raise ValueError(f"tiled estimator got rows of family {', '.join(map(str, uniques))} (expected gemm; "
                             "route mixed frames through estimator.load())")
        feats = tile_features(frame, self.device_features, self.joules_per_flop, self.power, self.base_clock,
                              tuple(self.norm.get("measured", ())))
        if self.feature_names and feats.names != self.feature_names:
            raise InputError(f"tiled@{self.version} was trained on other features than this version computes: "
                             "retrain or re-export the bundle")
        return feats

    def _network_columns(self) -> np.ndarray:
        """Indices of the columns the network sees (all but ``STRUCTURAL``)."""
        return np.array([i for i, name in enumerate(self.feature_names) if name not in STRUCTURAL], dtype=np.int64)

    def _inputs(self, x: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(normalised network inputs, log bound, log power-limited time) in log microseconds; the last is -inf-like
        where there is no cap. Inputs are clamped to the training range: a network's output beyond its data is a
        straight line to anywhere, and an unseen device's figures would take it there (the MLP on per-SM figures:
        392.6 % on NeuSight leave-one-GPU-out); clamped, an unseen device is described by the nearest seen value of
        each figure."""
        bound = torch.from_numpy(np.asarray(x[:, self.feature_names.index(BOUND)], dtype=np.float32) * np.log(2.0))
        energy = np.full(len(x), NO_CAP, dtype=np.float32)
        if ENERGY in self.feature_names:
            column = x[:, self.feature_names.index(ENERGY)] * np.float32(np.log(2.0))
            energy = np.where(np.isfinite(column), column, NO_CAP).astype(np.float32)
        x = x[:, self._network_columns()]
        if self.clamp_inputs:
            x = np.clip(x, np.asarray(self.norm["x_min"], dtype=np.float32),
                        np.asarray(self.norm["x_max"], dtype=np.float32))
        return self._normalise(x), bound, torch.from_numpy(energy)

    def _log_time(self, network: nn.Module, xs: torch.Tensor, log_bound: torch.Tensor, log_floor: torch.Tensor,
                  log_energy: torch.Tensor | None = None, log_credit: torch.Tensor | None = None) -> torch.Tensor:
        """log(floor + max(bound / utilisation, cap)), utilisation = sigmoid(network): logaddexp keeps it stable.
        ``log_floor``: one per row (its timing method's floor). The cap (``power="cap"``) is the power-limited time
        E less what the board's energy credit c buys, E^2 / (E + c) (about E - c for E >> c, nothing for E << c): a
        board boosts past its power until the limiter catches up, so only long kernels settle at the power-limited
        rate (NeuSight's T4 and P4 reach 0.7 of their rated peak at 0.1-1 ms, 0.44 and 0.35 beyond 30 ms)."""
        log_util = nn.functional.logsigmoid(network(xs)[:, 0])
        return _floor_plus_capped(log_bound - log_util, log_floor, log_energy, log_credit)

    def _floor_codes(self, x: np.ndarray) -> torch.Tensor:
        """Each row's timing method (``estimator.features.timing_codes``; -1, a method not in the vocabulary, last)."""
        codes = x[:, self.feature_names.index(TIMING)].astype(np.int64)
        return torch.from_numpy(np.where(codes < 0, len(VOCABULARY["timing"]), codes))

    def _fit_matrix(self, x: np.ndarray, y: np.ndarray) -> None:
        """Fits ``networks`` members (seeds seed, seed + 1, ...), each with its own floor and credit; a prediction is
        the mean of their log times (``_predict_matrix``)."""
        net = x[:, self._network_columns()]
        x_mean, x_std = np.nanmean(net, axis=0), np.nanstd(net, axis=0)
        x_mean = np.where(np.isfinite(x_mean), x_mean, 0.0)
        x_std = np.where(np.isfinite(x_std) & (x_std > 1e-6), x_std, 1.0)
        x_min, x_max = np.nanmin(net, axis=0), np.nanmax(net, axis=0)
        self.norm |= {"x_mean": x_mean.tolist(), "x_std": x_std.tolist(),
                      "x_min": np.where(np.isfinite(x_min), x_min, 0.0).tolist(),
                      "x_max": np.where(np.isfinite(x_max), x_max, 0.0).tolist(),
                      "kernel_values": {name: np.unique(x[:, self.feature_names.index(name)]).tolist()
                                        for name in KERNEL_VALUES if name in self.feature_names}}
        xs, log_bound, log_energy = self._inputs(x)
        target = torch.from_numpy(y.astype(np.float32)) + log_bound  # y is log(runtime / bound)
        floor_codes = self._floor_codes(x)
        floor_codes = floor_codes * (int(self._hosts.max()) + 1) + self._hosts  # one floor per (method, device)
        members = [self._fit_member(self.seed + i, xs, log_bound, log_energy, floor_codes, target)
                   for i in range(self.networks)]
        self.network = nn.ModuleList([m[0] for m in members])
        self.norm["floor_us"] = [m[1] for m in members]
        self.norm["credit_us"] = [m[2] for m in members]
        self.norm["joules_per_flop"] = dict(self.joules_per_flop)

    def _fit_member(self, seed: int, xs: torch.Tensor, log_bound: torch.Tensor, log_energy: torch.Tensor,
                    floor_codes: torch.Tensor, target: torch.Tensor) -> tuple[nn.Sequential, list[float], float]:
        """One network with its floors (us, per timing method) and energy credit (us), from seed ``seed``."""
        torch.manual_seed(seed)
        network = build_network(xs.shape[1], self.hidden)
        with torch.no_grad():
            network[-1].bias.fill_(0.0)
        methods = len(VOCABULARY["timing"]) + 1
        hosts = int(self._hosts.max()) + 1
        log_floor = nn.Parameter(torch.full((methods * hosts,), float(np.log(self.floor_us))))
        log_credit = nn.Parameter(torch.tensor(float(np.log(CREDIT_US))))
        capped = self.power == "cap"
        opt = torch.optim.AdamW([*network.parameters(), log_floor] + ([log_credit] if capped else []),
                                lr=self.learning_rate, weight_decay=self.weight_decay)
        steps = max(1, int(np.ceil(len(xs) / self.batch_size)))
        epochs = max(self.epochs, int(np.ceil(self.min_steps / steps)))  # a small training set still trains
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.learning_rate, total_steps=epochs * steps)
        generator = torch.Generator().manual_seed(seed)
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            network.train()
            for _ in range(epochs):
                order = torch.randperm(len(xs), generator=generator)
                for start in range(0, len(xs), self.batch_size):
                    idx = order[start:start + self.batch_size]
                    predicted = self._log_time(network, xs[idx], log_bound[idx], log_floor[floor_codes[idx]],
                                               log_energy[idx] if capped else None, log_credit if capped else None)
                    loss = (predicted - target[idx]).abs().mean()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    sched.step()
        finally:
            torch.set_num_threads(previous_threads)
        network.eval()
        # per timing method, the median over the training devices' floors (an unseen device's host is a typical
        # one); a method no training row had takes the analytical per-kernel cost: the fitted floors are other
        # methods' launch paths (NeuSight's host launch is 23-50 us; a kernel timed on the device pays none of it)
        fitted = torch.exp(log_floor).detach().numpy().reshape(methods, hosts)
        seen = np.isin(np.arange(methods * hosts), floor_codes.numpy()).reshape(methods, hosts)
        fitted = np.array([float(np.median(f[s])) if s.any() else np.nan for f, s in zip(fitted, seen)])
        fitted = np.where(np.isfinite(fitted), fitted, DEFAULT_ROOFLINE.gpu_fixed_us)
        return network, fitted.tolist(), float(torch.exp(log_credit).item())

    def _load_weights(self, path, meta: dict[str, Any]) -> None:
        """The members' weights (``networks`` of them, each as wide as the columns it sees: ``STRUCTURAL`` ones are
        not)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        self.norm = meta["normalisation"]
        width = len([n for n in self.feature_names if n not in STRUCTURAL])
        self.network = nn.ModuleList([build_network(width, self.hidden) for _ in range(self.networks)])
        weights = path / "model.safetensors"
        try:
            self.network.load_state_dict(load_file(str(weights)))
        except FileNotFoundError:
            raise InputError(f"{weights}: missing (expected the tiled model's weights)") from None
        except (SafetensorError, RuntimeError) as exc:  # a damaged file, or weights of another architecture
            raise InputError(f"{weights}: not readable as this model's {self.networks} networks "
                             f"({str(exc).splitlines()[0][:200]})") from None
        self.network.eval()
        self.joules_per_flop = {str(k): float(v) for k, v in self.norm.get("joules_per_flop", {}).items()}

    def _predict_matrix(self, x: np.ndarray) -> np.ndarray:
        """log(predicted time / bound), as LearnedEstimator expects of an efficiency model: the mean over the
        members of their log times (one network's seed alone moves a held-out GPU by up to 8 points)."""
        if self.network is None:
            raise RuntimeError("tiled estimator is not fitted")
        xs, log_bound, log_energy = self._inputs(x)
        codes = self._floor_codes(x)
        capped = self.power == "cap"
        outs = []
        with torch.inference_mode():
            for network, floor_us, credit_us in zip(self.network, self.norm["floor_us"], self.norm["credit_us"]):
                log_floor = torch.log(torch.tensor(floor_us, dtype=torch.float32))[codes]
                log_credit = torch.tensor(float(np.log(credit_us)))
                outs.append(self._log_time(network, xs, log_bound, log_floor, log_energy if capped else None,
                                           log_credit if capped else None))
        out = torch.stack(outs).mean(dim=0)
        outside = self.outside(x) if self.fallback else None
        if outside is not None and outside.any():  # in range, as most rows are, nothing more to compute
            out = torch.where(torch.from_numpy(outside), self._fallback(x, codes, log_energy), out)
        return (out - log_bound).numpy()

    def outside(self, x: np.ndarray) -> np.ndarray:
        """Per row: a kernel input (``KERNEL_VALUES``, ``KERNEL_ABOVE``) lies beyond what the training rows had."""
        out = np.zeros(len(x), dtype=bool)
        network = [self.feature_names[i] for i in self._network_columns()]
        for name in KERNEL_ABOVE:
            if name in network:
                out |= x[:, self.feature_names.index(name)] > self.norm["x_max"][network.index(name)] + 1e-4
        for name, seen in self.norm.get("kernel_values", {}).items():
            out |= ~np.isin(x[:, self.feature_names.index(name)], np.asarray(seen, dtype=np.float32))
        return out

    def _fallback(self, x: np.ndarray, codes: torch.Tensor, log_energy: torch.Tensor) -> torch.Tensor:
        """Log time of a row outside the network's range: its floor + max(the analytical roofline of its useful
        work, its power-limited time), averaged over the members' floors and credits like the network's times.
        Both terms hold whatever kernel runs: the roofline counts useful FLOPs and bytes (no tiles), and the power
        cap is the board's energy per FLOP, which the training devices pin whatever the shape."""
        log_roofline = torch.from_numpy(x[:, self.feature_names.index(ROOFLINE)].astype(np.float32) * np.log(2.0))
        capped = self.power == "cap"
        outs = []
        for floor_us, credit_us in zip(self.norm["floor_us"], self.norm["credit_us"]):
            log_floor = torch.log(torch.tensor(floor_us, dtype=torch.float32))[codes]
            log_credit = torch.tensor(float(np.log(credit_us))) if capped else None
            outs.append(_floor_plus_capped(log_roofline, log_floor, log_energy if capped else None, log_credit))
        return torch.stack(outs).mean(dim=0)


def _floor_plus_capped(log_compute: torch.Tensor, log_floor: torch.Tensor, log_energy: torch.Tensor | None,
                       log_credit: torch.Tensor | None) -> torch.Tensor:
    """log(floor + max(compute, cap)), logaddexp keeping it stable; the cap (``power="cap"``, both given) is the
    power-limited time E less what the board's energy credit c buys, E^2 / (E + c): the network's times and the
    out-of-range fallback's alike."""
    if log_energy is not None and log_credit is not None:
        log_compute = torch.maximum(log_compute, 2.0 * log_energy - torch.logaddexp(log_energy, log_credit))
    return torch.logaddexp(log_floor, log_compute)
