"""The checks a command makes before any work: outputs that can be written pass and leave nothing behind, ones
that cannot are one line each, the target must be a GPU, and a bad variable found twice is said once."""
from __future__ import annotations

from pathlib import Path

from stepcast.preflight import Preflight, unwritable


def test_writable_outputs_pass_and_the_check_leaves_nothing(tmp_path):
    check = Preflight()
    check.output_file("--report", tmp_path / "r.json")
    check.output_file("--trace", None)
    check.output_folder("--trace-dir", tmp_path / "new" / "deeper")
    assert check.problems == [] and check.refuse() is None
    assert list(tmp_path.iterdir()) == []


def test_a_folder_in_the_way_of_a_new_folder_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    check = Preflight()
    check.output_folder("--output", blocker)
    check.output_folder("--cache-dir", blocker / "sub" / "dir")
    assert check.problems == [f"--output: expected a folder, found {blocker}",
                              f"--cache-dir: expected a folder, found {blocker / 'sub' / 'dir'} ({blocker} is a file)"]


def test_unwritable_says_why_and_writable_says_nothing(tmp_path):
    assert unwritable(tmp_path) is None
    assert unwritable(tmp_path / "absent") is not None


def test_the_target_must_be_a_gpu_named_by_id_or_vendor_name():
    check = Preflight()
    assert check.gpu("--hardware", "NVIDIA H100 80GB HBM3").id == "h100-sxm"
    assert check.gpu("--hardware", "cpu-intel-xeon-2c") is None
    assert check.problems == ["--hardware: expected a GPU of the hardware catalog, found cpu-intel-xeon-2c (a cpu)"]


def test_a_bad_variable_found_by_the_environment_and_an_option_is_said_once(monkeypatch, capsys):
    monkeypatch.setenv("STEPCAST_HOST_SPEED", "-2")
    check = Preflight()
    check.environment()
    assert check.option("STEPCAST_HOST_SPEED", "--host-speed", None) is None
    assert check.refuse() == 2
    assert capsys.readouterr().err.splitlines() == [
        "stepcast: STEPCAST_HOST_SPEED: expected a positive finite number, found '-2'"]


def test_an_option_given_overrides_the_variable(monkeypatch):
    monkeypatch.setenv("STEPCAST_LAUNCH_QUEUE_DEPTH", "8")
    check = Preflight()
    assert check.option("STEPCAST_LAUNCH_QUEUE_DEPTH", "--launch-queue", "32") == 32
    assert check.option("STEPCAST_LAUNCH_QUEUE_DEPTH", "--launch-queue", None) == 8
    assert check.problems == []


def test_output_file_in_the_working_folder_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check = Preflight()
    check.output_file("--report", Path("r.json"))
    assert check.problems == []
