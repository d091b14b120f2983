"""benchmarks/emulate/torch_venv.py with a fake pip (no environment is made): the steps in order, torch held at the
release by a constraints file that replaces the machine's, a wheel folder tried alone first, a missing torchvision
recorded, an install failure as one line, and a complete environment reused without running anything."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.emulate.torch_venv import Installer, VenvError, read_record


class FakePip:
    """Answers the installer's commands: creates bin/python on ``-m venv``, records every pip call (with its
    PIP_CONSTRAINT file's text) and fails the ones ``fail`` names."""

    def __init__(self, *, fail: tuple[str, ...] = (), torch_installed: str = "") -> None:
        self.fail = fail
        self.torch = torch_installed
        self.pip: list[tuple[list[str], str]] = []

    def __call__(self, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
        if cmd[1:3] == ["-m", "venv"]:
            (Path(cmd[3]) / "bin").mkdir(parents=True)
            (Path(cmd[3]) / "bin" / "python").write_text("")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if cmd[1:4] == ["-m", "pip", "install"]:
            args = cmd[5:]
            self.pip.append((args, Path(kwargs["env"]["PIP_CONSTRAINT"]).read_text()))
            if any(f in " ".join(args) for f in self.fail):
                return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for it\n")
            if any(a.startswith("torch==") for a in args):
                self.torch = args[-1].split("==")[1]
            return subprocess.CompletedProcess(cmd, 0, "", "")
        code = cmd[2]
        if "m.version('torch')" in code:
            return subprocess.CompletedProcess(cmd, 0 if self.torch else 1, f"{self.torch}\n", "")
        if "version.py" in code:
            return subprocess.CompletedProcess(cmd, 0, f"{self.torch}+cu124 12.4\n", "")
        torchvision = "" if "torchvision" in " ".join(self.fail) else "0.21.0"
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"transformers": "4.57.0",
                                                               "torchvision": torchvision}), "")


def installer(tmp_path: Path, pip: FakePip, **kwargs) -> Installer:
    return Installer(tmp_path / "venvs", run=pip, log=lambda line: None, **kwargs)


def test_a_new_environment_gets_torch_then_this_checkout_then_torchvision_with_torch_held(tmp_path):
    pip = FakePip()
    venv = installer(tmp_path, pip).ensure("2.6.0")
    assert [args for args, _ in pip.pip] == [["torch==2.6.0"], ["-e", str(Path(venv.repo)), "transformers>=4.56"],
                                            ["torchvision>=0.21"]]
    assert {constraint for _, constraint in pip.pip} == {"torch==2.6.0\n"}
    assert (venv.torch, venv.cuda, venv.packages["torchvision"]) == ("2.6.0+cu124", "12.4", "0.21.0")
    assert read_record(venv.path) == venv


def test_a_complete_environment_is_reused_without_running_anything(tmp_path):
    installer(tmp_path, FakePip()).ensure("2.9.1")
    again = FakePip(torch_installed="2.9.1")
    venv = installer(tmp_path, again).ensure("2.9.1")
    assert again.pip == [] and venv.torch == "2.9.1+cu124"


def test_a_wheel_folder_is_tried_alone_first_then_with_the_index(tmp_path):
    pip = FakePip(fail=("--no-index",))
    installer(tmp_path, pip, find_links="/wheels/t{version}").ensure("2.15.0")
    assert [args for args, _ in pip.pip][:2] == [["--no-index", "--find-links", "/wheels/t2.15.0", "torch==2.15.0"],
                                                 ["--find-links", "/wheels/t2.15.0", "torch==2.15.0"]]


def test_no_torchvision_for_the_release_is_recorded_not_fatal(tmp_path):
    venv = installer(tmp_path, FakePip(fail=("torchvision",))).ensure("2.15.0")
    assert venv.packages["torchvision"] == "" and "no torchvision release installs with torch 2.15.0" \
        in venv.notes["torchvision"]


def test_a_torch_that_does_not_install_is_one_line_naming_the_step(tmp_path):
    with pytest.raises(VenvError) as failed:
        installer(tmp_path, FakePip(fail=("torch==2.5.0",))).ensure("2.5.0")
    assert str(failed.value) == ("torch 2.5.0: installing torch==2.5.0 failed: ERROR: No matching distribution found "
                                 "for it")
