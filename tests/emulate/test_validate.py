"""Real runs are timed like the emulator's reports, and ``emulate validate`` compares the emulator with them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stepcast.emulate.measure_real import FORMAT, FORMAT_VERSION, measure, steady_iterations_ms
from stepcast.emulate.validate import ValidationError, load_real
from stepcast.profiling.paths import REPO_ROOT

CPU_TRAINING = """
import time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.03)
"""


def test_iterations_run_from_the_start_to_each_optimizer_step_and_the_first_is_warm_up():
    every, steady = steady_iterations_ms([0.0, 1.0, 1.5, 2.5])
    assert every == [1000.0, 500.0, 1000.0] and steady == [500.0, 1000.0]
    assert steady_iterations_ms([0.0, 0.2])[1] == [200.0]  # a single iteration is its own steady state


def test_a_real_run_is_timed_at_its_optimizer_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CPU_TRAINING)
    run = measure(script, [])
    assert run["optimizer_steps"] == 4 and len(run["iterations_ms"]) == 4
    assert run["iteration_time_ms"] >= 30.0  # each steady iteration sleeps 30 ms after its step
    assert run["format"] == FORMAT and run["script"] == str(script.resolve()) and run["args"] == []


def test_a_script_that_exits_with_sys_exit_zero_is_a_finished_run(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CPU_TRAINING + "raise SystemExit(0)\n")
    assert measure(script, [])["optimizer_steps"] == 4
    script.write_text(CPU_TRAINING + "raise SystemExit(3)\n")
    with pytest.raises(SystemExit):
        measure(script, [])


def stored_run(path: Path, **fields) -> Path:
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "hardware": "h100-sxm", "script": "examples/gpt.py",
           "args": ["--steps", "3"], "iteration_time_ms": 5.0, "iterations_ms": [900.0, 5.0, 5.0],
           "peak_memory_bytes": 80 * 2**20} | fields
    path.write_text(json.dumps(doc))
    return path


def test_validate_emulates_the_stored_runs_script_and_scores_it(tmp_path):
    real = stored_run(tmp_path / "real.json")
    report = tmp_path / "validate.json"
    done = subprocess.run([sys.executable, "-m", "stepcast.emulate", "validate", "--real", str(real), "--report",
                           str(report)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(report.read_text())
    assert result["hardware"] == "h100-sxm" and result["args"] == ["--steps", "3"]
    time_row = result["measures"]["iteration_time_ms"]
    assert time_row["real"] == 5.0 and time_row["emulated"] > 0
    assert time_row["error_pct"] == pytest.approx((time_row["emulated"] - 5.0) / 5.0 * 100)
    assert len(result["iterations_ms"]["emulated"]) == 3  # three optimizer steps, three iterations, as measured


@pytest.mark.parametrize("fields, message", [
    ({"format": "other"}, "field 'format'"), ({"version": 9}, "field 'version'"),
    ({"args": "--steps 3"}, "field 'args'"), ({"iteration_time_ms": None}, "field 'iteration_time_ms'")])
def test_a_bad_stored_run_is_named_with_its_field(tmp_path, fields, message):
    path = stored_run(tmp_path / "bad.json", **fields)
    with pytest.raises(ValidationError, match=message) as err:
        load_real(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where there is no GPU")
def test_validate_without_a_gpu_asks_for_a_stored_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "stepcast.emulate", "validate", "--", "examples/gpt.py"],
                          cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--real FILE" in done.stderr and len(done.stderr.strip().splitlines()) == 1

