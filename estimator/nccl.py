"""A collective-time model with NCCL's own structure, fitted per device, with an optional learned residual.

NCCL times a collective by trying every (algorithm, protocol) pair its tuner allows and running the one its own
cost model says is fastest (``src/graph/tuning.cc``: time = base latency + steps x per-step latency + bytes /
(bandwidth of the pair)). On one node this model asks that cost model, with NCCL's own tables
(``estimator.nccl_tuner``), which pair runs, and times the pair with figures fitted to measurements: NCCL's switch
points are NCCL's, including where they are wrong (A100, 4 GPUs, all_gather: 22.5 us at 1 MiB on LL, 52.7 us at 2 MiB
on Simple, which NCCL's figures pick from 1.9 MB). Across nodes and for point-to-point calls, where the tables here do
not follow NCCL, the fastest fitted candidate runs:

Links: within a node the catalog's NVLink bandwidth; across nodes the catalog's per-GPU network bandwidth; and
**PCIe** where a node has no NVLink, or where NVLink only bridges pairs (not ``switched``) and more than two ranks
take part. A ring over PCIe crosses ``units`` PCIe endpoints (a GPU; a bridged pair enters PCIe as one unit): the
catalog's ``gpus_per_pcie_switch`` of them meet under one PCIe switch at the catalog's PCIe bandwidth, more share the
switches' uplinks, the CPU root complex and the link between sockets, so the per-GPU bandwidth falls as
(per switch / units) ^ contention (fitted; 1 is one shared bottleneck, aiconfigurator's L40S gives about 2: 20, 5
and 1.2 GB/s bus bandwidth at 2, 4 and 8 GPUs, 2 to a switch). On a bridged box the PCIe ring runs at
``pcie_scale`` of the protocol shares its NVLink ring reaches (fitted).

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
- **p2p** (all_to_all, send_recv): NCCL's grouped send/receive, LL or Simple, a latency per call (the whole of it:
  no ring base latency) plus one per peer, and its own shares of the node's link (no channel fill), capped across
  nodes by the network's share: a send is no ring step (Vidur's A40 sends reach a tenth of the bridge its
  all-reduces reach; fitted together, a device measured on sends only predicted its all-reduces 15 times too slow).

Fitted figures (log-parameters, ``scipy.optimize.least_squares`` on the log error) are per device. A figure that a
device's own rows cannot pin (``ring_loss`` without NVLink rings at two rank counts, ``pcie_contention`` without PCIe
rings at two endpoint counts beyond a switch's, ``pcie_scale`` without NVLink and PCIe rings) is held at the median
of the devices whose rows do pin it (their first fits; then one refit of the device with those held), so a GPU
count never measured on a PCIe box is predicted by the same physics as on the others; so are the rings' figures of a
device measured on sends only, and the sends' of one measured on rings only. A device with no collective
measurements takes the figures of a fitted device whose catalog links are the same as its own (``same_links_as``: a
catalog variant of a measured GPU), else the median of the fitted devices' figures, applied to its own catalog link
and network bandwidths, which is how multi-node and unmeasured GPUs are predicted. ``residual=True`` adds a small
XGBoost per source on
log(measured / model) over (op, log2 bytes, ranks, ranks per node, the model's chosen candidate and time, the ring's
link bandwidth), every device of the source weighing the same; a row without a source takes nccl-tests'.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.frames import as_frame, factorize
from stepcast.estimator.hardware_table import row_hardware
from stepcast.estimator.nccl_tuner import NVLS_OPS, P2P_OPS, PROTOCOLS, arch_figures, spans_nodes, tuner_times
from stepcast.estimator.support import Support
from stepcast.estimator.workload import bus_factor, network_rails
from stepcast.profiling.hardware import UnknownHardwareError, lookup
from stepcast.errors import InputError


def switched(spec) -> bool:
    """Whether a node's GPUs meet at an NVSwitch (the catalog's ``nvlink_topology``: ``switch``); ``pairs`` boards
    (H100 NVL, A100 PCIe, A40, RTX A6000) are bridged two by two and meet the rest of the node over PCIe."""
    return spec.nvlink_topology == "switch"


#: payload bytes per byte on the wire
PAYLOAD_SHARE = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}
#: fitted figures (each stored as its log) and their starting values: microseconds, shares of link bandwidth, bytes
PARAMS: dict[str, float] = {
    "base_us": 5.0,
    "step_us_LL": 0.6, "step_us_LL128": 1.2, "step_us_Simple": 3.0,
    "share_LL": 0.5, "share_LL128": 0.8, "share_Simple": 0.8,
    "fill_bytes_LL": 2.0 ** 16, "fill_bytes_LL128": 2.0 ** 19, "fill_bytes_Simple": 2.0 ** 21,
    "nvls_step_us": 3.0, "nvls_share": 1.0,
    "p2p_us": 8.0, "p2p_peer_us": 0.5, "p2p_share_LL": 0.5, "p2p_share_Simple": 0.8,
    "net_step_us": 6.0, "net_share": 0.8,
    "ring_loss": 1.0,
    "pcie_contention": 1.0, "pcie_scale": 1.0,
}
#: figures are fitted per device only where its rows pin them, else held at the median of the devices whose rows do
#: (``Rows.pinned``); among them a send's figures and the rings' (the network's belong to both): a device measured
#: without one kind takes that kind's figures from the devices measured with it
P2P_FIGURES = ("p2p_us", "p2p_peer_us", "p2p_share_LL", "p2p_share_Simple")
#: the sends' link figures: across nodes the network sets a send's pace, so only sends within a node pin them
P2P_LINK_FIGURES = ("p2p_share_LL", "p2p_share_Simple")
RING_FIGURES = ("base_us", "step_us_LL", "step_us_LL128", "step_us_Simple", "share_LL", "share_LL128",
                "share_Simple", "fill_bytes_LL", "fill_bytes_LL128", "fill_bytes_Simple", "nvls_step_us",
                "nvls_share", "ring_loss")
#: GPUs an NVLink bridge joins on a ``pairs`` board (the catalog's PCIe switch size is ``gpus_per_pcie_switch``)
BRIDGE = 2.0
NAMES = tuple(PARAMS)
#: whose figures predict a row of a device that has no fit of the row's own source
PREFERRED_SOURCES = ("aiconfigurator", "profiler", "vidur")
#: the residual's inputs, in the column order of ``NcclEstimator._model``'s matrix
RESIDUAL_FEATURES = ("op", "source", "log2_bytes", "ranks", "ranks_per_node", "candidate", "log2_model_us",
                     "log2_link_bandwidth")
RESIDUAL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv")
#: candidate labels, in the column order of ``candidate_times``
CANDIDATES = tuple(f"ring/{p}" for p in PROTOCOLS) + tuple(f"tree/{p}" for p in PROTOCOLS) + ("nvls/Simple",) + \
    ("p2p/LL", "p2p/Simple")
#: the columns of ``estimator.nccl_tuner.tuner_times`` as indices of CANDIDATES
TUNER_CANDIDATES = tuple(CANDIDATES.index(c) for c in ("ring/LL", "ring/LL128", "ring/Simple", "nvls/Simple"))


#: what the model reads of a device from the catalog beside its architecture, in ``link_figures``' order. A "node"
#: of this model is an NVLink domain (``nvlink_domain_gpus``): one host of an HGX board, the 72 GPUs of an NVL72
#: rack, which NCCL itself tunes as one node (``src/graph/tuning.cc``: "MNNVL support - treat as a single NVLink
#: connected node"); its NICs are those of every host it joins
LINK_FIGURES = ("nvlink_or_pcie", "pcie", "network", "switched", "nvls", "has_nvlink", "domain_gpus",
                "gpus_per_pcie_switch", "domain_nics")


def link_figures(spec) -> tuple[float, ...]:
    """``LINK_FIGURES`` of a catalog entry (``Rows``): NVLink (else PCIe), PCIe and one NIC's bandwidth (bytes per
    microsecond), NVSwitch, NVLS, NVLink at all, GPUs per NVLink domain and per PCIe switch, NICs per domain."""
    return (spec.intra_node_bandwidth / 1e6, (spec.pcie_bandwidth_gbps or 16.0) * 1e3, spec.inter_node_bandwidth / 1e6,
            float(switched(spec)), float(switched(spec) and spec.architecture in {"hopper", "blackwell"}),
            float(bool(spec.nvlink_bandwidth_gbps)), float(spec.nvlink_domain_gpus), float(spec.gpus_per_pcie_switch),
            float(spec.nics_per_nvlink_domain))


def same_links_as(device: str, fitted: list[str]) -> str | None:
    """The fitted device whose collectives ``device``'s would be: one with every catalog figure the model reads
    (``link_figures``, the architecture's tuner figures) equal, the nearest in memory bandwidth (a reduction's pace)
    among several, then by name; ``device`` itself when fitted; None when no fitted device has its links (or it is
    not in the catalog). A catalog variant (the 96 GB H100 SXM at 500 W, the 40 GB A100, an RTX A6000 beside an A40)
    differs from its measured sibling in nothing the structure reads, so the sibling's fitted figures time it."""
    if device in fitted:
        return device
    try:
        spec = lookup(device)
        mine = (link_figures(spec), tuple(arch_figures(spec)))
        same = [(abs(np.log(lookup(f).memory_bandwidth / spec.memory_bandwidth)), f) for f in sorted(fitted)
                if (link_figures(lookup(f)), tuple(arch_figures(lookup(f)))) == mine]
    except UnknownHardwareError:  # a device the catalog does not know has no links to match
        return None
    return min(same)[1] if same else None


@dataclass
class Rows:
    """The collective columns of a frame as arrays, with each row's device figures (bytes per microsecond)."""

    op: np.ndarray
    size: np.ndarray
    ranks: np.ndarray
    per_node: np.ndarray
    link: np.ndarray  # NVLink where the node has it (else PCIe)
    network: np.ndarray
    nvls: np.ndarray  # the device has NVSwitch multicast (Hopper / Blackwell with NVLink)
    hardware: np.ndarray = field(default_factory=lambda: np.array([]))
    pcie: np.ndarray = field(default_factory=lambda: np.array([]))
    units: np.ndarray = field(default_factory=lambda: np.array([]))  # PCIe endpoints the ring crosses; 0: NVLink
    per_switch: np.ndarray = field(default_factory=lambda: np.array([]))  # the catalog's gpus_per_pcie_switch
    bridged: np.ndarray = field(default_factory=lambda: np.array([]))  # NVLink joins pairs only
    tuned: np.ndarray = field(default_factory=lambda: np.array([]))  # NCCL's tuner's candidate, -1: not modelled
    sends: np.ndarray = field(default_factory=lambda: np.array([]))  # a point-to-point call (P2P_OPS), once per row
    rails: np.ndarray = field(default_factory=lambda: np.array([]))  # NICs a call's traffic across nodes adds up

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "Rows":
        hardware = frame["hardware"].astype(str).to_numpy()
        codes, names = factorize(hardware)  # the catalog read once per distinct device, spread over its rows
        specs = [lookup(str(h)) for h in names]
        figures = np.array([link_figures(s) for s in specs], dtype=np.float64).reshape(-1, len(LINK_FIGURES))[codes]
        ranks = frame["ranks"].to_numpy(np.float64)
        per_node = np.minimum(frame["ranks_per_node"].to_numpy(np.float64), ranks)
        bridged = (figures[:, 5] > 0) & (figures[:, 3] == 0)
        on_node = np.minimum(per_node, figures[:, 6])
        # a node's ranks on PCIe: every GPU of a node without NVLink, every pair of a bridged one beyond one pair
        units = np.where(figures[:, 5] == 0, on_node,
                         np.where(bridged & (on_node > BRIDGE), np.ceil(on_node / BRIDGE), 0.0))
        tuner = np.array([arch_figures(s) for s in specs], dtype=np.float64).reshape(-1, 2)[codes]
        op, size = frame["op"].astype(str).to_numpy(), frame["bytes"].to_numpy(np.float64)
        estimate = tuner_times(op, size, ranks, per_node, units, figures[:, 0], figures[:, 1], figures[:, 4] > 0,
                               tuner[:, 0], tuner[:, 1] > 0)
        modelled = ~np.isnan(estimate[:, 0])
        tuned = np.where(modelled, np.array(TUNER_CANDIDATES)[np.argmin(np.where(modelled[:, None], estimate, 0.0),
                                                                          axis=1)], -1)
        return cls(op, size, ranks, per_node,
                   figures[:, 0], figures[:, 2], figures[:, 4] > 0, hardware, figures[:, 1], units, figures[:, 7],
                   bridged, tuned, np.isin(op, P2P_OPS),
                   network_rails(op, ranks, per_node, figures[:, LINK_FIGURES.index("domain_nics")]))

    def take(self, mask: np.ndarray) -> "Rows":
        return Rows(*(getattr(self, f.name)[mask] for f in fields(self)))

    def link_bandwidth(self, p: dict[str, float]) -> np.ndarray:
        """Bytes per microsecond a ring's slowest hop carries per GPU before the protocol's share: NVLink, or PCIe
        shared by the endpoints beyond one switch's through the root complex ((per_switch / units) ^ contention), on
        a bridged box scaled by ``pcie_scale``."""
        shared = np.minimum(1.0, self.per_switch / np.maximum(self.units, 1.0)) ** p["pcie_contention"]
        pcie = self.pcie * shared * np.where(self.bridged, p["pcie_scale"], 1.0)
        return np.where(self.units > 0, pcie, self.link)

    def pinned(self) -> dict[str, bool]:
        """Which figures these rows determine (every figure named): the rings' need rings and a send's need sends
        (Vidur's A40 sends reach a tenth of the bridge its all-reduces reach: one kind says nothing of the other),
        and a send's share of the node's link needs sends within a node. On one node a figure of a protocol or of
        NVLS needs rows NCCL's tuner runs on it (``tuned``; rows it is not modelled for may run any ring): a device
        whose large calls all ran NVLS says nothing of its rings' Simple share (Vidur's H100 at 4 and 8 GPUs, whose
        2-GPU calls run rings). The per-step latencies need rings of two step counts (all_reduce's 2(n-1) and
        all_gather's n-1 are two; one leaves them interchangeable with the base latency); ring_loss and the
        contention scale bandwidth with the rank count, so they need rings at two counts on their link (NVLink,
        on the bandwidth protocols LL128 and Simple: the tuner runs LL where latency is the whole of a call) or at
        two PCIe endpoint counts beyond a switch's (one leaves them interchangeable with the protocol shares); the
        PCIe scale needs a bridged box's rings on both links."""
        ring = (self.ranks > 1) & ~self.sends
        sends = (self.ranks > 1) & self.sends
        local_sends = bool((sends & (self.ranks <= self.per_node)).any())  # a send's link share: sends within a node
        runs = {p: ring & ((self.tuned == CANDIDATES.index(f"ring/{p}")) | (self.tuned < 0)) for p in PROTOCOLS}
        nvls = self.tuned == CANDIDATES.index("nvls/Simple")  # the tuner models no one-rank row
        bandwidth = runs["LL128"] | runs["Simple"]
        nvlink = np.unique(self.ranks[bandwidth & (self.units == 0) & (self.ranks <= self.per_node)])
        pcie = np.unique(np.maximum(self.units, self.per_switch)[ring & (self.units > 0)])  # one switch: one count
        pins = {k: True for k in NAMES} | {k: bool(ring.any()) for k in RING_FIGURES} | \
            {k: bool(sends.any()) for k in P2P_FIGURES} | {k: local_sends for k in P2P_LINK_FIGURES}
        steps = np.where(self.op == "all_reduce", 2.0, 1.0) * (self.ranks - 1.0)  # a ring's step count per row
        for p in PROTOCOLS:
            pins |= {f"share_{p}": bool(runs[p].any()), f"fill_bytes_{p}": bool(runs[p].any()),
                     f"step_us_{p}": len(np.unique(steps[runs[p]])) >= 2}
        return pins | {"nvls_share": bool(nvls.any()), "nvls_step_us": bool(nvls.any()),
                       "ring_loss": len(nvlink) >= 2, "pcie_contention": len(pcie) >= 2,
                       "pcie_scale": bool(self.bridged.any()) and len(nvlink) >= 1 and len(pcie) >= 1}


def candidate_times(rows: Rows, p: dict[str, float]) -> np.ndarray:
    """Microseconds of every (algorithm, protocol) candidate per row, ``inf`` where NCCL would not offer it;
    the per-call base latency is not included."""
    n, r, size = np.maximum(rows.ranks, 1.0), np.maximum(rows.per_node, 1.0), rows.size
    nodes = np.ceil(n / r)
    multi = nodes > 1
    local = rows.link_bandwidth(p)
    link = np.where(multi, np.minimum(local, rows.network * p["net_share"] * rows.rails), local)  # a channel per NIC
    wire = size * bus_factor(rows.op, n)
    is_ar = rows.op == "all_reduce"
    p2p = rows.sends
    ring_steps = np.where(is_ar, 2.0 * (n - 1.0), n - 1.0)
    ring_net_steps = np.where(multi, ring_steps * nodes / n, 0.0)  # the hops that leave a node
    tree_intra = np.where(is_ar, 2.0 * (r - 1.0), r - 1.0)
    tree_net = np.where(is_ar, 2.0, 1.0) * np.ceil(np.log2(nodes))
    # fewer ranks reach less of the link: n^2 / (n^2 + ring_loss) of it (aiconfigurator's 512 MiB calls on H100, A100
    # and B200 alike: 0.71-0.77 of the 8-GPU bus bandwidth at 2 GPUs, 0.92-0.95 at 4)
    reach = np.where(rows.units > 0, 1.0, n * n / (n * n + p["ring_loss"]))  # PCIe: contention says it
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
    for proto in ("LL", "Simple"):  # own figures: a send is no ring step (fewer channels, no reduction, no reach);
        # its share is of the node's link: across nodes the network's share caps it. No channel fill: fitted on
        # NVLink, where any fill costs nothing, it came out at 240 KB and timed the L40S's small sends over PCIe 40x
        bw = np.where(multi, np.minimum(local * p[f"p2p_share_{proto}"], rows.network * p["net_share"]),
                      local * p[f"p2p_share_{proto}"]) * PAYLOAD_SHARE[proto]
        t = wire / bw + p["p2p_us"] + (n - 1.0) * p["p2p_peer_us"] + np.where(multi, p["net_step_us"], 0.0)
        out.append(np.where(p2p, t, np.inf))
    times = np.column_stack(out)
    return np.where(n[:, None] <= 1.0, 0.0, times)


def model_us(rows: Rows, p: dict[str, float], softness: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(microseconds, index of the chosen candidate) per row: the candidate NCCL's own tuner picks
    (``Rows.tuned``), timed by the fitted figures; rows the tuner is not modelled for take the fastest fitted
    candidate. ``softness`` > 0 replaces that minimum by a smooth one (log-sum-exp over log times at that
    temperature), which the fit needs: the hard minimum has no gradient towards a candidate not yet the fastest."""
    times = candidate_times(rows, p)
    tuned = rows.tuned >= 0
    choice = np.where(tuned, rows.tuned, np.argmin(times, axis=1))
    best = times[np.arange(len(times)), choice]
    if softness > 0:
        with np.errstate(divide="ignore"):
            logs = np.log(np.where(times > 0, times, np.inf))
        lowest = np.log(np.maximum(best, 1e-12))
        spread = np.exp(-(logs - lowest[:, None]) / softness).sum(axis=1)
        best = np.where((best > 0) & ~tuned, np.exp(lowest - softness * np.log(spread)), best)
    return np.where(rows.sends, 0.0, p["base_us"]) + best, choice  # p2p_us is a send's whole latency


#: the range each figure may take in a fit (physical limits, and what keeps the search out of flat regions)
BOUNDS: dict[str, tuple[float, float]] = {"us": (0.05, 200.0), "share": (0.05, 2.0), "bytes": (64.0, 2.0 ** 27),
                                          "loss": (0.01, 20.0), "contention": (0.05, 4.0),
                                          "scale": (0.05, 8.0)}
#: rows per fit (a random subset of bigger tables: the figures are few, and the fit costs per row)
FIT_ROWS = 800


def _kind(name: str) -> str:
    for kind in ("share", "bytes", "loss", "contention", "scale"):
        if kind in name:
            return kind
    return "us"


def _unused_to_start(residual, x: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """``x`` with every figure the rows do not use (no multi-node row for the network figures, no NVLS row for the
    switch's) put back to its default start ``x0``: the start that won may be a random one, and such a figure is what
    predicts the rows this device never measured. A figure counts as unused only when setting it back leaves every
    row's time as it was (a fill below every row's size has no gradient either, but setting it back would move rows)."""
    now = residual(x)
    for i in np.flatnonzero(x != x0):
        trial = x.copy()
        trial[i] = x0[i]
        if np.array_equal(residual(trial), now):
            x = trial
    return x


def fit_device(rows: Rows, runtime_us: np.ndarray, starts: int = 3, seed: int = 0,
               fixed: dict[str, float] | None = None, start: dict[str, float] | None = None) -> dict[str, float]:
    """Least-squares fit of one device's figures on log(time), from ``starts`` starting points (``start``, by default
    the default figures, then random draws within the bounds; the best fit wins); ``fixed`` figures are held, figures
    no row constrains keep their start."""
    from scipy.optimize import least_squares

    fixed = fixed or {}
    free = [k for k in NAMES if k not in fixed]
    rng = np.random.default_rng(seed)
    if len(runtime_us) > FIT_ROWS:
        keep = np.sort(rng.choice(len(runtime_us), FIT_ROWS, replace=False))
        rows, runtime_us = rows.take(keep), runtime_us[keep]
    lower = np.log([BOUNDS[_kind(k)][0] for k in free])
    upper = np.log([BOUNDS[_kind(k)][1] for k in free])
    target = np.log(runtime_us)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(model_us(rows, fixed | dict(zip(free, np.exp(x))), softness=0.05)[0]) - target

    best = None
    for i in range(starts):
        x0 = np.log([(start or PARAMS)[k] for k in free]) if i == 0 else rng.uniform(lower, upper)
        solution = least_squares(residual, np.clip(x0, lower, upper), bounds=(lower, upper), loss="soft_l1",
                                 f_scale=0.1, diff_step=1e-3, max_nfev=200, tr_solver="lsmr")
        if best is None or solution.cost < best.cost:
            best = solution
    best.x = _unused_to_start(residual, best.x, np.log([(start or PARAMS)[k] for k in free]))
    return fixed | dict(zip(free, np.exp(best.x)))


def median_params(fitted: dict[str, dict[str, float]], pinned: dict[str, dict[str, bool]] | None = None
                  ) -> dict[str, float]:
    """The figures of a device never measured: per figure, the geometric median over the fitted devices whose rows
    pin it (``pinned``: per device, from ``Rows.pinned``; every device where absent), its start where none does."""
    if not fitted:
        return dict(PARAMS)
    out = {}
    for k in NAMES:
        keys = [d for d in fitted if pinned is None or pinned.get(d, {}).get(k, True)]
        out[k] = float(np.exp(np.median([np.log(fitted[d][k]) for d in keys]))) if keys else PARAMS[k]
    return out


class NcclEstimator(KernelEstimator):
    """Collective estimator: NCCL's algorithm / protocol structure with per-device fitted figures, plus an optional
    learned residual. Only the ``collective`` family."""

    name = "nccl"
    version = "7"  # 2: PCIe links, pooled figures; 3: the catalog's PCIe switch size, one pooled refit; 4: NCCL's
    # tuner picks the candidate on one node, a residual applies only across the node spans it was trained on; 5: p2p
    # calls have their own figures; a device measured without rings (sends) takes theirs from the devices with them;
    # 6: a ring or tree across nodes adds up the NICs its node's ranks reach (estimator.workload.network_rails); 7: a
    # protocol's and NVLS's figures are a device's own only where the tuner runs its rows on them (Rows.pinned)

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
        self._spans: dict[str, list[bool]] = {}  # source -> node spans its residual saw (False: one node, True: more)
        self.support: Support | None = None  # sizes and (device, op, ranks, ranks per node) seen: the in_range flag

    def get_params(self) -> dict[str, Any]:
        return {"residual": self.residual, "min_rows": self.min_rows}

    @property
    def families(self) -> tuple[str, ...]:
        return ("collective",)

    @property
    def feature_names(self) -> list[str]:
        """What the model reads (the model card's features): the row's collective, the catalog's figures of its
        device, and with a residual that model's inputs."""
        read = ["op", "bytes", "ranks", "ranks_per_node", "source",
                "catalog: NVLink / PCIe / network bandwidth, NVSwitch, PCIe switch size, architecture"]
        return read + [f"residual: {name}" for name in RESIDUAL_FEATURES] * bool(self.residual)

    # -- persistence: meta.json (figures per device and source) plus one UBJ booster per residual source --------
    def save(self, path: str | Path) -> Path:
        from stepcast.estimator.bundle import seal_estimator_dir, write_json_atomic
        from stepcast.profiling.atomic import write_bytes_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        residuals = {}
        for i, (source, booster) in enumerate(sorted(self._boosters.items())):
            residuals[source] = f"residual_{i}.ubj"
            write_bytes_atomic(path / residuals[source], bytes(booster.save_raw("ubj")))
        write_json_atomic(path / "meta.json", {"kind": "nccl", "version": self.version, "params": self.get_params(),
                                               "figures": self.params, "default": self.default,
                                               "residuals": residuals, "residual_spans": self._spans,
                                               "support": self.support.to_dict() if self.support else None})
        seal_estimator_dir(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "NcclEstimator":
        from stepcast.estimator.bundle import read_json

        path = Path(path)
        meta = read_json(path / "meta.json")
        if meta.get("kind") != "nccl":
            raise InputError(f"{path / 'meta.json'}: field 'kind' is {meta.get('kind')!r}, expected 'nccl'")
        model = cls(**meta["params"])
        model.version = str(meta.get("version", cls.version))
        model.params = {str(k): {n: float(v) for n, v in fig.items()} for k, fig in meta["figures"].items()}
        model.default = {n: float(v) for n, v in meta["default"].items()}
        model.support = Support.from_dict(meta["support"]) if meta.get("support") else None
        if meta.get("residuals"):
            import xgboost as xgb

            for source, name in meta["residuals"].items():
                if "/" in name or name.startswith("."):
                    raise InputError(f"{path / 'meta.json'}: field 'residuals.{source}' must name a file in the folder")
                booster = xgb.Booster()
                booster.load_model(bytearray((path / name).read_bytes()))
                model._boosters[str(source)] = booster
            model._spans = {str(k): [bool(v) for v in spans] for k, spans in meta.get("residual_spans", {}).items()}
        return model

    def fit(self, frame: pd.DataFrame, runtime_us: np.ndarray) -> "NcclEstimator":
        frame = as_frame(frame)
        rows, y = Rows.of(frame), np.asarray(runtime_us, dtype=np.float64)
        keys = self._keys(frame, stand_ins=False)
        self.support = Support.fit("collective", frame, row_hardware(frame["hardware"], frame["dtype"]))
        self.params, pinned = {}, {}
        for key in pd.unique(keys):
            mask = keys == key
            if mask.sum() >= self.min_rows:
                pinned[str(key)] = pins = rows.take(mask).pinned()
                self.params[str(key)] = fit_device(rows.take(mask), y[mask],
                                                   fixed={k: PARAMS[k] for k in NAMES if not pins[k]})
        # what a device's rows leave open, the devices that measured it say: every figure's median over the first
        # fits of the devices that pin it, then one refit of each device that does not pin them all, with its open
        # figures held at those medians (at most two fits per device, whatever the number of open figures; none where
        # they move none of its rows)
        self.default = median_params(self.params, pinned)
        for key, pins in pinned.items():
            held = {k: self.default[k] for k in NAMES if not pins[k]}
            if not held:
                continue
            now, mask = self.params[key], keys == key
            mine = rows.take(mask)
            if np.allclose(model_us(mine, now)[0], model_us(mine, now | held)[0]):
                self.params[key] = now | held  # figures these rows never use: no refit
            else:
                self.params[key] = fit_device(mine, y[mask], fixed=held, start=now)
        self.default = median_params(self.params, pinned)
        if self.residual:
            import xgboost as xgb

            base, x = self._model(rows, keys)
            sources = np.array([k.split("|")[1] for k in keys])
            across = spans_nodes(rows.ranks, rows.per_node)
            for source in pd.unique(sources):  # one residual per source: the timing methods differ in how, too
                mask = sources == source
                self._spans[str(source)] = sorted({bool(v) for v in across[mask]})
                # every device weighs the same (mean weight 1, so XGBoost's minimum leaf weight still counts rows)
                _, index, counts = np.unique(keys[mask], return_inverse=True, return_counts=True)
                weight = mask.sum() / (len(counts) * counts[index])
                data = xgb.DMatrix(x[mask], label=np.log(y[mask] / base[mask]), weight=weight)
                self._boosters[str(source)] = xgb.train({"max_depth": 4, "eta": 0.1, "objective": "reg:absoluteerror",
                                                         "nthread": 2, "seed": 0}, data, 64)
        return self

    def fitted_devices(self) -> list[str]:
        return sorted({key.split("|")[0] for key in self.params})

    def stand_ins(self, hardware) -> np.ndarray:
        """Per row, the device whose fit times it: its own, or a fitted one with the same links (``same_links_as``);
        the row's own where none has."""
        codes, names = factorize(np.asarray(hardware, dtype=object).astype(str))
        fitted = self.fitted_devices()
        chosen = np.array([same_links_as(str(h), fitted) or str(h) for h in names], dtype=object)
        return chosen[codes].astype(str)

    def _keys(self, frame: pd.DataFrame, stand_ins: bool = True) -> np.ndarray:
        """``device|source``: each source is fitted on its own (the same all-reduce timed by nccl-tests and through
        torch.distributed differs by the call's host overhead). ``stand_ins``: a device not fitted under the name of a
        fitted one with its links (what predictions read; a fit keys by the rows' own devices)."""
        hardware = frame["hardware"].astype(str).to_numpy()
        if stand_ins:
            hardware = self.stand_ins(hardware)
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
        link = np.empty(len(rows.op))
        for key in pd.unique(keys):
            mask = keys == key
            figures = PARAMS | self.default | self._figures(str(key))  # a bundle saved before a figure existed
            out[mask], choice[mask] = model_us(rows.take(mask), figures)
            link[mask] = rows.take(mask).link_bandwidth(figures)
        ops = pd.Index(RESIDUAL_OPS).get_indexer(rows.op)  # -1: unknown
        sources = pd.Index(PREFERRED_SOURCES).get_indexer([k.split("|")[1] or PREFERRED_SOURCES[0] for k in keys])
        x = np.column_stack([ops, sources, np.log2(rows.size + 1.0), rows.ranks, rows.per_node, choice, np.log2(out),
                             np.log2(link)]).astype(np.float64)
        return out, x

    def chosen(self, frame: pd.DataFrame) -> np.ndarray:
        """The candidate (``ring/LL128``, ``nvls/Simple``, ...) the model says NCCL runs, per row."""
        frame = as_frame(frame)
        choice = self._model(Rows.of(frame), self._keys(frame))[1][:, 5].astype(int)
        return np.array(CANDIDATES)[choice]

    def predict_with_support(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Predictions and the router's flags (``estimator.router``). In shape: the size within the training range
        and the device measured at the row's op, rank count and ranks per node (``estimator.support.SEEN_WITH``);
        unlike XGBoost, which extrapolates badly to a topology it has not seen, the structure times one from the
        device's own figures (held-out GPU counts: docs/estimators.md, "Collectives: the NCCL-structured model"), so an
        unmeasured topology is a new shape, not a new device. Hardware seen: the device was fitted, or has a fitted
        device's links (``same_links_as``). Spec: a kind of device (GPU, CPU) fitted on (the structure
        takes any device's links from the catalog, but gloo on a CPU is not NCCL). Saved without a support:
        everything in range."""
        frame = as_frame(frame)
        return (self.predict(frame), *self._flags(frame))

    def _flags(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shape in range, hardware seen, spec in range) per row, as ``predict_with_support`` describes them."""
        if self.support is None:
            ones = np.ones(len(frame), dtype=bool)
            return ones, ones, ones
        hw = row_hardware(frame["hardware"], frame["dtype"])
        as_fitted = frame.assign(hardware=self.stand_ins(frame["hardware"]))  # a device with a fitted one's links
        shape_ok = self.support.shape_in_range(frame) & self.support.configuration_seen(as_fitted)
        kind_ok = hw.per_row(np.isin(hw.device_spec["hw_is_gpu"], self.support.kinds))
        return shape_ok, hw.per_row(self.support.seen(self.stand_ins(hw.devices))), kind_ok

    def in_range(self, frame: pd.DataFrame) -> np.ndarray:
        shape_ok, seen, _ = self._flags(as_frame(frame))
        return shape_ok & seen

    def support_note(self) -> str:
        return ("a device counts as seen once fitted, and so does one whose catalog links equal a fitted device's "
                "(it takes that device's figures); an op, rank count or ranks per node it was not measured at stays "
                "with the model, flagged out of range")

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        frame = as_frame(frame)
        if len(frame) and set(frame["family"].astype(str)) != {"collective"}:
            raise ValueError("nccl estimator: only collective rows (column 'family')")
        keys, rows = self._keys(frame), Rows.of(frame)
        base, x = self._model(rows, keys)
        if self._boosters and len(x):
            import xgboost as xgb

            sources = np.array([k.split("|")[1] for k in keys])
            across = spans_nodes(rows.ranks, rows.per_node)
            for source in pd.unique(sources):
                mask = sources == source
                fallback = next((s for s in PREFERRED_SOURCES if s in self._boosters), next(iter(self._boosters)))
                name = str(source) if str(source) in self._boosters else fallback
                # a residual learned within nodes says nothing across them (nor the reverse): the structure alone
                seen = np.isin(across[mask], self._spans.get(name, [False, True]))
                factor = np.exp(self._boosters[name].predict(xgb.DMatrix(x[mask])))
                base[mask] = base[mask] * np.where(seen, factor, 1.0)
        return base
