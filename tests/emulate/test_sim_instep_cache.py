"""In-step factors are cached per (estimator version, data fingerprint, GPU, held-out models) and refitted when
any of them changes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.sim import instep
from stepcast.estimator.importers.neusight_inmodel import LABEL_DIR


class VersionedEstimator:
    """Predicts every kernel at ``us``; counts its calls; ``version`` names it as a bundle does."""

    name = "fake"

    def __init__(self, version: str, us: float = 100.0) -> None:
        self.version, self.us, self.calls = version, us, 0

    def predict_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        self.calls += 1
        return frame.assign(predicted_us=self.us, estimator=f"{self.name}@{self.version}")


def in_step_rows() -> pd.DataFrame:
    return pd.DataFrame([
        {"family": "gemm", "hardware": "t4", "m": 8, "n": 8, "k": 8, "batch": 1, "runtime_us": 80.0 + 40 * i,
         "repeat": 1, "pass_scale": 1.0, "model": m, "sample": f"Tesla_T4/{m}-inf-8-1"}
        for i, m in enumerate(("a", "b"))])


@pytest.fixture
def data(tmp_path, monkeypatch) -> tuple[Path, list]:
    """A shared-data folder with one label file pair (the fingerprint's input), the cache in tmp_path, and the
    list of times the in-step rows were read."""
    folder = tmp_path / "shared" / LABEL_DIR / "Tesla_T4"
    folder.mkdir(parents=True)
    (folder / "a-inf-8-1.json").write_text(json.dumps({"num_layer": 1, "fw_latency": 1.0}))
    (folder / "a-inf-8-1.csv").write_text("op,target,meta,input_shapes,output_shape,fw_latency\n")
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    reads = []
    monkeypatch.setattr(instep, "in_step_rows", lambda root=None: reads.append(root) or in_step_rows())
    return tmp_path / "shared", reads


def test_a_second_start_reads_the_cached_factors_not_the_traces(data):
    data, reads = data
    first = instep.cached_factors("t4", VersionedEstimator("1"), ["c"], root=str(data))
    assert first == {"gemm": pytest.approx((80.0 + 120.0) / 200.0)} and len(reads) == 1
    again = instep.cached_factors("t4", VersionedEstimator("1"), ["c"], root=str(data))
    assert again == first and len(reads) == 1
    assert len(list((data.parent / "cache" / instep.CACHE_FOLDER).glob("*.json"))) == 1


def test_a_new_bundle_version_is_fitted_afresh(data):
    data, reads = data
    instep.cached_factors("t4", VersionedEstimator("1"), root=str(data))
    refit = instep.cached_factors("t4", VersionedEstimator("2"), root=str(data))
    assert len(reads) == 2 and refit == {"gemm": pytest.approx(1.0)}


def test_the_same_version_predicting_differently_is_fitted_afresh(data):
    data, reads = data
    instep.cached_factors("t4", VersionedEstimator("1"), root=str(data))
    refit = instep.cached_factors("t4", VersionedEstimator("1", us=50.0), root=str(data))
    assert len(reads) == 2 and refit == {"gemm": pytest.approx(2.0)}


def test_changed_label_files_or_held_out_models_are_fitted_afresh(data):
    data, reads = data
    instep.cached_factors("t4", VersionedEstimator("1"), root=str(data))
    instep.cached_factors("t4", VersionedEstimator("1"), ["a"], root=str(data))
    assert len(reads) == 2
    (data / LABEL_DIR / "Tesla_T4" / "a-inf-8-1.json").write_text(json.dumps({"num_layer": 2, "fw_latency": 1.0}))
    instep.cached_factors("t4", VersionedEstimator("1"), root=str(data))
    assert len(reads) == 3


def test_an_unreadable_cache_file_is_rewritten(data):
    data, reads = data
    instep.cached_factors("t4", VersionedEstimator("1"), root=str(data))
    (cached,) = (data.parent / "cache" / instep.CACHE_FOLDER).glob("*.json")
    cached.write_text("{not json")
    assert instep.cached_factors("t4", VersionedEstimator("1"), root=str(data))["gemm"] == pytest.approx(1.0)
    assert json.loads(cached.read_text())["factors"]["gemm"] == pytest.approx(1.0)


def test_an_estimator_without_a_version_is_not_cached(data):
    data, reads = data
    class Unversioned:
        def predict_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
            return frame.assign(predicted_us=np.full(len(frame), 100.0))

    instep.cached_factors("t4", Unversioned(), root=str(data))
    instep.cached_factors("t4", Unversioned(), root=str(data))
    assert len(reads) == 2 and not (data.parent / "cache").exists()


def test_a_gpu_without_in_step_rows_never_asks_the_estimator(data):
    # the common case (an H100 target): no factors to fit, so no prediction to make or to check, first start or not
    data, _ = data
    est = VersionedEstimator("1")
    assert instep.cached_factors("h100-sxm", est, root=str(data)) == {}
    assert instep.cached_factors("h100-sxm", est, root=str(data)) == {}
    assert est.calls == 0
