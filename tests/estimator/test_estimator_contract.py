"""Every learned estimator honours the one contract: params in the constructor, fit / predict / save / load,
microseconds out, and bundles of portable files only (no pickles)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepcast.estimator.checksums import CHECKSUMS_FILE
from stepcast.estimator.forest import RandomForestEstimator
from stepcast.estimator.mlp import MLPEstimator
from stepcast.estimator.xgb import XGBoostEstimator

FAST = {
    "xgboost": lambda: XGBoostEstimator(family="gemm", n_estimators=40, max_depth=4),
    "mlp": lambda: MLPEstimator(family="gemm", hidden=(32, 32), epochs=30, batch_size=64),
}
PORTABLE_SUFFIXES = {".json", ".ubj", ".safetensors", ".md"}


def assert_no_pickles(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert path.suffix in PORTABLE_SUFFIXES or path.name == CHECKSUMS_FILE, f"{path.name}: not portable"
            assert not path.read_bytes().startswith(b"\x80"), f"{path.name}: looks like a pickle"


@pytest.mark.parametrize("kind", sorted(FAST))
def test_fit_predict_save_load_round_trip(kind, gemm_rows, tmp_path):
    model = FAST[kind]().fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())
    pred = model.predict(gemm_rows)
    assert pred.dtype == np.float64 and pred.shape == (len(gemm_rows),) and np.all(pred > 0)
    folder = model.save(tmp_path / kind)
    assert_no_pickles(folder)
    loaded = type(model).load(folder)
    np.testing.assert_allclose(loaded.predict(gemm_rows), pred, rtol=1e-5)
    assert loaded.get_params() == model.get_params()


@pytest.mark.parametrize("kind", sorted(FAST))
def test_learned_model_beats_roofline_on_held_out_rows(kind, gemm_rows):
    from stepcast.estimator.analytical import RooflineEstimator
    from stepcast.estimator.metrics import summary

    train, test = gemm_rows.iloc[:300], gemm_rows.iloc[300:]
    model = FAST[kind]().fit(train, train["runtime_us"].to_numpy())
    learned = summary(model.predict(test), test["runtime_us"])["mean_ape"]
    roofline = summary(RooflineEstimator().predict(test), test["runtime_us"])["mean_ape"]
    assert learned < roofline


def test_both_targets_predict_microseconds(gemm_rows):
    for target in ("efficiency", "log_time"):
        model = XGBoostEstimator(target=target, n_estimators=20).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())
        ratio = model.predict(gemm_rows) / gemm_rows["runtime_us"].to_numpy()
        assert 0.5 < np.median(ratio) < 2.0


def test_random_forest_is_benchmark_only(gemm_rows, tmp_path):
    model = RandomForestEstimator(n_estimators=5).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())
    assert np.all(model.predict(gemm_rows) > 0)
    with pytest.raises(NotImplementedError, match="pickle"):
        model.save(tmp_path / "rf")


def test_estimator_refuses_other_families(gemm_rows, norm_rows):
    model = XGBoostEstimator(n_estimators=5).fit(gemm_rows, gemm_rows["runtime_us"].to_numpy())
    with pytest.raises(ValueError, match="norm"):
        model.predict(norm_rows)


def test_fit_rejects_non_positive_runtimes(gemm_rows):
    with pytest.raises(ValueError, match="runtime_us"):
        XGBoostEstimator(n_estimators=5).fit(gemm_rows, np.zeros(len(gemm_rows)))
