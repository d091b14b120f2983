"""Processes a rank starts never touch its capture: exec'd children (compiler workers, `subprocess.run`) do not
open (truncate) the rank's log, and forked children neither write nor flush the parent's buffered records."""
from __future__ import annotations

import textwrap

import pytest

from emulate.shimlog import rank_events, read_rank_log

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
def test_subprocesses_and_forks_leave_the_ranks_log_whole(emulate_run, tmp_path):
    script = tmp_path / "spawns_and_forks.py"
    script.write_text(SPAWNS_AND_FORKS)
    proc, _, _ = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log_path = tmp_path / "traces" / "rank0.log"
    assert log_path.read_text().count("H\t") == 1
    events = rank_events(read_rank_log(log_path), comm_sizes={}, ranks_per_node=1)
    ops = [e["op"].split(".")[1] for e in events if e["kind"] == "kernel"]
    assert ops.count("add_") == 1 and ops.count("sub_") == 1
    assert "mul_" not in ops  # the forked child's launch is not the rank's
    assert len(events) == len({(e["kind"], e["t_ns"], e["thread"]) for e in events})  # nothing written twice
