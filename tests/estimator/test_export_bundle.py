"""Exporting a bundle: it loads and predicts, and its card scores the bundle itself (learned model plus fallback rule)
next to the learned model and the roofline alone."""
from __future__ import annotations

import importlib.metadata
import json

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from stepcast import estimator
from stepcast.estimator.evaluate import Evaluation, bundle_predictions
from stepcast.estimator.metrics import summary
from stepcast.estimator.models import make_estimator
from stepcast.estimator.router import FamilyRouter
from stepcast.estimator.train import run
from stepcast.profiling.paths import CONF_DIR


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
    assert card["trained_with"]["xgboost"] == importlib.metadata.version("xgboost")  # what the trees depend on
    assert f"- xgboost {card['trained_with']['xgboost']}" in (path / "card.md").read_text()


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


def collective_rows() -> pd.DataFrame:
    """Collectives on two devices timed by NCCL's structure at known figures (a fit can find them)."""
    from stepcast.estimator.nccl import PARAMS, Rows, model_us

    rows = pd.DataFrame([{"family": "collective", "hardware": h, "dtype": "bf16", "op": op, "bytes": 2.0 ** s,
                          "ranks": n, "ranks_per_node": n, "source": "synthetic", "group": f"{h}/{n}"}
                         for h in ("h100-sxm", "a100-sxm-80gb") for op in ("all_reduce", "all_gather")
                         for n in (2, 4, 8) for s in range(10, 30)])
    return rows.assign(runtime_us=model_us(Rows.of(rows), PARAMS | {"base_us": 9.0})[0])


def export_with(tmp_path, overrides: list[str]):
    data = tmp_path / "rows.parquet"
    collective_rows().to_parquet(data)
    with initialize_config_dir(config_dir=str(CONF_DIR / "estimator"), version_base="1.3"):
        cfg = compose("train", overrides=[
            "family=collective", f"data.path={data}", "splits=[random,leave_one_hardware_out]", "mlflow.plots=false",
            "mlflow.register=false", "model.params.n_estimators=5", f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db",
            "mlflow.experiment=test", f"export={tmp_path / 'bundle'}", *overrides])
    run(cfg)
    return tmp_path / "bundle"


def test_collectives_are_exported_with_the_nccl_model_family_models_names(tmp_path):
    path = export_with(tmp_path, [])
    assert json.loads((path / "collective" / "meta.json").read_text())["kind"] == "nccl"
    card = json.loads((path / "card.json").read_text())
    assert card["model"] == "xgboost" and card["family_models"]["collective"]["kind"] == "nccl"
    assert any(n.startswith("collective: fallback rule") and "seen once fitted" in n for n in card["notes"])
    table = pd.DataFrame(card["metrics"]).set_index(["split", "model"])["mean_ape"]
    assert table["random", "nccl"] < 1.0 and table["random", "bundle"] == pytest.approx(table["random", "nccl"])
    assert "**nccl**" in (path / "card.md").read_text()
    out = estimator.load(str(path)).predict_frame(collective_rows().head(40))
    assert out["estimator"].str.startswith("nccl@").all() and out["in_range"].all()
    assert np.abs(out["predicted_us"] / out["runtime_us"] - 1.0).max() < 0.05


def test_an_empty_family_models_trains_every_family_with_model(tmp_path):
    path = export_with(tmp_path, ["family_models=null"])
    assert json.loads((path / "collective" / "meta.json").read_text())["kind"] == "xgboost"
    assert json.loads((path / "card.json").read_text())["family_models"] == {}


def test_a_family_model_without_a_config_is_refused_in_one_line(tmp_path):
    from stepcast.estimator.train import TrainingInputError

    with pytest.raises(TrainingInputError, match=r"family_models.collective: no model config 'ncl' \(expected one of"):
        export_with(tmp_path, ["family_models.collective=ncl"])


def test_a_bundle_saved_over_another_keeps_no_file_of_the_model_it_replaced(tmp_path):
    from stepcast.estimator.nccl import NcclEstimator

    rows = collective_rows()
    xgb = make_estimator("xgboost", "collective", {"n_estimators": 3}, "efficiency")
    FamilyRouter({"collective": xgb.fit(rows, rows["runtime_us"].to_numpy())}).save(tmp_path / "b")
    FamilyRouter({"collective": NcclEstimator().fit(rows, rows["runtime_us"].to_numpy())}).save(tmp_path / "b")
    assert not (tmp_path / "b" / "collective" / "model.ubj").exists()
    assert "model.ubj" not in (tmp_path / "b" / "SHA256SUMS").read_text()
    assert isinstance(estimator.load(str(tmp_path / "b")).estimators["collective"], NcclEstimator)


def test_data_exclude_hardware_trains_a_bundle_that_never_saw_that_device(tmp_path, gemm_rows):
    # what the end-to-end benchmark's --unseen trains for each GPU (benchmarks/emulate/e2e/unseen_bundles.py)
    from stepcast.estimator.train import load_training_rows

    data = tmp_path / "rows.parquet"
    gemm_rows.to_parquet(data)
    dropped = sorted(set(gemm_rows["hardware"]))[0]
    with initialize_config_dir(config_dir=str(CONF_DIR / "estimator"), version_base="1.3"):
        cfg = compose("train", overrides=["family=gemm", f"data.path={data}", f"data.exclude_hardware=[{dropped}]"])
    rows = load_training_rows(cfg.data, ["gemm"])
    assert dropped not in set(rows["hardware"]) and len(rows) == int((gemm_rows["hardware"] != dropped).sum())


def test_an_exported_bundle_ships_a_power_floor_fitted_on_its_gemm_rows(exported, gemm_rows):
    from stepcast.estimator.power_floor import FILENAME

    path, _ = exported
    floor = FamilyRouter.load(path).power_floor
    assert set(floor.joules_per_flop) == {"9.0x132/bf16", "8.0x108/bf16"}   # the two synthetic devices
    card = json.loads((path / "card.json").read_text())["power_floor"]
    assert card["joules_per_flop"] == floor.joules_per_flop and FILENAME in (path / "SHA256SUMS").read_text()
    assert card["binds_measured"]["raised"] == 0 and card["binds_predicted"]["rows"] > 0
