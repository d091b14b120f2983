"""The analytical baseline and fallback: roofline for compute kernels, alpha-beta for collectives.

compute time = FLOPs / (peak FLOP/s for the dtype x compute_efficiency)
memory time  = bytes / (memory bandwidth x memory_efficiency)
kernel time  = max(compute, memory) + a fixed per-kernel cost (launch, ramp-up and tail)
collective   = steps x alpha + wire bytes / link bandwidth + the fixed cost, where wire bytes use nccl-tests'
               bus-bandwidth factor (ring: 2(n-1)/n for all_reduce, (n-1)/n for all_gather / reduce_scatter /
               all_to_all), steps are the fewer of a ring's and a tree's (NCCL's tuner picks the faster), and the
               link is NVLink (or PCIe) when all ranks fit in one NVLink domain (ranks <= ranks_per_node) and the
               network otherwise.

It needs no training data, so it covers every family, dtype and device in the catalog; the learned estimators fall
back to it outside their training support. The default efficiencies are typical achievable shares of peak, not
fitted to any dataset.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.frames import Kernels, as_kernels, family_positions, num, take, text
from stepcast.estimator.hardware_table import RowHardware, row_hardware
from stepcast.estimator.workload import Work, network_rails, work


def roofline_seconds(w: Work, hw: RowHardware) -> np.ndarray:
    """The pure roofline bound (100% of peak, no fixed cost), seconds."""
    return np.maximum(w.flops / hw.peak_flops, w.bytes / hw.memory_bandwidth)


def link_bandwidth(ranks: np.ndarray, ranks_per_node: np.ndarray, hw: RowHardware, names: np.ndarray) -> np.ndarray:
    """Bytes/s of the slowest link a collective (``names``: its op) crosses: intra-node when every rank fits in one
    node, else the network's NICs that its traffic adds up (``estimator.workload.network_rails``), never more than the
    node's own links."""
    intra = ranks <= np.maximum(ranks_per_node, 1.0)
    rails = network_rails(names, ranks, ranks_per_node, hw.nics_per_domain)
    return np.where(intra, hw.intra_node_bandwidth,
                    np.minimum(hw.inter_node_bandwidth * rails, hw.intra_node_bandwidth))


class RooflineEstimator(KernelEstimator):
    """Roofline / alpha-beta model over the hardware catalog; no fitted parameters."""

    name = "roofline"
    version = "1"

    def __init__(
        self,
        compute_efficiency: float = 0.75,
        memory_efficiency: float = 0.8,
        gpu_fixed_us: float = 2.5,
        cpu_fixed_us: float = 5.0,
        alpha_intra_us: float = 2.0,
        alpha_inter_us: float = 6.0,
    ) -> None:
        self.compute_efficiency = compute_efficiency
        self.memory_efficiency = memory_efficiency
        self.gpu_fixed_us = gpu_fixed_us
        self.cpu_fixed_us = cpu_fixed_us
        self.alpha_intra_us = alpha_intra_us
        self.alpha_inter_us = alpha_inter_us

    def fit(self, frame: pd.DataFrame, runtime_us: np.ndarray) -> "RooflineEstimator":
        """Nothing to learn: the roofline is fixed by the catalog (accepted so it can sit in any training loop)."""
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        frame = as_kernels(frame)
        out = np.empty(len(frame), dtype=np.float64)
        for family, positions in family_positions(frame):
            out[positions] = self.family_us(family, take(frame, positions))
        return out

    def family_us(self, family: str, rows: Kernels, w: Work | None = None,
                        hw: RowHardware | None = None) -> np.ndarray:
        """Microseconds for rows of one family (``w`` and ``hw`` when the caller already computed them): public
        because the learned models build their roofline feature and the tiled model its fallback from it."""
        w = w if w is not None else work(family, rows)
        hw = hw if hw is not None else row_hardware(rows["hardware"], rows["dtype"])
        fixed_us = np.where(hw.is_gpu, self.gpu_fixed_us, self.cpu_fixed_us)
        if family == "collective":
            ranks, rpn = num(rows, "ranks"), num(rows, "ranks_per_node")
            intra = ranks <= np.maximum(rpn, 1.0)
            alpha_us = np.where(intra, self.alpha_intra_us, self.alpha_inter_us)
            wire_us = w.wire_bytes / link_bandwidth(ranks, rpn, hw, text(rows, "op")) * 1e6
            return fixed_us + w.latency_steps * alpha_us + wire_us
        compute_us = w.flops / (hw.peak_flops * self.compute_efficiency) * 1e6
        memory_us = w.bytes / (hw.memory_bandwidth * self.memory_efficiency) * 1e6
        return np.maximum(compute_us, memory_us) + fixed_us

    def params(self) -> dict[str, float]:
        return dict(vars(self))

    def save(self, path: str | Path) -> Path:
        from stepcast.estimator.bundle import write_json_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path / "meta.json", {"kind": "roofline", "version": self.version, "params": self.params()})
        return path

    @classmethod
    def load(cls, path: str | Path) -> "RooflineEstimator":
        from stepcast.estimator.bundle import read_json

        return cls(**read_json(Path(path) / "meta.json")["params"])


#: the roofline with its default parameters: the baseline feature of the learned models and the analytical cost their
#: fallbacks take (one instance, so every user reads the same defaults)
DEFAULT_ROOFLINE = RooflineEstimator()
