"""NCCL's own tuner: which (algorithm, protocol) NCCL runs a single-node collective with, by NCCL's own cost model.

NCCL picks a collective's algorithm and protocol by its own estimate (``src/graph/tuning.cc``,
``ncclTopoTuneModel``; ``src/enqueue.cc``, ``ncclTopoGetAlgoTime``), not by what is fastest on the machine: A100,
4 GPUs, all_gather runs 22.5 us at 1 MiB (LL128) and 52.7 us at 2 MiB (Simple, chosen where NCCL's figures say it
wins). ``estimator.nccl`` times each candidate with fitted figures and takes the one this module names. The tables
below are NCCL's (2.23-2.26 ``tuning.cc``; 2.27 on keep the same values in its tuner-constants table); nothing here is
fitted.

The ring graph's bus bandwidth is what NCCL's topology search finds: channels x per-channel speed, bounded by the
GPU's links as NCCL rates them. NCCL rates an NVLink at 20 GB/s on SM70/SM80, 20.6 on SM90 and 40.1 on SM100, 0.8 of
the per-direction rate the catalog lists (25 and 50 GB/s per link); a PCIe link at width x rate / 80 (24 GB/s for
Gen4 x16, whose per-direction rate is 32), 0.75 of it. The search fills the links (H100: 6 rings at 60 GB/s of 370.8),
so the bus bandwidth is that share of the catalog's aggregate. The LL128 per-channel cap
(``perChMaxRingLL128Bws``) binds nowhere on the switched boxes measured (H100: 12 channels x 36.7 GB/s against 0.92 x
360) and is left out.
"""
from __future__ import annotations

import numpy as np

from stepcast.estimator.workload import POINT_TO_POINT

PROTOCOLS = ("LL", "LL128", "Simple")
#: collectives NVLS serves, and those NCCL runs as grouped sends and receives
NVLS_OPS = ("all_reduce", "all_gather", "reduce_scatter")
P2P_OPS = POINT_TO_POINT
#: ring base latency per protocol (``baseLat[RING]``), microseconds
BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
#: ring per-step latency on the intra-node link type (``hwLat[NVLINK|PCI][RING]``), microseconds
STEP_US = {"nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}, "pci": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}}
#: NVLS latency on one node (``hwLat[NVLINK][NVLS][SIMPLE]``; its base latency is not added), microseconds
NVLS_US = 25.0
#: LL bus-bandwidth cap on one node by compute-capability class (``llMaxBws[idx][0]``), GB/s
LL_MAX_GBS = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
#: compute capabilities LL128 is enabled on by default (with an NVLink intra-node path)
LL128_CAPABILITIES = {(7, 0), (8, 0), (9, 0), (10, 0), (12, 0)}
#: NCCL's rating of a link as a share of the catalog's per-direction rate
NVLINK_SHARE, PCIE_SHARE = 0.8, 0.75
#: protocol bus-bandwidth factors of a ring (LL: half, LL128: 120 of 128 bytes as NCCL rounds it)
RING_FACTOR = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


def arch_figures(spec) -> tuple[float, bool]:
    """(LL bus-bandwidth cap in GB/s, LL128 enabled by compute capability) as the tuner indexes a device: by its
    compute capability (>= 10.0 Blackwell, >= 9.0 Hopper, >= 8.0 Ampere, so Ada's 8.9 reads Ampere's)."""
    major, minor = spec.compute_capability or (8, 0)
    arch = "blackwell" if major >= 10 else "hopper" if major >= 9 else "ampere" if major >= 8 else "volta"
    return LL_MAX_GBS[arch], (major, minor) in LL128_CAPABILITIES


def spans_nodes(ranks: np.ndarray, per_node: np.ndarray) -> np.ndarray:
    """Whether each call's ranks span more than one node."""
    return np.maximum(ranks, 1.0) > np.maximum(per_node, 1.0)


def tuner_times(op: np.ndarray, size: np.ndarray, ranks: np.ndarray, per_node: np.ndarray, units: np.ndarray,
                link: np.ndarray, pcie: np.ndarray, nvls: np.ndarray, ll_max: np.ndarray, ll128_ok: np.ndarray
                ) -> np.ndarray:
    """NCCL's estimate (microseconds) of each candidate per row, columns ring/LL, ring/LL128, ring/Simple, nvls/Simple;
    ``inf`` where NCCL does not offer the candidate, ``nan`` on rows it does not model here (one rank, several nodes,
    point-to-point), where the caller decides. ``link`` and ``pcie`` are the catalog's per-direction bytes per
    microsecond; ``units`` > 0 marks a ring that crosses PCIe (its intra-node hardware is then PCI, and LL128 is
    off)."""
    n = np.maximum(ranks, 1.0)
    is_ar = op == "all_reduce"
    steps = np.where(is_ar, 2.0 * (n - 1.0), np.where(np.isin(op, ("all_gather", "reduce_scatter")), n - 1.0, n))
    on_pcie = units > 0
    bus = np.where(on_pcie, PCIE_SHARE * pcie, NVLINK_SHARE * link) / 1e3  # GB/s
    algorithm_share = n / np.maximum(steps, 1.0)  # ring: bus bandwidth to algorithm bandwidth
    out = np.full((len(n), 4), np.inf)
    for i, proto in enumerate(PROTOCOLS):
        bandwidth = RING_FACTOR[proto] * bus
        if proto == "LL":
            bandwidth = np.minimum(ll_max, bandwidth)
        latency = BASE_US[proto] + steps * np.where(on_pcie, STEP_US["pci"][proto], STEP_US["nvlink"][proto])
        t = latency + size / (1e3 * bandwidth * algorithm_share)
        out[:, i] = np.where(ll128_ok & ~on_pcie, t, np.inf) if proto == "LL128" else t
    nvls_ok = nvls & np.isin(op, NVLS_OPS)
    out[:, 3] = np.where(nvls_ok, NVLS_US + size / (1e3 * bus * np.where(is_ar, 5.0 / 6.0, 1.0)), np.inf)
    modelled = ~spans_nodes(ranks, per_node) & ~np.isin(op, P2P_OPS) & (n > 1)
    out[~modelled] = np.nan
    return out
