"""The simulator's collective rows on an NVL72 rack: a 72-GPU all-reduce stays within its NVLink domain, a 144-GPU
one spans two and crosses the network (``emulate.simulate`` -> ``ranks_per_node_for`` -> the estimator's rows)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.report import build_report
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.nccl import NcclEstimator

SIZE = 1 << 30


class Recording(KernelEstimator):
    """Times each row with ``inner`` (none: 5 us) and keeps the frame it was asked about."""

    name = "recording"

    def __init__(self, inner: KernelEstimator | None = None) -> None:
        self.inner = inner

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        self.frame = frame.copy()
        return self.inner.predict(frame) if self.inner is not None else np.full(len(frame), 5.0)


def all_reduce(hardware: str, world: int, nodes: int, estimator: KernelEstimator) -> float:
    """Milliseconds of one iteration holding one all-reduce of SIZE bytes over the whole world."""
    b = TraceBuilder(rank=0, world_size=world, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    b.collective(stream=1, comm_seq=0, nbytes=SIZE)
    b.device_sync()
    b.iteration(1, end=True)
    result = simulate([b.doc()], hardware, durations="predicted", estimator=estimator, nodes=nodes)
    return build_report(result)["iteration_time_ms"]


@pytest.mark.parametrize(("hardware", "world", "nodes", "per_node"), [
    ("gb200-nvl72", 72, 18, 72),    # 18 trays of 4: one NVLink domain
    ("gb200-nvl72", 144, 36, 72),   # two racks: the network between them
    ("gb300-nvl72", 144, 36, 72),
    ("b200", 72, 9, 8),             # nine HGX boards: nine domains
])
def test_an_all_reduces_row_counts_the_ranks_of_its_nvlink_domain(hardware, world, nodes, per_node):
    est = Recording()
    all_reduce(hardware, world, nodes, est)
    row = est.frame.iloc[0]
    assert (row["op"], row["ranks"], row["ranks_per_node"]) == ("all_reduce", world, per_node)


def test_a_72_gpu_all_reduce_on_gb200_runs_at_nvlink_rates_and_a_144_gpu_one_pays_the_network():
    # the NCCL model's structure on the catalog's links (its starting figures: no device fitted)
    rack = all_reduce("gb200-nvl72", 72, 18, Recording(NcclEstimator())) * 1e3
    racks = all_reduce("gb200-nvl72", 144, 36, Recording(NcclEstimator())) * 1e3
    nvlink = 900e3  # gb200-nvl72.yaml: 900 GB/s per GPU one way, in bytes per microsecond
    network = 50e3  # one 400 Gb/s NIC per GPU
    assert SIZE / rack > 0.5 * nvlink  # the NVLink switches reduce (NVLS): near a GPU's NVLink rate
    assert SIZE / racks < 0.5 * SIZE / rack  # two racks: no NVLS, rings and trees over the network
    assert SIZE / racks > 2 * network  # yet faster than one NIC: the rack's 72 NICs carry the ring's channels


def test_the_alpha_beta_fallback_never_times_an_all_reduce_over_one_rack_above_one_over_two():
    # the shipped bundles send an unfitted device's collectives to the alpha-beta: a ring's 142 steps inside the
    # rack timed a 1 MiB all-reduce over 72 GPUs at 289 us, above 197 us over 144 across two racks
    from stepcast.estimator.analytical import RooflineEstimator

    for size in (1 << 20, 1 << 30):
        times = []
        for world, nodes in ((72, 18), (144, 36)):
            b = TraceBuilder(rank=0, world_size=world, meta={"launch_latency_us": 0.0})
            b.iteration(0)
            b.collective(stream=1, comm_seq=0, nbytes=size)
            b.device_sync()
            b.iteration(1, end=True)
            result = simulate([b.doc()], "gb200-nvl72", durations="predicted", estimator=RooflineEstimator(),
                              nodes=nodes)
            times.append(build_report(result)["iteration_time_ms"])
        assert times[0] < times[1]
