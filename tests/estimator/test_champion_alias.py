"""Retraining through the Hydra app registers a new MLflow version; ``champion`` moves only when it wins."""
from __future__ import annotations

import mlflow
import pytest
from hydra import compose, initialize_config_dir
from mlflow import MlflowClient

from stepcast.estimator.train import run
from stepcast.profiling.paths import CONF_DIR


@pytest.fixture
def setup(tmp_path, gemm_rows, monkeypatch):
    data = tmp_path / "rows.parquet"
    gemm_rows.to_parquet(data)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)

    def train(n_estimators: int, learning_rate: float) -> None:
        with initialize_config_dir(config_dir=str(CONF_DIR / "estimator"), version_base="1.3"):
            cfg = compose("train", overrides=[
                "family=gemm", f"data.path={data}", "splits=[random]", "mlflow.plots=false",
                f"model.params.n_estimators={n_estimators}", f"model.params.learning_rate={learning_rate}",
                f"mlflow.tracking_uri={uri}", "mlflow.experiment=test"])
        run(cfg)

    return train, uri


def runs(uri: str) -> list:
    mlflow.set_tracking_uri(uri)
    found = mlflow.search_runs(experiment_names=["test"], order_by=["start_time ASC"], output_format="list")
    return found


def test_champion_moves_only_on_improvement(setup):
    train, uri = setup
    client = lambda: MlflowClient(tracking_uri=uri)  # noqa: E731
    train(n_estimators=5, learning_rate=0.3)  # v1: first version becomes champion
    assert str(client().get_model_version_by_alias("kernel-runtime-gemm", "champion").version) == "1"
    train(n_estimators=1, learning_rate=0.01)  # v2: barely trained, loses
    assert str(client().get_model_version_by_alias("kernel-runtime-gemm", "champion").version) == "1"
    train(n_estimators=80, learning_rate=0.3)  # v3: wins
    assert str(client().get_model_version_by_alias("kernel-runtime-gemm", "champion").version) == "3"
    first, second, third = runs(uri)
    assert first.data.tags["promoted"] == "true" and "champion_fixed_eval_mean_ape" not in first.data.metrics
    assert second.data.tags["promoted"] == "false"
    assert second.data.metrics["fixed_eval_mean_ape"] > second.data.metrics["champion_fixed_eval_mean_ape"]
    assert third.data.tags["promoted"] == "true"
    assert third.data.metrics["fixed_eval_mean_ape"] < third.data.metrics["champion_fixed_eval_mean_ape"]
    assert {"random.mean_ape", "random.p90_ape", "random.within_10pct"} <= set(third.data.metrics)
