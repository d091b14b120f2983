"""Mistakes in a ``stepcast profile`` command end in one line and exit 2 before anything is measured, and
``python -m stepcast.profiling.summary`` after a killed run says what is pending and how to resume."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from stepcast.profiling.paths import CONF_DIR, REPO_ROOT
from stepcast.profiling.plan import plan_family, select_sweep
from stepcast.profiling.runner import ConfigError, Runner, make_row, run
from stepcast.profiling.store import FamilyStore
from stepcast.profiling.summary import main as summary_main

CPU_ID = "cpu-intel-xeon-2c"


def profile(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "stepcast.profiling", "families=[gemm]", "gemm=tiny", f"hardware={CPU_ID}",
            f"output_dir={tmp_path}", "progress=false", f"hydra.run.dir={tmp_path}/hydra", *overrides]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | {"PYTHONWARNINGS": "ignore"}
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("override, message", [
    ("budget_minutes=-1", "stepcast: budget_minutes: expected a number of minutes >= 0, got -1"),
    ("family=nonsense", "stepcast: Could not override 'family'. To append to your config use +family=nonsense "
                        "(Key 'family' is not in struct)"),
    ("gemm=nonsense", "stepcast: In 'config': Could not find 'gemm/nonsense' Available options in 'gemm': "),
], ids=["negative-budget", "unknown-key", "unknown-option"])
def test_bad_setting_is_one_line_and_measures_nothing(tmp_path, override, message):
    proc = profile(tmp_path, override)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert not list(tmp_path.glob(f"{CPU_ID}/**/*.parquet"))


def config(tmp_path: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR / "profiling"), version_base="1.3"):
        return compose("config", overrides=["families=[gemm]", "gemm=tiny", f"hardware={CPU_ID}",
                                            f"output_dir={tmp_path}", "progress=false", *overrides])


@pytest.mark.parametrize("override, message", [
    ("budget_minutes=abc", "budget_minutes: expected a number of minutes >= 0, got 'abc'"),
    ("budget_minutes=-0.5", "budget_minutes: expected a number of minutes >= 0, got -0.5"),
    ("max_points=0", "max_points: expected a whole number >= 1 or null, got 0"),
    ("shard_points=2.5", "shard_points: expected a whole number >= 1, got 2.5"),
    ("threads=[1]", "threads: expected a whole number >= 1 or null, got [1]"),
])
def test_numeric_settings_are_checked_before_measuring(tmp_path, override, message):
    with pytest.raises(ConfigError) as caught:
        Runner(config(tmp_path, override))
    assert str(caught.value) == message


def _killed_run(folder: Path) -> None:
    """What a profiling run killed before its end leaves: shard files and no card."""
    sweep = select_sweep(OmegaConf.load(CONF_DIR / "profiling" / "gemm" / "tiny.yaml"), "cpu", "gemm")
    points = plan_family("gemm", sweep, CPU_ID, seed=0)
    FamilyStore(folder, "gemm").append([make_row(p, "killed", "perf_counter", 1) for p in points[:2]])


def test_summary_after_a_killed_run_says_shards_are_pending(tmp_path, capsys):
    folder = tmp_path / CPU_ID
    _killed_run(folder)
    assert summary_main([str(folder)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stepcast: {folder}: 1 shard file of measured rows pending "
                                                   "under .shards/ (gemm)"), lines
    assert "run the same stepcast profile command again to resume" in lines[0]


def test_summary_notes_shards_pending_beside_a_card(tmp_path, capsys):
    folder = tmp_path / CPU_ID
    _killed_run(folder)
    run(config(tmp_path, "budget_minutes=0"))  # measures nothing, merges the shards, writes the card
    assert summary_main([str(folder)]) == 0 and "pending" not in capsys.readouterr().err
    _killed_run(folder)  # a second run into the same folder, killed
    assert summary_main([str(folder)]) == 0
    assert "stepcast: note: 1 shard file of measured rows pending" in capsys.readouterr().err
