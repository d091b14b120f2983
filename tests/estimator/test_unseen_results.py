"""The unseen protocol's results file: one figure per line, a bad file named in one line, a figure found by the rows
it covers, and a comparison that flags only changes beyond the seeds' spread."""
from __future__ import annotations

import pandas as pd
import pytest

from stepcast.estimator import unseen_results
from stepcast.estimator.unseen_results import compare, figure


def fig(held_out: str, model: str, mean: float, seeds: list[float], dtype: str = "all", source: str = "all",
        dtypes: tuple[str, ...] = ("bf16",), sources: tuple[str, ...] = ("aiconfigurator",), n: int = 100) -> dict:
    return {"split": "device", "held_out": held_out, "family": "gemm", "dtype": dtype, "source": source,
            "dtypes": list(dtypes), "sources": list(sources), "model": model, "n": n, "seeds": seeds,
            "mean_ape": mean, "median_ape": mean, "p90_ape": mean, "time_weighted_ape": mean, "within_10pct": 50.0}


def test_results_round_trip_with_one_figure_per_line(tmp_path):
    doc = {"commit": "abc", "figures": [fig("h200", "xgboost", 10.0, [9.0, 11.0]), fig("b200", "tiled", 8.0, [8.0])]}
    path = tmp_path / "unseen.json"
    unseen_results.write(path, doc)
    text = path.read_text()
    assert sum(line.strip().startswith('{"dtype"') for line in text.splitlines()) == 2
    back = unseen_results.read(path)
    assert back["commit"] == "abc" and back["format"] == unseen_results.FORMAT
    assert [f["held_out"] for f in back["figures"]] == ["b200", "h200"]  # sorted: a stable diff


def test_a_file_that_is_not_results_is_named_in_one_line(tmp_path):
    path = tmp_path / "unseen.json"
    path.write_text('{"figures": []}')
    with pytest.raises(ValueError, match="unseen.json: field 'format'"):
        unseen_results.read(path)
    with pytest.raises(FileNotFoundError, match="missing"):
        unseen_results.read(tmp_path / "none.json")


def test_a_figure_is_found_by_the_rows_it_covers():
    rows = pd.DataFrame([
        fig("h100-sxm", "xgboost", 20.0, [20.0], n=300, dtypes=("bf16", "fp16"), sources=("aiconfigurator", "vidur")),
        fig("h100-sxm", "xgboost", 15.0, [15.0], dtype="bf16", n=200, dtypes=("bf16",), sources=("aiconfigurator",)),
        fig("h100-sxm", "xgboost", 30.0, [30.0], dtype="fp16", n=100, dtypes=("fp16",), sources=("vidur",)),
    ])
    assert figure(rows, "device", "h100-sxm", "gemm", "xgboost")["mean_ape"] == 20.0
    # bf16 has one source: the (bf16, aiconfigurator) figure is the bf16 row
    assert figure(rows, "device", "h100-sxm", "gemm", "xgboost", "bf16", "aiconfigurator")["mean_ape"] == 15.0
    assert figure(rows, "device", "h100-sxm", "gemm", "xgboost", source="vidur")["mean_ape"] == 30.0
    assert figure(rows, "device", "h100-sxm", "gemm", "xgboost", "fp32") is None
    assert figure(rows, "device", "h100-sxm", "gemm", "xgboost", "bf16", "vidur") is None


def test_a_change_counts_only_beyond_the_spread_over_seeds():
    old = {"figures": [fig("h200", "xgboost", 10.0, [9.0, 11.0]), fig("h200", "roofline", 40.0, [40.0, 40.0]),
                       fig("b200", "xgboost", 10.0, [10.0, 10.2])]}
    new = {"figures": [fig("h200", "xgboost", 11.5, [11.0, 12.0]),   # +1.5 within the old range of 2
                       fig("h200", "roofline", 40.5, [40.5, 40.5]),  # deterministic: any change is one
                       fig("b200", "xgboost", 8.0, [7.9, 8.1])]}     # -2 beyond 0.2
    changes = compare(new, old).set_index(["held_out", "model"])
    assert not changes.at[("h200", "xgboost"), "beyond"]
    assert changes.at[("h200", "roofline"), "beyond"] and changes.at[("h200", "roofline"), "change"] == 0.5
    assert changes.at[("b200", "xgboost"), "beyond"] and changes.at[("b200", "xgboost"), "change"] == -2.0
