"""Tokens per expert on the measured GPU, balanced and power-law: what sizes the grouped GEMMs."""
from __future__ import annotations

import numpy as np
import pytest

from stepcast.estimator.moe_routing import expert_loads


def loads(tokens, experts, topk, ep, skew):
    return expert_loads(*(np.array([v], dtype=float) for v in (tokens, experts, topk, ep, skew)))


def test_balanced_routing_spreads_routes_evenly_over_every_expert():
    got = loads(1024, 128, 8, 4, 0.0)
    assert got.local_routes[0] == pytest.approx(1024 * 8 / 4)
    assert got.max_expert[0] == pytest.approx(1024 * 8 / 128)
    assert got.active_experts[0] == 32
    assert got.mean_expert[0] == pytest.approx(got.max_expert[0])


def test_balanced_routing_with_few_tokens_touches_one_expert_per_route():
    got = loads(2, 128, 8, 1, 0.0)
    assert got.active_experts[0] == 16 and got.max_expert[0] == 1


@pytest.mark.parametrize("alpha", [1.01, 1.2])
def test_a_skew_raises_the_busiest_experts_m_and_the_gpus_routes(alpha):
    balanced, skewed = loads(4096, 128, 8, 8, 0.0), loads(4096, 128, 8, 8, alpha)
    assert skewed.max_expert[0] > 2 * balanced.max_expert[0]
    assert skewed.local_routes[0] > balanced.local_routes[0]


def test_no_expert_gets_more_routes_than_there_are_tokens():
    got = loads(64, 8, 2, 8, 1.2)
    assert got.max_expert[0] <= 64
    assert got.local_routes[0] <= 64


def test_skewed_counts_are_the_same_on_every_call():
    assert loads(512, 256, 8, 4, 1.2).max_expert[0] == loads(512, 256, 8, 4, 1.2).max_expert[0]


def test_experts_not_a_multiple_of_ep_are_refused():
    with pytest.raises(ValueError, match="multiple of ep"):
        loads(8, 10, 2, 4, 0.0)
