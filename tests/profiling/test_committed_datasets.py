"""The datasets committed under datasets/ follow the schema (their real training runs too), and the summary command
reads them."""
from __future__ import annotations

import pytest

from stepcast.profiling.card import read_card
from stepcast.profiling.families import FAMILIES
from stepcast.emulate.validate import load_real
from stepcast.profiling.paths import REPO_ROOT

DATASETS_DIR = REPO_ROOT / "datasets"  # the committed ones (not the user folder a setting may point elsewhere)
from stepcast.profiling.schema import read_family
from stepcast.profiling.summary import main as summary_main

FOLDERS = sorted(p for p in DATASETS_DIR.glob("*") if (p / "card.json").exists())


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_committed_dataset_is_valid(folder):
    card = read_card(folder / "card.json")
    assert card.hardware == folder.name
    for family, summary in card.families.items():
        frame = read_family(folder / f"{family}.parquet")
        assert len(frame) == summary.points and (frame["hardware"] == folder.name).all()
        assert frame["point_id"].is_unique
    assert not (folder / ".shards").exists()
    for path in sorted(folder.glob("real_runs/*.json")):  # real training runs (python -m stepcast.emulate.measure_real)
        run = load_real(path)
        assert run["hardware"] == folder.name and (REPO_ROOT / run["script"]).is_file(), path


def test_cpu_dataset_covers_every_family_in_fp32_and_bf16():
    folder = DATASETS_DIR / "cpu-intel-xeon-2c"
    for family in FAMILIES:
        frame = read_family(folder / f"{family}.parquet")
        ok = frame[frame["status"] == "ok"]
        assert {"fp32", "bf16"} <= set(ok["dtype"]), family
    collective = read_family(folder / "collective.parquet")
    assert set(collective["ranks"]) == {2, 4}


def test_summary_prints_every_family(capsys, tmp_path):
    assert summary_main([str(DATASETS_DIR / "cpu-intel-xeon-2c")]) == 0
    printed = capsys.readouterr().out
    assert all(family in printed for family in FAMILIES)
    assert summary_main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("stepcast: ")
