"""The ``stepcast`` console command as a new user meets it: every --help fits one screen and ends with an
example, and nothing lands in the working folder unasked (captures and Hydra's run records go to the cache)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT

COMMANDS = ["run", "replay", "validate", "search", "predict", "profile", "train", "examples"]
SCREEN = 40


def stepcast(*args: str, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None,
             timeout: int = 300) -> subprocess.CompletedProcess:
    """``stepcast args...`` as typed in an 80-column terminal (through ``python -m stepcast``: same entry point)."""
    full_env = {**os.environ, "COLUMNS": "80", **(env or {})}
    return subprocess.run([sys.executable, "-m", "stepcast", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def test_top_level_help_lists_every_command_and_fits_a_screen():
    done = stepcast("--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) < SCREEN, done.stdout
    for command in COMMANDS:
        assert any(line.strip().startswith(command) for line in lines), f"{command} missing from stepcast --help"


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_help_fits_a_screen_and_ends_with_an_example(command):
    done = stepcast(command, "--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.rstrip().splitlines()
    assert len(lines) < SCREEN, f"stepcast {command} --help: {len(lines)} lines\n{done.stdout}"
    tail = "\n".join(lines[-4:])
    assert "example" in tail.lower() and "stepcast " in tail, (f"stepcast {command} --help ends without an example:\n"
                                                               f"{tail}")


def test_version_names_the_installed_release():
    from importlib.metadata import version

    done = stepcast("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"stepcast {version('stepcast')}", done.stdout


def test_unknown_command_is_one_line_and_exit_2():
    done = stepcast("simulate-everything")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_profile_writes_hydra_record_to_the_cache_and_a_few_progress_lines(tmp_path, monkeypatch):
    """Hydra's run folder goes under <cache>/outputs, not ./outputs; without a terminal the live display is a few
    whole lines, family names uncut, not a line per refresh."""
    work, cache, data = tmp_path / "work", tmp_path / "cache", tmp_path / "ds"
    work.mkdir()
    monkeypatch.delenv("STEPCAST_OUTPUTS", raising=False)
    env = {"STEPCAST_CACHE_DIR": str(cache)}
    done = stepcast("profile", "families=[gemm,elementwise]", "gemm=tiny", "elementwise=tiny",
                    "hardware=cpu-intel-xeon-2c", "budget_minutes=1", f"output_dir={data}", cwd=work,
                    env=env)
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == [], f"written to the working folder: {list(work.iterdir())}"
    records = list((cache / "outputs" / "profiling").iterdir())
    assert len(records) == 1 and (records[0] / ".hydra" / "config.yaml").is_file()
    progress = [line for line in done.stderr.splitlines() if " points, " in line]
    assert progress and len(progress) <= 10, done.stderr
    assert {line.split(":")[0] for line in progress} == {"gemm", "elementwise"}


@pytest.mark.slow
def test_run_writes_nothing_to_the_working_folder(tmp_path):
    script = REPO_ROOT / "examples" / "gpt.py"
    done = stepcast("run", "--", str(script), "--steps", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "iteration time" in done.stdout
    assert list(tmp_path.iterdir()) == [], f"written to the working folder: {list(tmp_path.iterdir())}"
