"""The accuracy page is generated from the results file: it shows the issue's goals and the headline, and the
committed page is the one the committed results give."""
from __future__ import annotations

import pytest

from benchmarks.estimator import accuracy_table
from stepcast.estimator import unseen_results
from tests.estimator.test_unseen_results import fig


def results() -> dict:
    figures = []
    for device, tiled in (("a100-pcie-40gb", 9.0), ("p100", 19.0), ("p4", 25.0), ("t4", 15.0),
                          ("v100-pcie-32gb", 12.0)):
        for model, mean in (("xgboost", 30.0), ("tiled", tiled)):
            figures.append(fig(device, model, mean, [mean - 1, mean + 1], dtypes=("fp32",), sources=("neusight",)))
    figures.append(fig("pooled", "tiled", 16.0, [15.0, 17.0], dtypes=("fp32",), sources=("neusight",), n=500))
    return {"commit": "0123456789abcdef", "settings": {"seeds": 2, "max_train_rows": 1000}, "figures": figures}


def test_the_page_shows_each_goal_with_every_candidate_and_its_spread():
    page = accuracy_table.render(results())
    assert "| NeuSight fp32 GEMMs | p4 | <= 18 | 100 | 30.0 (2.0) | 25.0 (2.0) |" in page
    # pooled over the five GPUs: each weighted by its rows (all 100 here)
    assert "| NeuSight fp32 GEMMs | pooled | <= 12 | 500 | 30.0 (2.0) | 16.0 (2.0) |" in page
    assert "aiconfigurator bf16 GEMMs" not in page  # no such rows: no row of the goal table
    assert "commit `0123456789ab`" in page


def test_check_fails_on_a_stale_page_and_passes_on_a_fresh_one(tmp_path):
    path = tmp_path / "unseen.json"
    unseen_results.write(path, results())
    page = tmp_path / "accuracy.md"
    page.write_text("old\n")
    assert accuracy_table.main(["--results", str(path), "--out", str(page), "--check"]) == 1
    assert accuracy_table.main(["--results", str(path), "--out", str(page)]) == 0
    assert accuracy_table.main(["--results", str(path), "--out", str(page), "--check"]) == 0


def test_the_committed_page_is_what_the_committed_results_give():
    if not unseen_results.RESULTS.is_file():
        pytest.skip(f"{unseen_results.RESULTS} not written yet "
                    "(python -m benchmarks.estimator.accuracy --protocol unseen)")
    page = unseen_results.REPO_ROOT / accuracy_table.PAGE
    assert accuracy_table.main(["--results", str(unseen_results.RESULTS), "--out", str(page), "--check"]) == 0, \
        "docs/accuracy.md is stale: python -m benchmarks.estimator.accuracy_table"
