"""The compatibility benchmark's row logic, without emulating anything: missing frameworks, failures, reports."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.emulate import compat

ROW = compat.Row("demo", "examples/compat/hf_llama.py", ("--steps", "5"), nproc=2,
                 requires=("transformers",))


def must_not_run(*args, **kwargs):
    raise AssertionError("a row with a missing framework must not run")


def test_missing_framework_is_not_installed_without_running():
    result = compat.run_row(ROW, is_installed=lambda m: False, runner=must_not_run)
    assert result["status"] == compat.NOT_INSTALLED
    assert result["why"] == "needs transformers"
    assert result["iteration_time_ms"] is None


def test_missing_parent_package_counts_as_not_installed():
    assert not compat.installed("no_such_package_stepcast.core")


def test_failed_run_reason_is_its_exception_line():
    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
              "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\nstepcast: rank 0 exited 1\n")

    def runner(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=stderr)

    result = compat.run_row(ROW, is_installed=lambda m: True, runner=runner)
    assert result["status"] == compat.FAILED
    assert result["why"] == "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"


def test_report_fields_are_read_into_the_row():
    seen = {}

    def runner(cmd, cwd, **kwargs):
        seen["cmd"], seen["cwd"] = cmd, cwd
        report = Path(cmd[cmd.index("--report") + 1])
        report.write_text(json.dumps({"iteration_time_ms": 6.5, "peak_memory_bytes": 2 ** 30,
                                      "fallback_kernels": 80, "fallback_kernels_steady": 12}))
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    result = compat.run_row(ROW, hardware="a100-sxm", is_installed=lambda m: True, runner=runner)
    assert (result["status"], result["iteration_time_ms"], result["peak_memory_bytes"], result["fallback_kernels"],
            result["fallback_kernels_steady"]) == (compat.RAN, 6.5, 2 ** 30, 80, 12)
    assert result["ranks"] == 2
    cmd = seen["cmd"]
    assert cmd[cmd.index("--nproc") + 1] == "2" and "--backend" not in cmd
    assert cmd[cmd.index("--hardware") + 1] == "a100-sxm"
    assert not Path(cmd[cmd.index("--report") + 1]).is_relative_to(compat.REPO_ROOT)  # reports go to a temp folder


def test_unknown_row_name_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown row.*nope"):
        compat.select_rows("ddp,nope")
    assert [r.name for r in compat.select_rows("ddp, fsdp2")] == ["ddp", "fsdp2"]


def test_every_row_script_exists():
    for row in compat.ROWS.values():
        assert (compat.REPO_ROOT / row.script).is_file(), row.script


def test_the_frameworks_extra_installs_every_rows_modules():
    import re

    import tomllib

    extra = tomllib.loads((compat.REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-")
             for spec in extra["frameworks"]}
    # a row's module -> the distribution that provides it (dotted modules: their distribution's name)
    needed = {m.split(".")[0] + ("-core" if "." in m else "") for row in compat.ROWS.values() for m in row.requires}
    assert needed <= names, f"frameworks extra lacks {sorted(needed - names)}"


def test_table_shows_the_steady_no_model_count_beside_the_whole_captures(capsys):
    row = compat.result_from_report(ROW, {"iteration_time_ms": 6.5, "peak_memory_bytes": 2 ** 30,
                                          "fallback_kernels": 2654, "fallback_kernels_steady": 725}, 30.0)
    compat.print_table([row, compat.failed(ROW, "boom", 1.0)], "h100-sxm")
    out = capsys.readouterr().out
    assert "no-model steady" in out and "2654" in out and "725" in out
