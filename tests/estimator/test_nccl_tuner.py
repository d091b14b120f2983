"""NCCL's own tuner: the (algorithm, protocol) NCCL's cost model picks on one node, and the rows it leaves to the
fitted candidates."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stepcast.estimator.nccl import CANDIDATES, Rows
from stepcast.estimator.nccl_tuner import arch_figures
from stepcast.profiling.hardware import lookup


def picked(hardware: str, op: str, ranks: float, sizes, per_node: float | None = None) -> list[str | None]:
    frame = pd.DataFrame({"family": "collective", "hardware": hardware, "op": op, "bytes": np.asarray(sizes, float),
                          "ranks": ranks, "ranks_per_node": per_node or ranks})
    return [CANDIDATES[i] if i >= 0 else None for i in Rows.of(frame).tuned]


def test_a100_all_gather_on_four_gpus_leaves_ll_for_simple_between_one_and_two_mib():
    # NCCL's figures: LL 6.6 + 3 x 0.6 us at 87.7 GB/s x 4/3, Simple 8.4 + 3 x 3.4 us at 0.8 x 300 x 4/3: 1.9 MB
    assert picked("a100-sxm-80gb", "all_gather", 4, [2 ** 20, 2 ** 21]) == ["ring/LL", "ring/Simple"]


def test_h100_all_reduce_on_eight_gpus_runs_nvls_past_the_ll_range():
    assert picked("h100-sxm", "all_reduce", 8, [2 ** 16, 2 ** 24, 2 ** 29]) == ["ring/LL", "nvls/Simple",
                                                                               "nvls/Simple"]


def test_ll128_is_picked_where_many_ring_steps_make_its_latency_pay():
    # A100, 8 GPUs, all_reduce: 14 steps, LL128's 1.9 us per step against Simple's 3.4 (no NVLS before Hopper)
    assert "ring/LL128" in picked("a100-sxm-80gb", "all_reduce", 8, 2.0 ** np.arange(10, 30))


def test_a_pcie_ring_never_runs_ll128():
    assert "ring/LL128" not in picked("l40s", "all_reduce", 8, 2.0 ** np.arange(10, 30))


def test_ll128_is_on_only_for_the_compute_capabilities_nccl_enables_it_on():
    assert arch_figures(lookup("a100-sxm-80gb"))[1] and arch_figures(lookup("h100-sxm"))[1]
    assert not arch_figures(lookup("a40"))[1]  # 8.6: NCCL leaves LL128 off


def test_rows_across_nodes_and_point_to_point_calls_are_left_to_the_fitted_candidates():
    assert picked("h100-sxm", "all_reduce", 16, [2 ** 20], per_node=8) == [None]
    assert picked("h100-sxm", "all_to_all", 8, [2 ** 20]) == [None]
    assert picked("h100-sxm", "all_reduce", 1, [2 ** 20]) == [None]
