"""The fused-MoE benchmark scores a GPU only on a model that never saw its rows, and seen shapes never leak."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from benchmarks.emulate import moe as moe_benchmark
from stepcast.estimator.moe import layer_work


def rows(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = []
    for gpu in ("h100-sxm", "b200", "l40s"):
        frame = pd.DataFrame({"hardware": gpu, "dtype": rng.choice(["bf16", "fp8_e4m3"], n),
                              "backend": "moe_torch_flow_cutlass", "tokens": rng.choice([1, 64, 4096], n),
                              "hidden": rng.choice([2048, 4096], n), "inter": 1536, "topk": 8, "experts": 128,
                              "tp": 1, "ep": rng.choice([1, 8], n), "skew": 0.0, "gated": True,
                              "source": "aiconfigurator", "group": "aiconfigurator-moe/s0"})
        parts.append(frame.assign(runtime_us=1.5 * layer_work(frame).bound_us))
    return pd.concat(parts, ignore_index=True)


class Recorder:
    """Stands in for the estimator: remembers the rows it was fitted on."""

    fitted: ClassVar[list[pd.DataFrame]] = []

    def __init__(self, seed: int = 0, **options) -> None:
        pass

    def fit(self, frame, runtime_us):
        Recorder.fitted.append(frame.copy())
        return self

    def predict(self, frame):
        return layer_work(frame).bound_us


def test_a_held_out_gpus_rows_never_reach_the_fit(monkeypatch):
    monkeypatch.setattr(moe_benchmark, "MoEEstimator", Recorder)
    Recorder.fitted = []
    data = rows()
    moe_benchmark.scores(*moe_benchmark.held_out_split(data, "l40s"), seed=0)
    assert len(Recorder.fitted) == 1
    assert "l40s" not in set(Recorder.fitted[0]["hardware"])
    assert set(Recorder.fitted[0]["hardware"]) == {"h100-sxm", "b200"}


def test_the_seen_split_holds_out_the_same_shapes_on_every_gpu_and_fits_none_of_them():
    data = rows()
    shape = list(moe_benchmark.SHAPE)
    scored = 0
    for shape_set in range(5):
        train, test = moe_benchmark.seen_split(data, shape_set)
        held = set(map(tuple, test[shape].to_numpy()))
        assert not held & set(map(tuple, train[shape].to_numpy()))
        assert test.empty or set(test["hardware"]) == set(data["hardware"])
        scored += len(test)
    assert scored == len(data)


def test_the_table_reports_each_held_out_gpu_and_the_pooled_figure(monkeypatch, capsys):
    monkeypatch.setattr(moe_benchmark, "MoEEstimator", Recorder)
    from rich.console import Console

    cells = moe_benchmark.run(rows(), ["l40s", "b200"], (0,), per_cell=30, console=Console(width=140))
    held = cells[cells["split"] == "held out"]
    assert set(held["hardware"]) == {"l40s", "b200", "pooled"}
    assert np.allclose(held["mean_ape"], 100.0 / 3.0)  # the bound is 1/1.5 of the time: 33.3 % off


def test_the_results_carry_the_releases_disagreement_beside_the_model(tmp_path, monkeypatch):
    """The releases' own disagreement per GPU and dtype (release_spread) is written with the cells and printed."""
    monkeypatch.setattr(moe_benchmark, "MoEEstimator", Recorder)
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "measurements", lambda root: None)
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "layers", lambda measured: rows())
    spread = pd.DataFrame([{"hardware": "l40s", "dtype": "bf16", "mean_ape": 12.9, "median_ape": 2.9,
                            "measurements": 5}])
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "release_spread", lambda measured: spread)
    out = tmp_path / "r.json"
    assert moe_benchmark.main(["--gpus", "l40s", "--seeds", "0", "--rows", "30", "--splits", "held out",
                               "--root", str(tmp_path), "--json", str(out)]) == 0
    doc = moe_benchmark.read_results(out)
    assert doc["release_spread"] == spread.to_dict("records")
    assert any(row[:2] == ["l40s", "bf16"] and row[6] == "12.9"
               for row in moe_benchmark.table_rows(pd.DataFrame(doc["cells"]), spread))


def test_an_unknown_gpu_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "measurements", lambda root: None)
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "layers", lambda measured: rows())
    assert moe_benchmark.main(["--gpus", "t4", "--root", str(tmp_path)]) == 2
    assert "stepcast: --gpus: no fused-MoE rows for 't4'" in capsys.readouterr().err


def test_an_unknown_split_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "measurements", lambda root: None)
    monkeypatch.setattr(moe_benchmark.aiconfigurator_moe, "layers", lambda measured: rows())
    assert moe_benchmark.main(["--splits", "seen,unseen", "--root", str(tmp_path)]) == 2
    assert "stepcast: --splits: expected some of" in capsys.readouterr().err


def test_only_the_splits_asked_for_are_run(monkeypatch):
    monkeypatch.setattr(moe_benchmark, "MoEEstimator", Recorder)
    from rich.console import Console

    cells = moe_benchmark.run(rows(), ["l40s"], (0,), per_cell=30, console=Console(width=140), splits=("seen",))
    assert set(cells["split"]) == {"seen"}


def test_the_committed_page_is_what_the_committed_results_give():
    """docs/moe_accuracy.md is generated (``--page ... --from ...``): never edited by hand, never stale against the
    results files it names."""
    import json

    from stepcast.profiling.paths import REPO_ROOT

    files = [REPO_ROOT / "docs" / "results" / name
             for name in ("moe_benchmark.json", "moe_benchmark_seen_all_rows.json")]
    page = moe_benchmark.render_page([(f, json.loads(f.read_text())) for f in files])
    assert (REPO_ROOT / "docs" / "moe_accuracy.md").read_text() == page


def test_the_page_names_each_results_files_command_with_its_options():
    cells = [{"split": "seen", "seed": 0, "hardware": h, "dtype": "bf16", "mean_ape": 7.0, "roofline_ape": 70.0,
              "rows": 100, "pooled": h == "pooled"} for h in ("b200", "pooled")]
    doc = {"rows_per_cell": 200000, "seeds": [0], "splits": ["seen"], "cells": cells,
           "model": {"n_estimators": 600, "max_depth": 12, "learning_rate": 0.15}}
    page = moe_benchmark.render_page([(Path("docs/results/all.json"), doc)])
    assert ("`python -m benchmarks.emulate.moe --splits seen --rows 200000 --seeds 0 --trees 600 --depth 12 "
            "--json docs/results/all.json`") in " ".join(page.split())  # the prose is wrapped at 120 columns
    assert "| b200 | bf16 | - | - | 7.0 | - | - | 100 |" in page and page.rindex("| pooled") > page.index("| b200")
    doc["release_spread"] = [{"hardware": "b200", "dtype": "bf16", "mean_ape": 10.59, "median_ape": 3.2,
                              "measurements": 9}]
    page = moe_benchmark.render_page([(Path("docs/results/all.json"), doc)])
    assert "| b200 | bf16 | - | - | 7.0 | - | 10.6 | 100 |" in page


def test_a_results_file_the_page_cannot_read_is_one_line_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"cells": []}')
    assert moe_benchmark.main(["--page", str(tmp_path / "p.md"), "--from", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"stepcast: {bad}: no field 'rows_per_cell' (expected a file written by --json)"
    assert not (tmp_path / "p.md").exists()
