"""The capture's host gaps and processes (emulate/driver/csrc/capture.c, launch.c): a gap is the calling thread's
CPU time, so time the script spends asleep or blocked, and whatever else runs on the machine, is not host work; and
processes a rank starts (exec'd compiler workers, forks) log to files of their own, never into the rank's."""
from __future__ import annotations

import textwrap

import pytest

# two launches with 0.2 s between them, asleep or computing on this thread
BETWEEN_TWO_LAUNCHES = textwrap.dedent("""
    import sys, time
    import torch

    x = torch.zeros(1024, device="cuda")
    x.add_(1)
    if sys.argv[1] == "sleep":
        time.sleep(0.2)
    else:
        start = time.thread_time()
        while time.thread_time() - start < 0.2:
            pass
    x.mul_(3)
""")


def _gap_before_second_launch(emulate_run, tmp_path, pause: str) -> float:
    script = tmp_path / "two_launches.py"
    script.write_text(BETWEEN_TWO_LAUNCHES)
    proc, _, traces = emulate_run(tmp_path, script, pause)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (mul,) = [e for e in traces[0]["events"] if e["kind"] == "kernel" and (e.get("op") or "").startswith("aten.mul_")]
    return mul["gap_ns"] / 1e9


@pytest.mark.slow
def test_sleeping_is_not_host_time(emulate_run, tmp_path):
    assert _gap_before_second_launch(emulate_run, tmp_path, "sleep") < 0.05


@pytest.mark.slow
def test_computing_is_host_time(emulate_run, tmp_path):
    assert 0.2 <= _gap_before_second_launch(emulate_run, tmp_path, "busy") < 0.3


SPAWNS_AND_FORKS = textwrap.dedent("""
    import os, subprocess, sys
    import torch

    x = torch.zeros(1024, device="cuda")
    x.add_(1)
    subprocess.run(["true"], check=True)
    subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1').cuInit(0)"], check=True)
    pid = os.fork()
    if pid == 0:
        x.mul_(3)    # the child's own launch
        sys.exit(0)  # a normal exit: every open stdio stream is flushed
    os.waitpid(pid, 0)
    x.sub_(1)
""")


@pytest.mark.slow
def test_subprocesses_and_forks_log_apart_from_the_rank(emulate_run, tmp_path):
    script = tmp_path / "spawns_and_forks.py"
    script.write_text(SPAWNS_AND_FORKS)
    proc, _, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = traces[0]["events"]
    ops = [e["op"].split(".")[1] for e in events if e["kind"] == "kernel" and e.get("op")]
    assert ops.count("add_") == 1 and ops.count("sub_") == 1
    assert "mul_" not in ops  # the forked child's launch is not the rank's
    assert len(events) == len({(e["kind"], e["t_ns"], e["thread"], e["seq"]) for e in events})
    assert len(list((tmp_path / "traces").glob("rank0.log.driver.*.jsonl"))) >= 2  # the fork logged to its own
