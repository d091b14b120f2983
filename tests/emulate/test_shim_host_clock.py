"""Host gaps are the calling thread's CPU time by default (STEPCAST_HOST_CLOCK=cpu), so time the script spends
asleep or blocked, and whatever else runs on the machine, is not host work; STEPCAST_HOST_CLOCK=wall keeps the
wall-clock gaps for comparison. The log's H line names the clock."""
from __future__ import annotations

import textwrap

import pytest

from emulate.shimlog import ShimLogError, rank_events, read_rank_log

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


def _gap_before_second_launch(emulate_run, tmp_path, monkeypatch, clock: str, pause: str) -> tuple[float, str]:
    monkeypatch.setenv("STEPCAST_HOST_CLOCK", clock)
    tmp_path.mkdir()
    script = tmp_path / "two_launches.py"
    script.write_text(BETWEEN_TWO_LAUNCHES)
    proc, _, _ = emulate_run(tmp_path, script, pause)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = read_rank_log(tmp_path / "traces" / "rank0.log")
    events = rank_events(log, comm_sizes={}, ranks_per_node=1)
    (mul,) = [e for e in events if e["kind"] == "kernel" and e["op"].startswith("aten.mul_")]
    return mul["gap_ns"] / 1e9, log.host_clock


@pytest.mark.slow
def test_sleeping_is_not_host_time_on_the_cpu_clock_but_is_on_the_wall_clock(emulate_run, tmp_path, monkeypatch):
    cpu_gap, cpu_clock = _gap_before_second_launch(emulate_run, tmp_path / "cpu", monkeypatch, "cpu", "sleep")
    wall_gap, wall_clock = _gap_before_second_launch(emulate_run, tmp_path / "wall", monkeypatch, "wall", "sleep")
    assert cpu_gap < 0.05
    assert wall_gap >= 0.2
    assert (cpu_clock, wall_clock) == ("cpu", "wall")


@pytest.mark.slow
def test_computing_is_host_time_on_both_clocks(emulate_run, tmp_path, monkeypatch):
    cpu_gap, _ = _gap_before_second_launch(emulate_run, tmp_path / "cpu", monkeypatch, "cpu", "busy")
    wall_gap, _ = _gap_before_second_launch(emulate_run, tmp_path / "wall", monkeypatch, "wall", "busy")
    assert 0.2 <= cpu_gap < 0.3  # the loop's own CPU time, whatever else the machine runs
    assert wall_gap >= 0.2


def test_a_log_without_a_clock_is_wall_and_an_unknown_clock_is_refused(tmp_path):
    old = tmp_path / "old.log"
    old.write_text("H\t1\n")
    assert read_rank_log(old).host_clock == "wall"
    cpu = tmp_path / "cpu.log"
    cpu.write_text("H\t1\tcpu\n")
    assert read_rank_log(cpu).host_clock == "cpu"
    bad = tmp_path / "bad.log"
    bad.write_text("H\t1\tsundial\n")
    with pytest.raises(ShimLogError, match="bad.log:1: host clock"):
        read_rank_log(bad)
