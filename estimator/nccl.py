"""A collective-time model with NCCL's own structure, fitted per device, with an optional learned residual.

NCCL times a collective by trying every (algorithm, protocol) pair its tuner allows and running the fastest
predicted one (``src/graph/tuning.cc``: time = base latency + steps x per-step latency + bytes / (bandwidth of the
pair)). This model does the same with figures fitted to measurements, so the size thresholds at which NCCL switches
protocol and algorithm are where the fitted candidate times cross, not hand-set:

Links: within a node the catalog's NVLink bandwidth, except where NVLink only bridges pairs (``switched``) and
more than two ranks take part (PCIe then); across nodes the catalog's per-GPU network bandwidth.

- **protocols** LL, LL128, Simple: LL moves 4 payload bytes per 8-byte line (flag + data, lowest latency), LL128 120
  of every 128, Simple all of them but with a fence per step (highest latency). Per protocol: a per-step latency,
  the share of the catalog link bandwidth reached once every channel is busy, and the **channel fill**: the bytes
  on the wire below which not all channels carry data (NCCL gives each channel at least one chunk), so a smaller
  call costs as much as one of fill bytes; and the reach, n^2 / (n^2 + loss) of that bandwidth at n ranks (fewer
  ranks stream less of it: measured, not derived);
- **ring** (every op): all_reduce 2(n-1) steps, all_gather / reduce_scatter / broadcast n-1, moving nccl-tests'
  bus-bandwidth share of the buffer (``estimator.workload.bus_factor``); across nodes the ring crosses the network
  at the catalog's per-GPU network bandwidth with a network latency per inter-node hop;
- **tree** (all_reduce across nodes): 2(r-1) intra-node chain steps plus 2 log2(nodes) network hops, 2 x the buffer
  each way (NCCL's intra-node "tree" is a chain, which the ring beats, so only multi-node rows get it);
- **NVLS** (all_reduce, all_gather, reduce_scatter within one NVSwitch node of a Hopper or Blackwell SXM part):
  the switch reduces and multicasts, Simple protocol, 2 steps for all_reduce and 1 otherwise, its own bandwidth
  share; an all_reduce moves the buffer once each way (the switch adds the copies), not the ring's 2(n-1)/n;
- **p2p** (all_to_all, send_recv): NCCL's grouped send/receive, LL or Simple, a latency per call plus one per peer.

Fitted figures (log-parameters, ``scipy.optimize.least_squares`` on the log error) are per device; a device with no
collective measurements gets the median of the fitted devices' figures, applied to its own catalog link and network
bandwidths, which is how multi-node and unmeasured GPUs are predicted. ``residual=True`` adds a small XGBoost per
source on log(measured / model) over (op, log2 bytes, ranks, ranks per node, the model's chosen candidate and
time, the link bandwidth), every device of the source weighing the same; a row without a source takes nccl-tests'.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from estimator.base import KernelEstimator
from estimator.frames import as_frame
from estimator.workload import bus_factor
from profiling.hardware import lookup

PROTOCOLS = ("LL", "LL128", "Simple")


def switched(spec) -> bool:
    """Whether a node's GPUs meet at an NVSwitch. The catalog has no topology field: an NVLink part whose id names
    PCIe has bridges between pairs (H100 NVL, A100 PCIe), every other NVLink part in it is an SXM board on a switch."""
    return bool(spec.nvlink_bandwidth_gbps) and "pcie" not in spec.id
#: payload bytes per byte on the wire
PAYLOAD_SHARE = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}
#: fitted figures (each stored as its log) and their starting values: microseconds, shares of link bandwidth, bytes
PARAMS: dict[str, float] = {
    "base_us": 5.0,
    "step_us_LL": 0.6, "step_us_LL128": 1.2, "step_us_Simple": 3.0,
    "share_LL": 0.5, "share_LL128": 0.8, "share_Simple": 0.8,
    "fill_bytes_LL": 2.0 ** 16, "fill_bytes_LL128": 2.0 ** 19, "fill_bytes_Simple": 2.0 ** 21,
    "nvls_step_us": 3.0, "nvls_share": 1.0,
    "p2p_us": 3.0, "p2p_peer_us": 0.5,
    "net_step_us": 6.0, "net_share": 0.8,
    "ring_loss": 1.0,
}
NAMES = tuple(PARAMS)
NVLS_OPS = ("all_reduce", "all_gather", "reduce_scatter")
P2P_OPS = ("all_to_all", "send_recv")
#: candidate labels, in the column order of ``candidate_times``
#: whose figures predict a row of a device that has no fit of the row's own source
PREFERRED_SOURCES = ("aiconfigurator", "profiler", "vidur")
RESIDUAL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv")
CANDIDATES = tuple(f"ring/{p}" for p in PROTOCOLS) + tuple(f"tree/{p}" for p in PROTOCOLS) + ("nvls/Simple",) + \
    ("p2p/LL", "p2p/Simple")


@dataclass
class Rows:
    """The collective columns of a frame as arrays, with each row's device figures (bytes per microsecond)."""

    op: np.ndarray
    size: np.ndarray
    ranks: np.ndarray
    per_node: np.ndarray
    link: np.ndarray
    network: np.ndarray
    nvls: np.ndarray  # the device has NVSwitch multicast (Hopper / Blackwell with NVLink)
    hardware: np.ndarray = field(default_factory=lambda: np.array([]))

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "Rows":
        hardware = frame["hardware"].astype(str).to_numpy()
        specs = {h: lookup(h) for h in pd.unique(hardware)}
        per = {h: (s.intra_node_bandwidth / 1e6, (s.pcie_bandwidth_gbps or 16.0) * 1e3, s.inter_node_bandwidth / 1e6,
                   float(switched(s)), float(switched(s) and s.architecture in {"hopper", "blackwell"}))
               for h, s in specs.items()}
        figures = np.array([per[h] for h in hardware], dtype=np.float64).reshape(-1, 5)
        ranks = frame["ranks"].to_numpy(np.float64)
        per_node = np.minimum(frame["ranks_per_node"].to_numpy(np.float64), ranks)
        # NVLink bridges join pairs: more than two ranks of a bridged node meet over PCIe
        link = np.where((figures[:, 3] > 0) | (per_node <= 2), figures[:, 0], figures[:, 1])
        return cls(frame["op"].astype(str).to_numpy(), frame["bytes"].to_numpy(np.float64), ranks, per_node, link,
                   figures[:, 2], figures[:, 4] > 0, hardware)

    def take(self, mask: np.ndarray) -> "Rows":
        return Rows(*(getattr(self, f)[mask] for f in ("op", "size", "ranks", "per_node", "link", "network", "nvls",
                                                       "hardware")))


def candidate_times(rows: Rows, p: dict[str, float]) -> np.ndarray:
    """Microseconds of every (algorithm, protocol) candidate per row, ``inf`` where NCCL would not offer it;
    the per-call base latency is not included."""
    n, r, size = np.maximum(rows.ranks, 1.0), np.maximum(rows.per_node, 1.0), rows.size
    nodes = np.ceil(n / r)
    multi = nodes > 1
    link = np.where(multi, np.minimum(rows.link, rows.network * p["net_share"]), rows.link)
    wire = size * bus_factor(rows.op, n)
    is_ar = rows.op == "all_reduce"
    p2p = np.isin(rows.op, P2P_OPS)
    ring_steps = np.where(is_ar, 2.0 * (n - 1.0), n - 1.0)
    ring_net_steps = np.where(multi, ring_steps * nodes / n, 0.0)  # the hops that leave a node
    tree_intra = np.where(is_ar, 2.0 * (r - 1.0), r - 1.0)
    tree_net = np.where(is_ar, 2.0, 1.0) * np.ceil(np.log2(nodes))
    # fewer ranks reach less of the link: n^2 / (n^2 + ring_loss) of it (aiconfigurator's 512 MiB calls on H100, A100
    # and B200 alike: 0.71-0.77 of the 8-GPU bus bandwidth at 2 GPUs, 0.92-0.95 at 4)
    reach = n * n / (n * n + p["ring_loss"])
    out = []
    for algorithm in ("ring", "tree"):
        for proto in PROTOCOLS:
            bw = link * p[f"share_{proto}"] * PAYLOAD_SHARE[proto] * reach
            moved = wire if algorithm == "ring" else np.where(is_ar, 2.0, 1.0) * size
            t = np.maximum(moved, p[f"fill_bytes_{proto}"]) / bw
            if algorithm == "ring":
                t = t + (ring_steps - ring_net_steps) * p[f"step_us_{proto}"] + ring_net_steps * p["net_step_us"]
                offered = ~p2p
            else:
                t = t + tree_intra * p[f"step_us_{proto}"] + tree_net * p["net_step_us"]
                offered = multi & is_ar
            out.append(np.where(offered, t, np.inf))
    nvls_ok = rows.nvls & ~multi & np.isin(rows.op, NVLS_OPS) & (n > 1)
    nvls_wire = np.where(is_ar, size, wire)  # the switch reduces: each GPU sends and receives the buffer once
    t = np.maximum(nvls_wire, p["fill_bytes_Simple"]) / (rows.link * p["nvls_share"]) + \
        np.where(is_ar, 2.0, 1.0) * p["nvls_step_us"]
    out.append(np.where(nvls_ok, t, np.inf))
    for proto in ("LL", "Simple"):
        bw = link * p[f"share_{proto}"] * PAYLOAD_SHARE[proto] * reach
        t = np.maximum(wire, p[f"fill_bytes_{proto}"]) / bw + p["p2p_us"] + (n - 1.0) * p["p2p_peer_us"] + \
            np.where(multi, p["net_step_us"], 0.0)
        out.append(np.where(p2p, t, np.inf))
    times = np.column_stack(out)
    return np.where(n[:, None] <= 1.0, 0.0, times)


def model_us(rows: Rows, p: dict[str, float], softness: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(microseconds, index of the chosen candidate) per row. ``softness`` > 0 replaces the minimum over candidates
    by a smooth one (log-sum-exp over log times at that temperature), which the fit needs: the hard minimum has no
    gradient towards a candidate that is not yet the fastest."""
    times = candidate_times(rows, p)
    choice = np.argmin(times, axis=1)
    best = times[np.arange(len(times)), choice]
    if softness > 0:
        with np.errstate(divide="ignore"):
            logs = np.log(np.where(times > 0, times, np.inf))
        lowest = np.log(np.maximum(best, 1e-12))
        spread = np.exp(-(logs - lowest[:, None]) / softness).sum(axis=1)
        best = np.where(best > 0, np.exp(lowest - softness * np.log(spread)), 0.0)
    return p["base_us"] + best, choice


#: the range each figure may take in a fit (physical limits, and what keeps the search out of flat regions)
BOUNDS: dict[str, tuple[float, float]] = {"us": (0.05, 200.0), "share": (0.05, 2.0), "bytes": (64.0, 2.0 ** 27),
                                          "loss": (0.01, 20.0)}
#: rows per fit (a random subset of bigger tables: the figures are few, and the fit costs per row)
FIT_ROWS = 800


def _kind(name: str) -> str:
    return "share" if "share" in name else "bytes" if "bytes" in name else "loss" if "loss" in name else "us"


def fit_device(rows: Rows, runtime_us: np.ndarray, starts: int = 3, seed: int = 0) -> dict[str, float]:
    """Least-squares fit of one device's figures on log(time), from ``starts`` starting points (the default figures,
    then random draws within the bounds; the best fit wins); figures no row constrains keep their start."""
    from scipy.optimize import least_squares

    rng = np.random.default_rng(seed)
    if len(runtime_us) > FIT_ROWS:
        keep = np.sort(rng.choice(len(runtime_us), FIT_ROWS, replace=False))
        rows, runtime_us = rows.take(keep), runtime_us[keep]
    lower = np.log([BOUNDS[_kind(k)][0] for k in NAMES])
    upper = np.log([BOUNDS[_kind(k)][1] for k in NAMES])
    target = np.log(runtime_us)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(model_us(rows, dict(zip(NAMES, np.exp(x))), softness=0.05)[0]) - target

    best = None
    for i in range(starts):
        x0 = np.log([PARAMS[k] for k in NAMES]) if i == 0 else rng.uniform(lower, upper)
        solution = least_squares(residual, np.clip(x0, lower, upper), bounds=(lower, upper), loss="soft_l1",
                                 f_scale=0.1, diff_step=1e-3, max_nfev=200, tr_solver="lsmr")
        if best is None or solution.cost < best.cost:
            best = solution
    return dict(zip(NAMES, np.exp(best.x)))


def median_params(fitted: dict[str, dict[str, float]]) -> dict[str, float]:
    """The figures of a device never measured: the geometric median of the fitted devices' figures."""
    if not fitted:
        return dict(PARAMS)
    return {k: float(np.exp(np.median([np.log(p[k]) for p in fitted.values()]))) for k in NAMES}


class NcclEstimator(KernelEstimator):
    """Collective estimator: NCCL's algorithm / protocol structure with per-device fitted figures, plus an optional
    learned residual. Only the ``collective`` family."""

    name = "nccl"
    version = "1"

    def __init__(self, residual: bool = False, min_rows: int = 30, family: str = "collective",
                 target: str | None = None) -> None:
        """``family`` / ``target``: what ``estimator.models.make_estimator`` passes every kind; only ``collective``
        and the model's own target (log time) make sense here."""
        if family != "collective":
            raise ValueError(f"nccl estimator: family '{family}' is not 'collective'")
        self.residual = residual
        self.min_rows = min_rows
        self.params: dict[str, dict[str, float]] = {}
        self.default: dict[str, float] = dict(PARAMS)
        self._boosters: dict = {}  # source -> XGBoost booster of log(measured / model)

    def get_params(self) -> dict[str, Any]:
        return {"residual": self.residual, "min_rows": self.min_rows}

    @property
    def families(self) -> tuple[str, ...]:
        return ("collective",)

    # -- persistence: meta.json (figures per device and source) plus one UBJ booster per residual source --------
    def save(self, path: str | Path) -> Path:
        from estimator.bundle import seal_estimator_dir, write_json_atomic
        from profiling.atomic import write_bytes_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        residuals = {}
        for i, (source, booster) in enumerate(sorted(self._boosters.items())):
            residuals[source] = f"residual_{i}.ubj"
            write_bytes_atomic(path / residuals[source], bytes(booster.save_raw("ubj")))
        write_json_atomic(path / "meta.json", {"kind": "nccl", "version": self.version, "params": self.get_params(),
                                               "figures": self.params, "default": self.default,
                                               "residuals": residuals})
        seal_estimator_dir(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "NcclEstimator":
        from estimator.bundle import read_json

        path = Path(path)
        meta = read_json(path / "meta.json")
        if meta.get("kind") != "nccl":
            raise ValueError(f"{path / 'meta.json'}: field 'kind' is {meta.get('kind')!r}, expected 'nccl'")
        model = cls(**meta["params"])
        model.version = str(meta.get("version", cls.version))
        model.params = {str(k): {n: float(v) for n, v in fig.items()} for k, fig in meta["figures"].items()}
        model.default = {n: float(v) for n, v in meta["default"].items()}
        if meta.get("residuals"):
            import xgboost as xgb

            for source, name in meta["residuals"].items():
                if "/" in name or name.startswith("."):
                    raise ValueError(f"{path / 'meta.json'}: field 'residuals.{source}' must name a file in the folder")
                booster = xgb.Booster()
                booster.load_model(bytearray((path / name).read_bytes()))
                model._boosters[str(source)] = booster
        return model

    def fit(self, frame: pd.DataFrame, runtime_us: np.ndarray) -> "NcclEstimator":
        frame = as_frame(frame)
        rows, y = Rows.of(frame), np.asarray(runtime_us, dtype=np.float64)
        keys = self._keys(frame)
        self.params = {}
        for key in pd.unique(keys):
            mask = keys == key
            if mask.sum() >= self.min_rows:
                self.params[str(key)] = fit_device(rows.take(mask), y[mask])
        self.default = median_params(self.params)
        if self.residual:
            import xgboost as xgb

            base, x = self._model(rows, keys)
            sources = np.array([k.split("|")[1] for k in keys])
            for source in pd.unique(sources):  # one residual per source: the timing methods differ in how, too
                mask = sources == source
                # every device weighs the same (mean weight 1, so XGBoost's minimum leaf weight still counts rows)
                _, index, counts = np.unique(keys[mask], return_inverse=True, return_counts=True)
                weight = mask.sum() / (len(counts) * counts[index])
                data = xgb.DMatrix(x[mask], label=np.log(y[mask] / base[mask]), weight=weight)
                self._boosters[str(source)] = xgb.train({"max_depth": 4, "eta": 0.1, "objective": "reg:absoluteerror",
                                                         "nthread": 2, "seed": 0}, data, 64)
        return self

    @staticmethod
    def _keys(frame: pd.DataFrame) -> np.ndarray:
        """``device|source``: each source is fitted on its own (the same all-reduce timed by nccl-tests and through
        torch.distributed differs by the call's host overhead)."""
        hardware = frame["hardware"].astype(str).to_numpy()
        source = frame["source"].astype(str).to_numpy() if "source" in frame.columns else np.full(len(frame), "")
        return np.char.add(np.char.add(hardware.astype(str), "|"), source.astype(str))

    def _figures(self, key: str) -> dict[str, float]:
        """A row's figures: its own (device, source) fit; else the device's fit from the preferred source (nccl-tests
        times the kernels, which is what a trace charges); else the median device."""
        if key in self.params:
            return self.params[key]
        device = key.split("|")[0]
        for source in PREFERRED_SOURCES:
            if f"{device}|{source}" in self.params:
                return self.params[f"{device}|{source}"]
        same = [k for k in self.params if k.split("|")[0] == device]
        return self.params[same[0]] if same else self.default

    def _model(self, rows: Rows, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out, choice = np.empty(len(rows.op)), np.zeros(len(rows.op), dtype=np.int64)
        for key in pd.unique(keys):
            mask = keys == key
            out[mask], choice[mask] = model_us(rows.take(mask), self._figures(str(key)))
        ops = pd.Index(RESIDUAL_OPS).get_indexer(rows.op)  # -1: unknown
        sources = pd.Index(PREFERRED_SOURCES).get_indexer([k.split("|")[1] or PREFERRED_SOURCES[0] for k in keys])
        x = np.column_stack([ops, sources, np.log2(rows.size + 1.0), rows.ranks, rows.per_node, choice, np.log2(out),
                             np.log2(rows.link)]).astype(np.float64)
        return out, x

    def chosen(self, frame: pd.DataFrame) -> np.ndarray:
        """The candidate (``ring/LL128``, ``nvls/Simple``, ...) the model says NCCL runs, per row."""
        frame = as_frame(frame)
        choice = self._model(Rows.of(frame), self._keys(frame))[1][:, 5].astype(int)
        return np.array(CANDIDATES)[choice]

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        frame = as_frame(frame)
        if len(frame) and set(frame["family"].astype(str)) != {"collective"}:
            raise ValueError("nccl estimator: only collective rows (column 'family')")
        keys = self._keys(frame)
        base, x = self._model(Rows.of(frame), keys)
        if self._boosters and len(x):
            import xgboost as xgb

            sources = np.array([k.split("|")[1] for k in keys])
            for source in pd.unique(sources):
                mask = sources == source
                fallback = next((s for s in PREFERRED_SOURCES if s in self._boosters), next(iter(self._boosters)))
                booster = self._boosters.get(str(source), self._boosters[fallback])
                base[mask] = base[mask] * np.exp(booster.predict(xgb.DMatrix(x[mask])))
        return base
