"""emulate.launcher: how rank processes are started (the lifecycle faults are in test_launcher_lifecycle.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepcast.emulate.launcher import ADDR_NO_RANDOMIZE, EmulationUnavailable, RankProcess, StallWatch, \
    check_torch_build, process_group_cpu, torch_cuda_version, torch_version, wait

REPO = Path(__file__).resolve().parents[2]


def child_personality(setup: str) -> int:
    """The personality flags of a program executed by a Python process after ``setup`` ran in it."""
    code = (f"{setup}\nimport subprocess\n"
            "print(subprocess.run(['cat', '/proc/self/personality'], capture_output=True, text=True).stdout)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return int(done.stdout.strip(), 16)


@pytest.mark.skipif(not Path("/proc/self/personality").exists(), reason="needs Linux /proc")
def test_programs_started_after_fixed_layout_run_without_address_randomisation():
    assert child_personality("from emulate.launcher import fixed_layout; fixed_layout()") & ADDR_NO_RANDOMIZE
    assert not child_personality("pass") & ADDR_NO_RANDOMIZE


def test_a_fixed_layout_is_the_default_and_the_variable_turns_it_off():
    read = "import emulate.config as c; print(c.FIXED_LAYOUT)"
    on = subprocess.run([sys.executable, "-c", read], cwd=REPO, capture_output=True, text=True, check=True)
    off = subprocess.run([sys.executable, "-c", read], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "STEPCAST_FIXED_LAYOUT": "0"})
    assert (on.stdout.strip(), off.stdout.strip()) == ("True", "False")


@pytest.mark.parametrize(("cuda", "torch"), [("12.4", "2.6.0+cu124"), ("12.8", "2.9.1+cu128"),
                                             ("13.0", "2.14.1+cu130"), ("13.2", "2.15.0+cu132")])
def test_cuda_12_and_13_builds_of_torch_2_6_on_are_accepted(cuda, torch):
    assert check_torch_build(cuda, torch=torch, probe=False) == cuda


@pytest.mark.parametrize(("cuda", "torch", "why"), [
    (None, "2.14.1+cpu", "torch 2.14.1+cpu is a CPU-only build"),
    ("11.8", "2.6.0+cu118", "torch 2.6.0+cu118 is built for CUDA 11.8, the emulator supports CUDA 12 or 13"),
    ("12.4", "2.5.1+cu124", "torch 2.5.1+cu124 is older than the emulator supports (torch 2.6 or later)"),
    ("14.0", "3.0.0", "built for CUDA 14.0")])
def test_other_builds_are_refused_in_one_line_saying_what_to_install(cuda, torch, why):
    with pytest.raises(EmulationUnavailable) as refused:
        check_torch_build(cuda, torch=torch, probe=False)
    message = str(refused.value)
    assert why in message and "\n" not in message and "pip install 'torch>=2.6'" in message


def test_the_installed_torch_is_read_without_importing_it():
    import torch

    assert (torch_version(), torch_cuda_version()) == (torch.__version__, torch.version.cuda)


def test_each_target_gets_its_own_inductor_cache_unless_the_caller_named_one(tmp_path, monkeypatch):
    """Inductor keeps its autotuned choices on disk; made on one target's predicted times, they must not serve a
    run for another."""
    from stepcast.emulate.launcher import rank_environment
    from stepcast.profiling.hardware import lookup

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path))
    driver = tmp_path / "driver" / "libcuda.so.1"
    h100 = rank_environment(driver, lookup("h100-sxm"), 1, {})
    h200 = rank_environment(driver, lookup("h200"), 1, {})
    assert h100["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor" / "h100-sxm")
    assert h200["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor" / "h200")
    mine = rank_environment(driver, lookup("h200"), 1, {"TORCHINDUCTOR_CACHE_DIR": "/my/cache"})
    assert "TORCHINDUCTOR_CACHE_DIR" not in mine   # the caller's, inherited as it is


def _started(code: str) -> RankProcess:
    """A process leading its own process group, as the launcher starts a rank."""
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    return RankProcess(0, Path("unused.log"), proc)


def test_a_process_group_blocked_for_good_is_stalled_and_one_at_work_is_not():
    blocked, busy = _started("import time; time.sleep(60)"), _started("while True: pass")
    try:
        quiet, working = StallWatch(1.0, 0.01, every_s=0.5), StallWatch(1.0, 0.01, every_s=0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not quiet.stalled([blocked]):
            assert not working.stalled([busy])
            time.sleep(0.1)
        assert quiet.stalled([blocked], now=time.monotonic() + 0.5)
        assert not working.stalled([busy], now=time.monotonic() + 0.5)
    finally:
        for rp in (blocked, busy):
            rp.proc.kill()
            rp.proc.wait()


def test_the_cpu_of_a_ranks_children_counts_as_its_own():
    parent = _started("import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])")
    try:
        time.sleep(1.0)
        assert sum(process_group_cpu({parent.proc.pid}).values()) > 0.3
    finally:
        os.killpg(parent.proc.pid, signal.SIGKILL)
        parent.proc.wait()


def test_wait_stops_the_ranks_left_once_the_run_makes_no_progress_and_marks_them_hung():
    done, blocked = _started("pass"), _started("import time; time.sleep(120)")
    done.rank, blocked.rank = 1, 0
    started = time.monotonic()
    codes = wait([blocked, done], stall_limit_s=1.0)
    assert time.monotonic() - started < 30
    assert codes == {0: -signal.SIGTERM, 1: 0}
    assert blocked.hung and blocked.stopped and not done.hung
