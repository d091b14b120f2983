"""The throttle check of an isolated GEMM sweep: throughput kept by longer ops within one efficiency class, so that a
clock that dropped under sustained load is told apart from long ops simply being other shapes."""
from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.emulate.e2e import throttle

EDGES_MS = (0.0, 2.0, 50.0, float("inf"))
SMS = 10


def gemm(m: int, n: int, k: int, runtime_us: float, batch: int = 1, kernel: str = "sgemm_64x64_tn",
         blocks: int = 1000, op: str = "linear") -> dict:
    return {"gemm_op": op, "kernel_name": kernel, "m": m, "n": n, "k": k, "batch": batch,
            "runtime_us": runtime_us, "grid": f"{blocks},1,1"}


def by_bucket(table: pd.DataFrame) -> dict[float, float]:
    return {c.left: v for c, v in zip(table["duration_ms"], table["retained"])}


def test_a_class_that_slows_as_its_ops_run_longer_keeps_less_than_all_of_its_rate():
    # one class (same kernel, k 1024): 2 TFLOPS while short, 1 TFLOPS once ops run 100 ms
    short = [gemm(m, 1000, 1024, 2.0 * m * 1000 * 1024 / 2e6) for m in (100, 200, 400)]
    long = [gemm(50_000, 1000, 1024, 2.0 * 50_000 * 1000 * 1024 / 1e6)]
    table = throttle.retained_by_duration(pd.DataFrame(short + long), SMS, EDGES_MS)
    assert by_bucket(table) == pytest.approx({0.0: 1.0, 50.0: 0.5})


def test_long_ops_that_are_slow_because_of_their_shape_keep_all_of_their_rate():
    # a long reduction (k 32768) runs at 1 TFLOPS however long it takes, a short one (k 1024) at 2: the sweep's
    # median falls with duration, but within each class nothing does
    rows = [gemm(m, 1000, 1024, 2.0 * m * 1000 * 1024 / 2e6) for m in (100, 200, 400)]
    rows += [gemm(m, 100, 32768, 2.0 * m * 100 * 32768 / 1e6) for m in (100, 150, 200, 20_000)]
    table = throttle.retained_by_duration(pd.DataFrame(rows), SMS, EDGES_MS)
    kept = by_bucket(table)
    assert len(kept) == 2 and list(kept.values()) == pytest.approx([1.0, 1.0])


def test_launches_that_do_not_fill_the_gpu_are_left_out():
    rows = [gemm(m, 1000, 1024, 2.0 * m * 1000 * 1024 / 2e6) for m in (100, 200, 400)]
    rows.append(gemm(50_000, 1000, 1024, 2.0 * 50_000 * 1000 * 1024 / 1e6, blocks=throttle.MIN_BLOCKS_PER_SM * SMS - 1))
    table = throttle.retained_by_duration(pd.DataFrame(rows), SMS, EDGES_MS)
    assert table["rows"].tolist() == [3]


def test_batched_gemms_of_another_matrix_shape_are_another_class():
    base = gemm(512, 512, 512, 1.0, batch=4, op="bmm", kernel="sgemm_128x64_nn")
    other = gemm(64, 64, 512, 1.0, batch=4, op="bmm", kernel="sgemm_128x64_nn")
    classes = throttle.efficiency_class(pd.DataFrame([base, {**base, "batch": 400}, other]))
    assert classes[0] == classes[1] != classes[2]


def test_an_unreadable_grid_counts_as_no_blocks():
    assert throttle.launch_blocks(pd.Series(["2,3,4", "n/a"])).tolist() == [24.0, 0.0]
