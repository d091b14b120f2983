"""Fixtures for the harness tests: the profiling config with tiny sweeps, and the CLI run in a subprocess."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from stepcast.profiling.paths import CONF_DIR, REPO_ROOT

TINY = [f"{f}=tiny" for f in ("gemm", "attention", "elementwise", "norm", "optimizer", "collective")]
# Tests measure on the CPU and file the rows under the committed CPU entry, so they run on any machine
# (a GPU test asks for hardware=auto itself).
CPU_ID = "cpu-intel-xeon-2c"


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., DictConfig]:
    """The app's config with every family's tiny sweep, writing under tmp_path; extra overrides as arguments."""

    def make(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF_DIR / "profiling"), version_base="1.3"):
            return compose("config", overrides=[*TINY, f"hardware={CPU_ID}", f"output_dir={tmp_path}",
                                                "progress=false", *overrides])

    return make


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``stepcast profile`` with tiny sweeps writing under tmp_path; ``background=True`` returns the Popen."""

    def run(*overrides: str, background: bool = False):
        args = [sys.executable, "-m", "stepcast.profiling", *TINY, f"hardware={CPU_ID}", f"output_dir={tmp_path}",
                "progress=false", f"hydra.run.dir={tmp_path}/hydra", *overrides]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        if background:  # SIGINT at its default: a test run started in the background (`cmd &`) ignores it, and
            # an ignored signal is inherited, so the child would never see the Ctrl-C the resume test sends
            return subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)

    return run


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    """Where ``tiny_config`` and ``cli`` runs write their dataset."""
    return tmp_path / CPU_ID


@pytest.fixture
def catalog_file(tmp_path: Path) -> Callable[..., Path]:
    """A copy of a catalog entry's file under tmp_path with some fields changed: ``catalog_file("l40s", field=...)``."""
    import yaml

    from stepcast.profiling.hardware import HARDWARE_DIR

    def write(hw_id: str, **changes) -> Path:
        data = yaml.safe_load((HARDWARE_DIR / f"{hw_id}.yaml").read_text()) | changes
        path = tmp_path / f"{hw_id}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return write
