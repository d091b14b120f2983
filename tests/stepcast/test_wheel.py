"""The package as a user installs it: a wheel built from this tree, installed into a fresh virtual environment
outside the repository, run from an empty folder. It must predict (the shipped catalog, bundles, driver sources
and examples are package data), install nothing but the ``stepcast`` name, and leave a script's own modules named
``profiling`` or ``datasets`` alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT
from tests.tools import load_tool

readme_sample = load_tool("readme_sample")

#: what a wheel is built from (setup.py maps these folders under ``stepcast``)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "stepcast", "emulate", "estimator", "profiling", "conf",
           "models", "examples")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the sources (the build writes its own folders; the checkout stays as it is)."""
    tree = tmp_path_factory.mktemp("tree")
    for name in SOURCES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(tree)], check=True, capture_output=True, text=True)
    (built,) = out.glob("stepcast-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment holding the wheel; the dependencies (torch and the rest) come from this interpreter's
    site-packages, as the test cannot download them."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, text=True)
    return env_dir / "bin"


def user_environment() -> dict[str, str]:
    """This environment without anything that points into the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "FORCE_COLOR"}}
    return {**env, "COLUMNS": readme_sample.WIDTH, "TERM": "dumb"}


def run(bin_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=user_environment(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)


def test_the_wheel_installs_one_top_level_name_and_carries_the_data_it_needs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"stepcast"}
    for needed in ("stepcast/conf/hardware/h100-sxm.yaml", "stepcast/models/xgboost/manifest.json",
                   "stepcast/models/xgboost/SHA256SUMS", "stepcast/emulate/driver/csrc/compat/crt/host_defines.h",
                   "stepcast/emulate/host_call_costs.json", "stepcast/examples/gpt.py"):
        assert needed in names, needed
    shipped = {p.relative_to(REPO_ROOT / "models").as_posix() for p in (REPO_ROOT / "models").rglob("*") if p.is_file()}
    assert {f"stepcast/models/{p}" for p in shipped} <= set(names)


def test_the_installed_command_answers_help_from_the_installed_package(installed, tmp_path):
    done = run(installed, ["stepcast", "--help"], tmp_path)
    assert done.returncode == 0 and "usage: stepcast" in done.stdout, done.stdout
    where = run(installed, ["python", "-c", "import stepcast.emulate; print(stepcast.emulate.__file__)"], tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout


def test_the_readme_example_runs_from_an_empty_folder_and_prints_the_readme_block(installed, tmp_path):
    copied = run(installed, ["stepcast", "examples"], tmp_path)
    assert copied.returncode == 0 and (tmp_path / "examples" / "gpt.py").is_file(), copied.stdout
    done = run(installed, readme_sample.COMMAND, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    expected = readme_sample.readme_block((REPO_ROOT / "README.md").read_text())
    got = readme_sample.block(readme_sample.mask(done.stdout))
    assert readme_sample.differences(expected, got) == []


def test_a_script_with_its_own_profiling_and_datasets_modules_runs_under_the_installed_command(
        installed, tmp_path, script_with_own_modules):
    script = script_with_own_modules(tmp_path)
    done = run(installed, ["stepcast", "run", "--", str(script)], tmp_path)
    assert done.returncode == 0 and "own modules: profiling datasets True" in done.stdout, done.stdout[-3000:]
