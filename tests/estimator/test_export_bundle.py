"""Exporting a bundle: it loads and predicts, and its card scores the bundle itself (learned model plus fallback rule)
next to the learned model and the roofline alone."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import estimator
from estimator.evaluate import Evaluation, bundle_predictions
from estimator.metrics import summary
from estimator.models import make_estimator
from estimator.router import FamilyRouter
from estimator.train import run
from profiling.paths import CONF_DIR


def test_bundle_predictions_take_the_roofline_where_the_rule_sends_a_row():
    rows = pd.DataFrame({"family": "gemm", "hardware": ["h100-sxm", "a40", "h100-sxm"], "runtime_us": 10.0,
                         "split": "s", "fold": "f", "predicted_us": [11.0, 12.0, 13.0],
                         "shape_ok": [True, True, False], "hardware_seen": [True, False, True], "spec_ok": True})
    roofline = Evaluation(pd.DataFrame(), rows[["family", "hardware", "runtime_us", "split", "fold"]].assign(
        predicted_us=[1.0, 2.0, 3.0]))
    learned = Evaluation(pd.DataFrame(), rows)
    unseen = bundle_predictions(learned, roofline, "unseen_hardware").predictions
    assert unseen["predicted_us"].tolist() == [11.0, 2.0, 13.0] and unseen["fallback"].tolist() == [False, True, False]
    flagged = bundle_predictions(learned, roofline, "out_of_range").predictions
    assert flagged["predicted_us"].tolist() == [11.0, 2.0, 3.0]


@pytest.fixture
def exported(tmp_path, gemm_rows):
    data = tmp_path / "rows.parquet"
    gemm_rows.to_parquet(data)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with initialize_config_dir(config_dir=str(CONF_DIR / "estimator"), version_base="1.3"):
        cfg = compose("train", overrides=[
            "family=gemm", f"data.path={data}", "splits=[random,leave_one_hardware_out]", "mlflow.plots=false",
            "mlflow.register=false", "model.params.n_estimators=20", f"mlflow.tracking_uri={uri}",
            "mlflow.experiment=test", f"export={tmp_path / 'bundle'}"])
    run(cfg)
    return tmp_path / "bundle", OmegaConf.to_container(cfg.model.params)


def test_exported_bundle_loads_predicts_and_scores_itself_on_each_split(exported, gemm_rows):
    path, params = exported
    model = estimator.load(str(path))
    assert np.all(np.isfinite(model.predict(gemm_rows.head(5))))
    card = json.loads((path / "card.json").read_text())
    table = pd.DataFrame(card["metrics"]).set_index(["split", "model"])["mean_ape"]
    assert {"xgboost", "roofline", "bundle"} <= set(table.index.get_level_values("model"))
    assert table["random", "bundle"] == pytest.approx(table["random", "xgboost"])  # every row seen: learned model
    # each device held out: what a bundle trained on the other device, with the exported rule, predicts for it
    rows = gemm_rows.reset_index(drop=True)
    predicted, truth = [], []
    for device in pd.unique(rows["hardware"]):
        train, test = rows[rows["hardware"] != device], rows[rows["hardware"] == device]
        learned = make_estimator("xgboost", "gemm", params, "efficiency").fit(train, train["runtime_us"].to_numpy())
        predicted.append(FamilyRouter({"gemm": learned}, rules={"gemm": model.rule("gemm")}).predict(test))
        truth.append(test["runtime_us"].to_numpy())
    expected = summary(np.concatenate(predicted), np.concatenate(truth))["mean_ape"]
    assert table["leave_one_hardware_out", "bundle"] == pytest.approx(expected)
    assert table["leave_one_hardware_out", "bundle"] != pytest.approx(table["leave_one_hardware_out", "xgboost"])
    assert "`bundle`" in (path / "card.md").read_text()


def test_an_export_without_evaluation_keeps_the_rules_an_earlier_bundle_chose(tmp_path, gemm_rows):
    earlier = tmp_path / "earlier"
    learned = make_estimator("xgboost", "gemm", {"n_estimators": 5}, "efficiency")
    FamilyRouter({"gemm": learned.fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())},
                 rules={"gemm": "out_of_range"}).save(earlier)
    data = tmp_path / "rows.parquet"
    gemm_rows.to_parquet(data)
    with initialize_config_dir(config_dir=str(CONF_DIR / "estimator"), version_base="1.3"):
        cfg = compose("train", overrides=[
            "family=gemm", f"data.path={data}", "splits=[]", f"rules_from={earlier}", "mlflow.plots=false",
            "mlflow.register=false", "model.params.n_estimators=5", f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db",
            "mlflow.experiment=test", f"export={tmp_path / 'bundle'}"])
    run(cfg)
    assert estimator.load(str(tmp_path / "bundle")).rule("gemm") == "out_of_range"  # not the default rule
    assert str(earlier) in (tmp_path / "bundle" / "card.md").read_text()
