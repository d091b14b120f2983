"""Sweeps expand into the same points every time: grid, log-uniform random shapes, real-model shapes."""
from __future__ import annotations

import random

import pytest

from stepcast.profiling.model_catalog import lookup_model
from stepcast.profiling.ops.gemm import GemmBench
from stepcast.profiling.plan import plan_family
from stepcast.profiling.sampling import ConfigError, grid, point_id, random_points


def test_grid_is_the_cartesian_product():
    points = list(grid({"m": [1, 2, 3], "n": [4, 5], "op": "mm"}))
    assert len(points) == 6 and {p["op"] for p in points} == {"mm"}
    with pytest.raises(ConfigError, match=r"grid.m: a grid takes a list"):
        list(grid({"m": {"log": [1, 8]}}))


def test_log_uniform_stays_in_range_and_on_multiples():
    draws = [p["m"] for p in random_points({"m": {"log": [16, 4096], "multiple_of": 16}}, 500, random.Random(0))]
    assert min(draws) >= 16 and max(draws) <= 4096 and all(d % 16 == 0 for d in draws)
    assert sum(d < 256 for d in draws) > 150  # log-uniform: half the draws below the geometric middle
    with pytest.raises(ConfigError, match=r"random.m: expected 0 < lo <= hi"):
        list(random_points({"m": {"log": [8, 2]}}, 1, random.Random(0)))


def test_model_shapes_follow_the_tensor_parallel_split():
    shapes = list(GemmBench().model_shapes(lookup_model("meta-llama/Meta-Llama-3-8B"), tp=2, tokens=1024))
    qkv_forward = shapes[0]
    assert qkv_forward == {"op": "mm", "m": 1024, "n": (32 + 2 * 8) * 128 // 2, "k": 4096, "batch": 1,
                           "trans_a": False, "trans_b": True}
    assert len(shapes) == 15  # five linears x (forward, input grad, weight grad)


def test_plan_is_deterministic_and_capped():
    sweep = {"max_points": 30, "limits": {"max_flops": 1e9},
             "grid": [{"op": "mm", "m": [64, 128], "n": [64, 4096], "k": [64], "dtype": ["fp32", "bf16"]}],
             "random": [{"count": 40, "space": {"op": "mm", "m": {"log": [16, 4096]}, "n": {"log": [16, 4096]},
                                                "k": {"log": [16, 4096]}, "dtype": "fp32"}}],
             "models": [{"names": ["gpt2"], "tp": [1], "tokens": [32], "space": {"dtype": "bf16"}}]}
    first, again = plan_family("gemm", sweep, "h100-sxm", 0), plan_family("gemm", sweep, "h100-sxm", 0)
    assert [p.id for p in first] == [p.id for p in again] and len(first) == 30
    assert {p.sample for p in first} == {"grid", "random", "model"}
    assert all(2 * p.values["m"] * p.values["n"] * p.values["k"] <= 1e9 for p in first)
    assert [p.id for p in plan_family("gemm", sweep, "h100-sxm", 1)] != [p.id for p in first]


def test_point_id_ignores_key_order():
    assert point_id({"a": 1, "b": "x"}) == point_id({"b": "x", "a": 1}) != point_id({"a": 2, "b": "x"})


def test_llm_series_sweep_covers_every_token_count_of_many_gemm_shapes():
    """The GPU token-series sweep: each forward (n, k) of each model is measured at every token count."""
    from omegaconf import OmegaConf

    from stepcast.profiling.paths import CONF_DIR

    sweep = OmegaConf.load(CONF_DIR / "profiling" / "gemm" / "llm_series.yaml")
    points = [p.values for p in plan_family("gemm", sweep, "h200", 0)]
    tokens = set(sweep.models[0].tokens)
    assert {p["dtype"] for p in points} == {"fp16"} and {p["op"] for p in points} == {"mm"}
    forward = {}
    for p in points:
        if p["trans_b"] and not p["trans_a"]:
            forward.setdefault((p["n"], p["k"]), set()).add(p["m"])
    assert len(forward) >= 75  # Vidur's four H100 models give 52 (n, k) pairs, three of them about 40
    assert all(ms == tokens for ms in forward.values())
