"""estimator.load: by name, by path, by MLflow URI, through an entry point, and the mixed-family routing."""
from __future__ import annotations

from importlib.metadata import EntryPoint

import numpy as np
import pandas as pd
import pytest

from stepcast import estimator
from stepcast.estimator import registry
from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.router import FamilyRouter
from stepcast.estimator.xgb import XGBoostEstimator


class ToyEstimator(KernelEstimator):
    """A third-party estimator: every kernel takes ``constant_us``."""

    name = "toy"
    version = "7"
    families = ("gemm",)

    def __init__(self, constant_us: float = 42.0) -> None:
        self.constant_us = constant_us

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return np.full(len(frame), self.constant_us)


@pytest.fixture
def mixed(gemm_rows, norm_rows) -> pd.DataFrame:
    return pd.concat([gemm_rows.head(5), norm_rows.head(5)], ignore_index=True)


@pytest.fixture(scope="module")
def gemm_model(gemm_rows) -> XGBoostEstimator:
    return XGBoostEstimator(n_estimators=20).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())


def test_load_roofline_by_name(mixed):
    out = estimator.load("roofline").predict_frame(mixed)
    assert (out["estimator"] == "roofline@1").all()
    np.testing.assert_allclose(out["predicted_us"], RooflineEstimator().predict(mixed))


def test_load_bundle_by_path_routes_each_family(gemm_model, mixed, tmp_path):
    path = FamilyRouter({"gemm": gemm_model}, version="test").save(tmp_path / "bundle")
    out = estimator.load(path).predict_frame(mixed)
    gemm = out["family"] == "gemm"
    assert out.loc[gemm, "estimator"].str.startswith("xgboost@").all()
    assert (out.loc[~gemm, "estimator"] == "roofline@1").all()  # no norm model: roofline, and flagged
    assert not out.loc[~gemm, "in_range"].any()
    np.testing.assert_allclose(out.loc[gemm, "predicted_us"], gemm_model.predict(mixed[gemm]))


def test_a_bundle_in_the_user_data_folder_loads_by_its_name_and_is_listed(gemm_model, mixed, tmp_path, monkeypatch):
    FamilyRouter({"gemm": gemm_model}, version="mine").save(tmp_path / "models" / "mine")
    monkeypatch.setenv("STEPCAST_DATA_DIR", str(tmp_path))
    out = estimator.load("mine").predict_frame(mixed)
    assert out.loc[out["family"] == "gemm", "estimator"].str.startswith("xgboost@").all()
    assert {"mine", "xgboost"} <= set(registry.available_names())


def test_load_single_estimator_folder(gemm_model, gemm_rows, tmp_path):
    loaded = estimator.load(gemm_model.save(tmp_path / "gemm"))
    np.testing.assert_allclose(loaded.predict(gemm_rows.head(20)), gemm_model.predict(gemm_rows.head(20)))


def test_default_load_without_bundle_is_roofline(monkeypatch, tmp_path, mixed):
    monkeypatch.setattr(registry, "MODELS_DIR", tmp_path)
    monkeypatch.delenv("STEPCAST_ESTIMATOR", raising=False)
    out = estimator.load().predict_frame(mixed)
    assert (out["estimator"] == "roofline@1").all()


def test_entry_point_estimator(monkeypatch, mixed):
    """How a third party plugs in: an entry point in the group ``stepcast.estimators`` (here injected the way an
    installed distribution's entry_points.txt would provide it)."""
    toy = EntryPoint(name="toy", value=f"{__name__}:ToyEstimator", group=registry.ENTRY_POINT_GROUP)
    real = registry.entry_points
    def with_toy(group: str):
        return [*real(group=group), toy] if group == registry.ENTRY_POINT_GROUP else real(group=group)

    monkeypatch.setattr(registry, "entry_points", with_toy)
    out = estimator.load("toy", constant_us=5.0).predict_frame(mixed)
    gemm = out["family"] == "gemm"
    assert (out.loc[gemm, "predicted_us"] == 5.0).all() and (out.loc[gemm, "estimator"] == "toy@7").all()
    assert (out.loc[~gemm, "estimator"] == "roofline@1").all()  # the toy covers gemm only
    assert "toy" in registry.available_names()


def test_unknown_name_lists_what_exists():
    with pytest.raises(ValueError, match="roofline"):
        estimator.load("no-such-estimator")


def test_load_from_mlflow_uri(gemm_model, gemm_rows, tmp_path, monkeypatch):
    import mlflow

    from stepcast.estimator.tracking import log_bundle, use_experiment

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    use_experiment("test", f"sqlite:///{tmp_path / 'mlflow.db'}")
    bundle = FamilyRouter({"gemm": gemm_model}).save(tmp_path / "bundle")
    example = gemm_rows[["family", "hardware", "dtype", "m", "n", "k", "batch"]].head(3)
    with mlflow.start_run():
        version = log_bundle(bundle, "gemm", example, pd.Series(gemm_model.predict(example)))
    loaded = estimator.load(f"models:/kernel-runtime-gemm/{version}")
    np.testing.assert_allclose(loaded.predict(gemm_rows.head(10)), gemm_model.predict(gemm_rows.head(10)))
    pyfunc = mlflow.pyfunc.load_model(f"models:/kernel-runtime-gemm/{version}")
    np.testing.assert_allclose(pyfunc.predict(example)["predicted_us"], gemm_model.predict(example))


def test_predict_accepts_a_list_of_kernel_specs(gemm_model):
    spec = dict(family="gemm", hardware="h100-sxm", dtype="bf16", m=1024, n=1024, k=1024, batch=1)
    router = FamilyRouter({"gemm": gemm_model})
    assert router.predict([spec, spec]).shape == (2,)
