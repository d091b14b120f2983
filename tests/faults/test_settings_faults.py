"""Bad settings are refused before any work: a flag, a ``STEPCAST_*`` variable, a target that is not a GPU, an output
that cannot be written or a malformed search file ends the command in one line naming the setting, exit 2, within
the second it takes to start Python: nothing is built (the cache stays empty), the script never runs, and no
report, trace or run folder is left behind."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT
from stepcast.preflight import unwritable

STEPCAST = ("-m", "stepcast")
EMULATE = ("-m", "stepcast.emulate")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """A training script that leaves a mark if it is ever run."""
    path = tmp_path / "train.py"
    path.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """An empty STEPCAST_CACHE_DIR: a build or a run folder would appear in it."""
    path = tmp_path / "cache"
    path.mkdir()
    return path


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder that takes no new file: permission bits for a user, /proc for root (root writes anywhere the bits
    forbid; procfs takes no new file from anyone)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        yield folder if unwritable(folder) is not None else Path("/proc")
    finally:
        folder.chmod(0o755)


def command(cache: Path, *args: str, env: dict[str, str] | None = None, entry: tuple[str, ...] = STEPCAST,
            cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """``stepcast args...`` (or ``python -m stepcast.emulate``) with an empty cache and no STEPCAST_* setting but
    ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("STEPCAST_")}
    full_env = {**base, "STEPCAST_CACHE_DIR": str(cache), "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([sys.executable, *entry, *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=120)


def assert_refused(proc: subprocess.CompletedProcess, message: str, cache: Path, *absent: Path) -> None:
    """Exit 2, the one line ``stepcast: <message>...``, no traceback, an empty cache and nothing at ``absent``."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stepcast: {message}"), proc.stderr[-2000:]
    assert not list(cache.iterdir()), f"work began: {list(cache.iterdir())}"
    for path in absent:
        assert not path.exists(), f"left behind: {path}"


def test_run_refuses_zero_host_speed_before_building(tmp_path, script, cache):
    report = tmp_path / "r.json"
    proc = command(cache, "run", "--host-speed", "0", "--report", str(report), "--", str(script))
    assert_refused(proc, "--host-speed: expected a positive finite number, found '0'", cache, report,
                   tmp_path / "ran")


def test_run_refuses_nan_host_speed_before_building(tmp_path, script, cache):
    proc = command(cache, "run", "--host-speed", "nan", "--", str(script))
    assert_refused(proc, "--host-speed: expected a positive finite number, found 'nan'", cache, tmp_path / "ran")


def test_run_refuses_a_launch_queue_of_zero_before_building(tmp_path, script, cache):
    proc = command(cache, "run", "--launch-queue", "0", "--", str(script))
    assert_refused(proc, "--launch-queue: expected a whole number >= 1, found '0'", cache, tmp_path / "ran")


def test_run_refuses_a_cpu_as_the_target_before_building(tmp_path, script, cache):
    report = tmp_path / "r.json"
    proc = command(cache, "run", "--hardware", "cpu-intel-xeon-2c", "--report", str(report), "--", str(script))
    assert_refused(proc, "--hardware: expected a GPU of the hardware catalog, found cpu-intel-xeon-2c (a cpu)",
                   cache, report, tmp_path / "ran")


def test_run_refuses_a_fractional_rank_count_before_building(tmp_path, script, cache):
    proc = command(cache, "run", "--nproc", "1.5", "--", str(script))
    assert_refused(proc, "--nproc: expected a whole number >= 1, found '1.5'", cache, tmp_path / "ran")


def test_run_refuses_more_ranks_per_node_than_the_node_has(tmp_path, script, cache):
    proc = command(cache, "run", "--hardware", "h100-sxm", "--nproc", "16", "--", str(script))
    assert_refused(proc, "--nproc 16 is more than the 8 GPUs of a h100-sxm node", cache, tmp_path / "ran")


def test_run_refuses_run_ranks_outside_the_job_before_building(tmp_path, script, cache):
    proc = command(cache, "run", "--nproc", "2", "--run-ranks", "0,5", "--", str(script))
    assert_refused(proc, "--run-ranks '0,5': rank 5 is outside the job of 2 ranks", cache, tmp_path / "ran")


def test_run_refuses_a_report_in_a_missing_folder_before_building(tmp_path, script, cache):
    report = tmp_path / "no-such-folder" / "r.json"
    proc = command(cache, "run", "--report", str(report), "--", str(script))
    assert_refused(proc, f"--report: expected a file in an existing folder, found {report}", cache, report.parent,
                   tmp_path / "ran")


def test_run_refuses_a_report_in_a_read_only_folder_before_building(tmp_path, script, cache, read_only_folder):
    report = read_only_folder / "r.json"
    proc = command(cache, "run", "--report", str(report), "--", str(script))
    assert_refused(proc, f"--report: expected a file in a writable folder, found {report}", cache, report,
                   tmp_path / "ran")


def test_run_refuses_a_trace_that_names_a_folder_before_building(tmp_path, script, cache):
    proc = command(cache, "run", "--trace", str(tmp_path), "--", str(script))
    assert_refused(proc, f"--trace: expected a file, found the folder {tmp_path}", cache, tmp_path / "ran")


def test_run_refuses_a_trace_dir_in_a_read_only_folder_before_building(tmp_path, script, cache,
                                                                        read_only_folder):
    traces = read_only_folder / "traces"
    proc = command(cache, "run", "--trace-dir", str(traces), "--", str(script))
    assert_refused(proc, f"--trace-dir: expected a writable folder, found {traces}", cache, traces,
                   tmp_path / "ran")


def test_run_refuses_a_trace_dir_under_a_file_before_building(tmp_path, script, cache):
    traces = script / "traces"
    proc = command(cache, "run", "--trace-dir", str(traces), "--", str(script))
    assert_refused(proc, f"--trace-dir: expected a folder, found {traces} ({script} is a file)", cache,
                   tmp_path / "ran")


def test_run_refuses_an_unwritable_cache_before_building(tmp_path, script, cache, read_only_folder):
    unwritable_cache = read_only_folder / "cache"
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_CACHE_DIR": str(unwritable_cache)})
    assert_refused(proc, f"STEPCAST_CACHE_DIR: expected a writable folder, found {unwritable_cache}", cache,
                   unwritable_cache, tmp_path / "ran")


@pytest.mark.parametrize("entry", [STEPCAST, EMULATE], ids=["stepcast", "python-m-emulate"])
def test_run_refuses_garbage_host_speed_variable_without_a_traceback(tmp_path, script, cache, entry):
    # emulate.config read it at import: a traceback before the command could say anything
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_HOST_SPEED": "fast"}, entry=entry)
    assert_refused(proc, "STEPCAST_HOST_SPEED: expected a positive finite number, found 'fast'", cache,
                   tmp_path / "ran")


def test_run_refuses_garbage_launch_queue_variable_without_a_traceback(tmp_path, script, cache):
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_LAUNCH_QUEUE_DEPTH": "deep"})
    assert_refused(proc, "STEPCAST_LAUNCH_QUEUE_DEPTH: expected a whole number >= 1, found 'deep'", cache,
                   tmp_path / "ran")


def test_run_refuses_an_unknown_host_model_without_a_traceback(tmp_path, script, cache):
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_HOST_MODEL": "guessed"})
    assert_refused(proc, "STEPCAST_HOST_MODEL: expected one of counted, measured, found 'guessed'", cache,
                   tmp_path / "ran")


def test_run_refuses_garbage_real_bytes_before_the_script_runs(tmp_path, script, cache):
    # the emulated driver reads it in each rank (strtoull: garbage would silently read as 0 and keep no bytes)
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_REAL_BYTES": "lots"})
    assert_refused(proc, "STEPCAST_REAL_BYTES: expected a whole number >= 1, found 'lots'", cache, tmp_path / "ran")


def test_run_refuses_an_unknown_event_timing_instead_of_ignoring_it(tmp_path, script, cache):
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_EVENT_TIMING": "nominall"})
    assert_refused(proc, "STEPCAST_EVENT_TIMING: expected one of predicted, nominal, found 'nominall'", cache,
                   tmp_path / "ran")


def test_run_refuses_keeping_no_run_folders(tmp_path, script, cache):
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_KEEP_RUNS": "0"})
    assert_refused(proc, "STEPCAST_KEEP_RUNS: expected a whole number >= 1, found '0'", cache, tmp_path / "ran")


def test_run_refuses_a_missing_hardware_catalog(tmp_path, script, cache):
    proc = command(cache, "run", "--", str(script), env={"STEPCAST_HARDWARE_DIR": str(tmp_path / "nowhere")})
    assert_refused(proc, "STEPCAST_HARDWARE_DIR: expected an existing folder, found", cache, tmp_path / "ran")


def test_replay_refuses_a_report_in_a_read_only_folder_before_reading_traces(tmp_path, cache, read_only_folder):
    report = read_only_folder / "r.json"
    junk = tmp_path / "junk.json"
    junk.write_text("not a trace")  # refused only if it were read
    proc = command(cache, "replay", str(junk), "--report", str(report))
    assert_refused(proc, f"--report: expected a file in a writable folder, found {report}", cache, report)


def test_replay_refuses_garbage_in_a_setting_it_uses(tmp_path, cache):
    proc = command(cache, "replay", str(tmp_path / "absent.json"), env={"STEPCAST_INSTEP": "sometimes"})
    assert_refused(proc, "STEPCAST_INSTEP: expected one of on, off", cache)


def test_validate_refuses_a_report_in_a_missing_folder_before_measuring(tmp_path, script, cache):
    report = tmp_path / "no-such-folder" / "r.json"
    proc = command(cache, "validate", "--report", str(report), "--", str(script))
    assert_refused(proc, f"--report: expected a file in an existing folder, found {report}", cache, report.parent,
                   tmp_path / "ran")


def test_search_refuses_a_malformed_yaml_naming_file_and_line(tmp_path, cache):
    config = tmp_path / "broken.yaml"
    config.write_text("script: examples/gpt.py\nspace:\n  tp: [1, 2\n")
    proc = command(cache, "search", str(config), "--no-mlflow")
    assert_refused(proc, f"{config}: line 4, column 1: while parsing a flow sequence", cache)


def test_search_refuses_a_cpu_as_the_target_before_any_trial(tmp_path, cache):
    proc = command(cache, "search", "megatron_gpt", "hardware=cpu-intel-xeon-2c", "--no-mlflow")
    assert_refused(proc, "hardware: expected a GPU of the hardware catalog, found cpu-intel-xeon-2c (a cpu)", cache)


@pytest.mark.parametrize("app", ["profile", "train"])
def test_hydra_apps_refuse_a_bad_variable_before_composing(tmp_path, cache, app):
    work = tmp_path / "work"
    work.mkdir()
    proc = command(cache, app, env={"STEPCAST_HOST_MODEL": "Counted"}, cwd=work)
    assert_refused(proc, "STEPCAST_HOST_MODEL: expected one of counted, measured, found 'Counted'", cache)
    assert not list(work.iterdir())


def test_predict_refuses_an_output_in_a_missing_folder_before_loading_a_model(tmp_path, cache):
    kernels = tmp_path / "kernels.csv"
    kernels.write_text("family,hardware,dtype,m,n,k,batch\ngemm,h100-sxm,bf16,64,64,64,1\n")
    output = tmp_path / "no-such-folder" / "p.csv"
    proc = command(cache, "predict", "--input", str(kernels), "--output", str(output))
    assert_refused(proc, f"--output: expected a file in an existing folder, found {output}", cache, output.parent)
