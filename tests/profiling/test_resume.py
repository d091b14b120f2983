"""Runs resume: an interrupted run keeps what it measured, and a rerun measures only what is missing."""
from __future__ import annotations

import signal
import time

from stepcast.profiling.card import read_card
from stepcast.profiling.runner import run
from stepcast.profiling.schema import read_family
from stepcast.profiling.store import FamilyStore

# Enough gemm points that the run is still measuring when it is interrupted (one shard per point).
MANY = ("families=[gemm]", "gemm.grid.0.m=[8,16,24,32,40,48,56,64,72,80]", "gemm.grid.0.k=[8,16,24,32,40]",
        "gemm.max_points=100", "shard_points=1")


def test_second_identical_run_measures_nothing(tiny_config):
    cfg = tiny_config()
    first = run(cfg)
    assert all(f.measured == f.planned > 0 for f in first.families.values())
    card = read_card(first.output / "card.json")
    assert card.timing == "perf_counter" and card.fingerprint.kind == "cpu"
    assert {name: s.points for name, s in card.families.items()} == {
        name: f.planned for name, f in first.families.items()}
    for family in first.families:
        read_family(first.output / f"{family}.parquet")  # valid on read
    assert not (first.output / ".shards").exists()

    second = run(cfg)
    assert second.measured == 0
    assert all(f.already == f.planned for f in second.families.values())


def test_interrupted_run_loses_nothing_and_resumes(cli, tiny_config, dataset_dir):
    proc = cli(*MANY, background=True)
    shards = dataset_dir / ".shards" / "gemm"
    deadline = time.time() + 120
    while not (shards.is_dir() and len(list(shards.glob("*.parquet"))) >= 3):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the run never wrote a shard"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr

    kept = FamilyStore(dataset_dir, "gemm").read()
    leftovers = [p.relative_to(dataset_dir) for p in dataset_dir.rglob("*") if p.name.startswith(".")]
    assert leftovers == [], stderr  # shards merged into gemm.parquet on the way out, no temporary files
    assert 3 <= len(kept) < 100

    resumed = run(tiny_config(*MANY))
    gemm = resumed.families["gemm"]
    assert gemm.planned == 100 and gemm.already == len(kept) and gemm.measured == 100 - len(kept)
    final = FamilyStore(resumed.output, "gemm").read()
    assert len(final) == 100 and final["point_id"].is_unique
    assert set(kept["point_id"]) <= set(final["point_id"])


def test_zero_budget_measures_nothing(tiny_config, tmp_path):
    result = run(tiny_config("budget_minutes=0"))
    assert result.measured == 0
    assert not any(tmp_path.glob("*/*.parquet"))
