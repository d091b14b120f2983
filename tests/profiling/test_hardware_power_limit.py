"""A power-limited board: the catalog derives its sustained clock and peaks from power_limit_w."""
from __future__ import annotations

import pytest

from stepcast.profiling.hardware import HardwareSpec, load_catalog, lookup

BASE = {"id": "x", "name": "X", "kind": "gpu", "vendor": "nvidia", "architecture": "hopper", "sm_count": 132,
        "max_clock_mhz": 1980, "memory_gib": 96, "memory_bandwidth_gbps": 2400, "l2_cache_mib": 50,
        "peak_tflops": {"fp32": 66.9, "bf16": 989.4}, "tdp_w": 700}


def test_clock_and_peaks_scale_with_the_cube_root_of_the_power_ratio():
    spec = HardwareSpec.model_validate({**BASE, "power_limit_w": 500})
    scale = (500 / 700) ** (1 / 3)
    assert spec.rated_clock_mhz == 1980
    assert spec.max_clock_mhz == pytest.approx(1980 * scale)
    assert spec.peak_flops("bf16") == pytest.approx(989.4e12 * scale)
    assert spec.memory_bandwidth_gbps == 2400  # HBM keeps its clock
    assert spec.power_clock_scale == pytest.approx(scale)


def test_a_board_at_or_above_its_rated_power_is_unchanged():
    assert HardwareSpec.model_validate(BASE).max_clock_mhz == 1980
    assert HardwareSpec.model_validate({**BASE, "power_limit_w": 800}).max_clock_mhz == 1980


def test_a_power_limit_needs_the_rated_power():
    with pytest.raises(ValueError, match="power_limit_w needs tdp_w"):
        HardwareSpec.model_validate({k: v for k, v in {**BASE, "power_limit_w": 500}.items() if k != "tdp_w"})


def test_the_torchtitan_board_is_in_the_catalog():
    spec = lookup("h100-sxm-96gb-500w")
    assert spec.memory_gib == 96 and spec.power_limit_w == 500
    assert spec.max_clock_mhz < lookup("h100-sxm").max_clock_mhz
    assert "h100-sxm-96gb-500w" in load_catalog()
