"""benchmarks.estimator.split_consistency: a GEMM split along m is charged what the whole is, or flagged."""
from __future__ import annotations

import pandas as pd

from benchmarks.estimator import split_consistency as sc
from stepcast.estimator.analytical import RooflineEstimator


class PowerLaw:
    """A toy estimator whose time grows as m ** exponent: below 1, chunks cost less in sum than the whole."""

    def __init__(self, exponent: float) -> None:
        self.exponent = exponent

    def predict_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(predicted_us=frame["m"].astype(float) ** self.exponent * frame["n"] * frame["k"] / 1e6)


def test_an_estimator_linear_in_m_charges_chunks_what_it_charges_the_whole():
    results = sc.split_ratios(PowerLaw(1.0), "h100-sxm")
    assert [r.parts for r in results] == list(sc.SPLITS)
    assert all(abs(r.median - 1) < 1e-6 and abs(r.lowest - 1) < 1e-6 for r in results)
    assert sc.flagged(results) == []


def test_chunks_charged_less_than_the_whole_are_flagged_by_split():
    results = sc.split_ratios(PowerLaw(1.05), "h100-sxm")  # each halving saves 3.4 %
    assert [r.parts for r in sc.flagged(results)] == list(sc.SPLITS)
    assert results[0].median == round(2 ** -0.05, 4)


def test_the_roofline_is_additive_over_large_chunks():
    assert sc.flagged(sc.split_ratios(RooflineEstimator(), "h100-sxm-96gb-500w")) == []


def test_measured_medians_pair_each_large_gemm_with_its_measured_chunks():
    rows = [dict(hardware="h100-sxm", dtype="bf16", batch=1, m=m, n=4096, k=4096, runtime_us=us)
            for m, us in ((65536, 1000.0), (32768, 520.0), (16384, 250.0), (8192, 130.0), (4096, 70.0),
                          (2048, 40.0))]
    medians = sc.measured_medians("h100-sxm", pd.DataFrame(rows), estimator=PowerLaw(1.0))
    # from m = 65,536 and 32,768 (chunks of at least 4,096 rows): split 2 pairs (65,536, 32,768) and
    # (32,768, 16,384); split 16 only 65,536 -> 4,096
    assert medians[2]["measured"] == round(((520 * 2 / 1000) + (250 * 2 / 520)) / 2, 4)
    assert medians[16]["measured"] == round(70 * 16 / 1000, 4)
    assert medians[2]["predicted"] == medians[16]["predicted"] == 1.0  # the same shapes, through the estimator
    assert sc.measured_medians("b200", pd.DataFrame(rows)) == {}
