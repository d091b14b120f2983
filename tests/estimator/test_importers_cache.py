"""estimator.data.load_measurements: one frame over sources, cached by input digests, rebuilt on change."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from stepcast.estimator.data import load_measurements, source_digest
from stepcast.estimator.importers import TRAINING_COLUMNS, llmcompass
from stepcast.profiling.families import FAMILIES


@pytest.fixture()
def small_root(shared_data: Path, tmp_path: Path) -> Path:
    """A shared-data folder holding only the LLMCompass table (copied into the test's temporary folder)."""
    target = tmp_path / "shared" / llmcompass.MATMUL
    target.parent.mkdir(parents=True)
    shutil.copy(shared_data / llmcompass.MATMUL, target)
    return tmp_path / "shared"


def test_schema_and_cache_round_trip(small_root: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    first = load_measurements(root=small_root, datasets_dir=tmp_path / "none", cache_dir=cache)
    assert list(first.columns[: len(TRAINING_COLUMNS)]) == list(TRAINING_COLUMNS)
    for columns in FAMILIES.values():
        assert set(columns) <= set(first.columns)
    assert len(first) == 20 and set(first["source"]) == {"llmcompass"}
    cached = list(cache.glob("llmcompass-*.parquet"))
    assert len(cached) == 1 and not list(cache.glob(".*tmp"))
    again = load_measurements(root=small_root, datasets_dir=tmp_path / "none", cache_dir=cache)
    pd.testing.assert_frame_equal(first, again)


def test_changed_input_rebuilds_and_replaces_the_cache(small_root: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    before = source_digest("llmcompass", small_root)
    load_measurements(sources=["llmcompass"], root=small_root, cache_dir=cache)
    path = small_root / llmcompass.MATMUL
    path.write_text(path.read_text().replace("0.1900ms", "0.3800ms"))
    assert source_digest("llmcompass", small_root) != before
    rows = load_measurements(sources=["llmcompass"], root=small_root, cache_dir=cache)
    assert rows["runtime_us"].iloc[0] == pytest.approx(380.0)
    assert len(list(cache.glob("llmcompass-*.parquet"))) == 1


def test_family_filter_unknown_names_and_absent_data(small_root: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    assert load_measurements(families=["norm"], root=small_root, datasets_dir=tmp_path / "none", cache_dir=cache).empty
    with pytest.raises(ValueError, match="unknown source 'vidurr'"):
        load_measurements(sources=["vidurr"], root=small_root, cache_dir=cache)
    with pytest.raises(ValueError, match="unknown family"):
        load_measurements(families=["conv"], root=small_root, cache_dir=cache)
    empty = load_measurements(root=tmp_path / "nothing", datasets_dir=tmp_path / "nothing", cache_dir=cache)
    assert empty.empty and list(empty.columns) == list(TRAINING_COLUMNS)
