"""CPU timing: repetitions until the spread is stable or a cap, statistics of what was measured."""
from __future__ import annotations

import time

from stepcast.profiling.timing import MeasureSettings, is_stable, measure_cpu


def busy_wait(us: float) -> None:
    end = time.perf_counter_ns() + us * 1e3
    while time.perf_counter_ns() < end:
        pass


def test_measures_a_known_duration():
    m = measure_cpu(lambda: busy_wait(300), MeasureSettings(warmup=1, min_reps=5, max_reps=50, max_seconds=0.2))
    assert 300 <= m.min_us <= m.median_us and m.median_us < 3000
    assert 5 <= m.reps <= 50 and m.timing == "perf_counter" and m.std_us >= 0


def test_short_ops_are_batched_per_repetition():
    m = measure_cpu(lambda: None, MeasureSettings(warmup=1, min_reps=5, max_reps=10, min_rep_us=100))
    assert m.median_us < 20  # a no-op call, measured through many calls per repetition


def test_stability_rule():
    settings = MeasureSettings(min_reps=5, rel_tol=0.02)
    assert not is_stable([10.0] * 4, settings)
    assert is_stable([10.0, 10.1, 9.9, 10.0, 10.05], settings)
    assert not is_stable([1.0, 30.0, 2.0, 50.0, 3.0], settings)
