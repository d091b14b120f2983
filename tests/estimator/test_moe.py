"""The fused-MoE layer model: its work, its roofline bound, and a correction that can never beat the bound."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.analytical import roofline_seconds
from stepcast.estimator.hardware_table import row_hardware
from stepcast.estimator.moe import MoEEstimator, layer_work


def layers(n: int = 60, hardware: str = "h100-sxm", dtype: str = "bf16", gated: bool = True,
           seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "hardware": hardware, "dtype": dtype, "backend": "moe_torch_flow_cutlass",
        "tokens": rng.choice([1, 16, 256, 4096], n), "hidden": rng.choice([2048, 4096], n),
        "inter": rng.choice([768, 1536], n), "topk": 8, "experts": 128, "tp": rng.choice([1, 2], n),
        "ep": rng.choice([1, 4], n), "skew": rng.choice([0.0, 1.2], n), "gated": gated})


def test_a_layer_is_never_predicted_faster_than_the_roofline_of_its_work():
    train = layers(seed=1)
    bound = layer_work(train).bound_us
    model = MoEEstimator(n_estimators=5, n_jobs=1).fit(train, 0.3 * bound)  # data faster than physics
    test = layers(seed=2)
    lw = layer_work(test)
    hw = row_hardware(test["hardware"], test["dtype"])
    assert np.all(model.predict(test) >= lw.bound_us)
    assert np.all(lw.bound_us >= lw.work.flops / hw.peak_flops * 1e6 * (1 - 1e-9))


def test_the_correction_learns_how_far_above_the_bound_layers_run():
    train = layers(n=200, seed=3)
    model = MoEEstimator(n_estimators=50, n_jobs=1).fit(train, 2.0 * layer_work(train).expected_us)
    test = layers(seed=4)
    assert model.predict(test) == pytest.approx(2.0 * layer_work(test).expected_us, rel=0.05)


def test_a_small_batch_is_a_read_of_its_experts_weights():
    one = layers(n=1).assign(tokens=1, hidden=4096, inter=1536, tp=1, ep=1, skew=0.0)
    lw = layer_work(one)
    weights = 8 * 3 * 4096 * 1536 * 2  # top-8 experts, gate+up and down, bf16
    assert lw.work.bytes[0] >= weights
    assert lw.memory_us[0] > lw.compute_us[0]


def test_a_gated_layer_does_half_again_the_flops_of_a_plain_one():
    gated, plain = layer_work(layers(n=5)), layer_work(layers(n=5, gated=False))
    assert gated.work.flops == pytest.approx(1.5 * plain.work.flops)


def test_fp8_halves_the_weight_bytes_and_doubles_the_peak():
    bf16, fp8 = layers(n=1).assign(tokens=1, ep=1), layers(n=1, dtype="fp8_e4m3").assign(tokens=1, ep=1)
    assert layer_work(fp8).work.bytes[0] < 0.6 * layer_work(bf16).work.bytes[0]
    big_bf16, big_fp8 = bf16.assign(tokens=16384), fp8.assign(tokens=16384)
    assert layer_work(big_fp8).compute_us[0] == pytest.approx(0.5 * layer_work(big_bf16).compute_us[0], rel=1e-3)


def test_a_skewed_routings_bound_counts_the_least_work_any_draw_gives():
    balanced = layers(n=1).assign(tokens=4096, ep=8, skew=0.0)
    even, skewed = layer_work(balanced), layer_work(balanced.assign(skew=1.2))
    assert skewed.loads.local_routes[0] > even.loads.local_routes[0]  # expected: the busiest GPU runs more
    assert skewed.work.flops[0] == pytest.approx(even.work.flops[0])  # bound: at least the mean share
    assert skewed.work.bytes[0] <= even.work.bytes[0]  # on the fewest experts that can hold it
    assert np.all(skewed.least.active_experts <= skewed.loads.active_experts)


def test_the_bound_is_the_projects_roofline_of_the_layers_dram_work():
    test = layers(n=10).assign(tokens=16384)
    lw = layer_work(test)
    hw = row_hardware(test["hardware"], test["dtype"])
    assert np.all(lw.bound_us <= roofline_seconds(lw.work, hw) * 1e6 * (1 + 1e-9))


def test_weights_that_fit_in_l2_are_charged_at_the_spec_sheets_l2_bandwidth():
    """A layer whose bytes fit in L2 is bounded by those bytes at SMs x boost clock x 64 bytes, which sets the L40S
    (slow GDDR6, large L2: 27x its DRAM bandwidth) apart from the HBM parts (about 5x on the H100)."""
    from stepcast.estimator.moe import l2_bandwidth, l2_bytes

    small = layers(n=8, hardware="l40s").assign(tokens=1, skew=0.0, hidden=2048, inter=768, ep=4)
    lw = layer_work(small)
    hw = row_hardware(small["hardware"], small["dtype"])
    assert np.all(lw.work.bytes < l2_bytes(hw))
    assert np.all(l2_bandwidth(hw) == 142 * hw.spec["hw_clock_mhz"] * 1e6 * 64.0)
    assert lw.memory_us == pytest.approx(lw.work.bytes / l2_bandwidth(hw) * 1e6)
    ratios = {gpu: float(l2_bandwidth(h)[0] / h.memory_bandwidth[0]) for gpu in ("l40s", "h100-sxm")
              for h in [row_hardware(pd.Series([gpu]), pd.Series(["bf16"]))]}
    assert ratios["l40s"] > 20 and 4 < ratios["h100-sxm"] < 6
