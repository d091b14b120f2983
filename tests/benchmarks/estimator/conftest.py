"""Fixtures of the estimator benchmarks' tests: the estimator tests' synthetic GEMM frame, and the benchmark's
``tiled`` column cut down to a test's size."""
from __future__ import annotations

import pytest

from tests.estimator.conftest import gemm_rows  # noqa: F401 (a fixture: the estimator tests' synthetic GEMMs)


@pytest.fixture
def light_tiled(monkeypatch):
    """The benchmark suites' ``tiled`` column at a test's size: the suite tests check which columns and folds appear,
    not how well the five-network ensemble trains (at full size it cost 250 s of a 2-core CI run)."""
    import benchmarks.estimator.accuracy as benchmark

    monkeypatch.setattr(benchmark, "TILED", {"tiled": ("tiled", {"epochs": 2, "min_steps": 50, "networks": 1},
                                                        "efficiency")})
