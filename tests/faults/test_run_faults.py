"""Faults in a run (issue 36, "No silent wrong answer"): a rank that ends without flushing, ranks that diverge,
peers that have left, every rank waiting, a script that asks the GPU for nothing or reads GPU-computed values,
stops during the build, and replays of captures. Each ends with one line, its documented exit code, nothing left
running, and never a step time reported as complete for an incomplete or divergent capture."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT

pytestmark = pytest.mark.slow

RANKS_SETUP = """
    import os, signal, torch, torch.distributed as dist
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 64, device="cuda")
"""
#: a training loop whose small gradient all-reduces make every member wait for the others (the exchange moves
#: their real bytes); ``{skip}`` is a condition under which a rank skips them (it diverges)
DIVERGING = RANKS_SETUP + """
    for step in range(6):
        model(x).sum().backward()
        if not ({skip}):
            for p in model.parameters():
                dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
"""


def write(tmp: Path, name: str, *parts: str) -> Path:
    """A script of ``parts``, each dedented on its own."""
    path = tmp / name
    path.write_text("".join(textwrap.dedent(part) for part in parts))
    return path


def run(tmp: Path, script: Path, *options: str, env: dict[str, str] | None = None,
        timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict | None, float]:
    """``stepcast run`` as a user types it: (process, report or None, wall seconds)."""
    report = tmp / f"{script.stem}.json"
    cmd = [sys.executable, "-m", "stepcast", "run", "--report", str(report), "--trace-dir",
           str(tmp / f"{script.stem}-traces"), *options, "--", str(script)]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    return proc, json.loads(report.read_text()) if report.is_file() else None, time.monotonic() - started


def our_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("stepcast:")]


def leftovers(tmp: Path) -> list[str]:
    """Processes still running a capture of this test's folder, and shared-memory areas of any run."""
    mine = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(tmp).encode() in (proc / "cmdline").read_bytes():
                    mine.append(proc.name)
            except OSError:
                pass
    return mine


def test_a_script_that_calls_os_exit_gives_the_whole_captures_answer(tmp_path):
    loop = """
        import os, torch
        m = torch.nn.Linear(256, 256).cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        x = torch.randn(64, 256, device="cuda")
        for _ in range(5):
            m(x).sum().backward()
            opt.step()
            opt.zero_grad()
    """
    whole, whole_report, _ = run(tmp_path, write(tmp_path, "whole.py", loop))
    cut, cut_report, _ = run(tmp_path, write(tmp_path, "cut.py", loop, "os._exit(0)\n"))
    assert whole.returncode == cut.returncode == 0, cut.stderr[-2000:]
    # before: the op table was never written, every kernel fell to the launch floor (6x the whole answer), exit 0
    assert cut_report["iteration_time_ms"] == pytest.approx(whole_report["iteration_time_ms"], rel=0.02)
    assert cut_report["ranks"][0]["status"] == {"exit": "os._exit", "code": 0}
    assert cut_report["incomplete_ranks"] == {} and not cut_report["partial"]


def test_a_rank_killed_mid_run_gives_a_partial_report_naming_it(tmp_path):
    script = write(tmp_path, "killed.py", RANKS_SETUP, """
        for step in range(8):
            if rank == 1 and step == 5:
                os.kill(os.getpid(), signal.SIGKILL)
            model(x).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
    """)
    proc, report, wall = run(tmp_path, script, "--nproc", "2", "--no-dedup")
    assert proc.returncode == 3, proc.stderr[-2000:]
    lines = our_lines(proc)
    assert len(lines) == 1 and "failed on rank(s) [1] (exit -9)" in lines[0] and "partial report" in lines[0]
    assert report["partial"] and report["exit_codes"][1] == -signal.SIGKILL
    assert list(report["incomplete_ranks"]) == ["1"] and "killed" in report["incomplete_ranks"]["1"]
    assert report["iterations_simulated"] >= 4  # the op table of its last mark: its kernels keep their ops
    assert leftovers(tmp_path) == []


def test_ranks_that_diverge_within_dedups_comparison_end_as_the_deadlock_they_are(tmp_path):
    # rank 1 skips its all-reduces in step 2, the second iteration dedup compares: the ranks differ, both run on,
    # and rank 0's last all-reduces wait for a rank that has left (before: rank 1 was stopped as a duplicate after
    # step 1 and rebuilt from rank 0, and a step time came out, exit 0)
    script = write(tmp_path, "diverge.py", DIVERGING.format(skip="rank == 1 and step == 2"))
    proc, report, wall = run(tmp_path, script, "--nproc", "2")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = our_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("stepcast: deadlock: rank 0 waits in all_reduce #")
    assert "for rank 1, which has exited" in lines[0] and "not simulated" in lines[0]
    assert report["partial"] and "iteration_time_ms" not in report and report["deduplicated_ranks"] == {}
    assert leftovers(tmp_path) == []


def test_a_divergence_after_dedups_comparison_is_reported_as_what_was_assumed(tmp_path):
    script = write(tmp_path, "late.py", DIVERGING.format(skip="rank == 1 and step == 4"))
    proc, report, _ = run(tmp_path, script, "--nproc", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report["deduplicated_ranks"] == {"1": 0}
    assert any("stopped after iteration 3 as copies of rank(s) 0" in w and "--no-dedup" in w
               for w in report["warnings"])


def test_a_peer_that_has_exited_is_not_waited_for(tmp_path):
    # without dedup: the issue saw 266-272 s of waiting (120 s for every small collective whose peer had left)
    script = write(tmp_path, "exited.py", DIVERGING.format(skip="rank == 1 and step == 3"))
    proc, report, wall = run(tmp_path, script, "--nproc", "2", "--no-dedup")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = our_lines(proc)
    assert len(lines) == 1 and "deadlock: rank 0 waits in all_reduce" in lines[0]
    assert "(2 ranks) for rank 1, which has exited" in lines[0]
    assert wall < 60 and report["exit_codes"] == [4, 0]


def test_every_rank_waiting_on_another_collective_is_a_deadlock(tmp_path):
    script = write(tmp_path, "cross.py", """
        import os, torch, torch.distributed as dist
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        group = dist.new_group([0, 1])
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t)
        dist.all_reduce(t, group=group)
        if dist.get_rank() == 0:
            dist.all_reduce(t, group=group)   # rank 0 waits on the group,
        else:
            dist.all_reduce(t)                # rank 1 on the world: on GPUs, neither returns
        torch.cuda.synchronize()
    """)
    proc, report, wall = run(tmp_path, script, "--nproc", "2", "--no-dedup")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = our_lines(proc)
    assert len(lines) == 1 and "deadlock: every running rank waits: rank 0 in all_reduce #1 of nccl-" in lines[0]
    assert "rank 1 in all_reduce #1 of nccl-" in lines[0] and wall < 60
    assert leftovers(tmp_path) == []


#: rank 1 reaches the second all-reduce 8 s after rank 0 does; ``{on_the_way}`` is what it does meanwhile
LATE = RANKS_SETUP + """
    import time
    dist.all_reduce(x)
    if rank == 1:
        end = time.monotonic() + 8
        while time.monotonic() < end:
            {on_the_way}
    dist.all_reduce(x)
    torch.cuda.synchronize()
"""


def test_a_peer_still_on_its_way_is_waited_for_past_the_limit(tmp_path):
    # rank 1 launches kernels all the way (a rank compiling on a loaded machine does the like): the run is never
    # silent for the 3 s limit, so rank 0 waits 8 s for it (before: 120 s of one wait was a deadlock, whatever the
    # peers were doing, and a 2-core machine compiling 8 ranks took longer than that)
    script = write(tmp_path, "late.py", LATE.format(on_the_way="model(x); time.sleep(0.2)"))
    proc, report, wall = run(tmp_path, script, "--nproc", "2", "--no-dedup", env={"STEPCAST_WAIT_LIMIT_S": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not report.get("partial") and wall > 8
    assert leftovers(tmp_path) == []


def test_a_run_silent_past_the_limit_is_a_deadlock(tmp_path):
    # rank 1 makes no driver call for 8 s (stuck where the driver cannot see, as in a host barrier): after 3 s of a
    # silent run, rank 0's wait ends as the deadlock it would be on GPUs
    script = write(tmp_path, "silent.py", LATE.format(on_the_way="time.sleep(0.2)"))
    proc, report, wall = run(tmp_path, script, "--nproc", "2", "--no-dedup", env={"STEPCAST_WAIT_LIMIT_S": "3"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = our_lines(proc)
    assert len(lines) == 1 and "deadlock: rank 0 waits in all_reduce #1 of nccl-" in lines[0]
    assert "no rank of the run has called the driver for 3 s (STEPCAST_WAIT_LIMIT_S)" in lines[0]
    assert report["partial"] and "iteration_time_ms" not in report
    assert leftovers(tmp_path) == []


#: rank 1 spends 15 s in its first iteration (which dedup does not compare), so it reaches the marks where the ranks
#: compare their next iterations well after rank 0; ``{on_the_way}`` is what it does meanwhile. Each rank prints when
#: it ends each step on the machine's wall clock, which the two processes share (each one's own start differs by the
#: time its setup took)
LATE_AT_DEDUP = RANKS_SETUP + """
    import time
    for step in range(6):
        if rank == 1 and step == 0:
            end = time.monotonic() + 15
            while time.monotonic() < end:
                {on_the_way}
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {{rank}} step {{step}} ends at {{time.time():.3f}}", flush=True)
"""


@pytest.mark.parametrize("on_the_way, waits", [("model(x); time.sleep(0.2)", True), ("time.sleep(0.2)", False)])
def test_dedup_waits_for_a_peer_on_its_way_and_not_for_a_silent_run(tmp_path, on_the_way, waits):
    # with a 3 s limit: rank 0 waits at dedup's marks for a rank 1 that launches kernels on its way there, and goes
    # on after 3 s of a silent run (three waits: two comparisons and the decision) instead of waiting for it (before:
    # 60 s of each wait, whatever the peers did); rank 1, arriving later, still finds rank 0's work and stops as its
    # copy either way
    script = write(tmp_path, "dedup_late.py", LATE_AT_DEDUP.format(on_the_way=on_the_way))
    proc, report, wall = run(tmp_path, script, "--nproc", "2", env={"STEPCAST_WAIT_LIMIT_S": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    ends = {line.split(" ends")[0]: float(line.split()[-1]) for line in proc.stdout.splitlines() if " ends at " in line}
    rank_0_done, rank_1_arrives = ends["rank 0 step 5"], ends["rank 1 step 0"]
    assert rank_0_done >= rank_1_arrives if waits else rank_0_done < rank_1_arrives - 2, proc.stdout[-2000:]
    assert report["deduplicated_ranks"] == {"1": 0} and not report.get("partial")
    assert leftovers(tmp_path) == []


def test_a_script_that_asks_the_gpu_for_nothing_is_warned(tmp_path):
    script = write(tmp_path, "cpu_only.py", """
        import torch
        x = torch.randn(64, 64)
        for _ in range(4):
            x = x @ x
    """)
    proc, report, _ = run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(w.startswith("the script asked the GPU for nothing") for w in report["warnings"])
    assert "asked the GPU for nothing" in proc.stdout + proc.stderr


def test_values_read_back_from_the_gpu_are_named_with_their_ops(tmp_path):
    script = write(tmp_path, "reads.py", """
        import torch
        m = torch.nn.Linear(64, 64).cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(4):
            loss = m(torch.randn(8, 64, device="cuda")).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if loss.item() > 0:             # control flow on a GPU value: it read 0.0
                print("positive")
            print("nonzero", torch.nonzero(m.weight > 0).shape[0])
    """)
    proc, report, _ = run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warning = next(w for w in report["warnings"] if "values computed on the GPU" in w)
    assert "aten._local_scalar_dense.default x4" in warning and "ran as if they were 0" in warning


def test_a_stop_during_the_first_build_leaves_no_compiler_and_no_build(tmp_path):
    cache = tmp_path / "cache"
    script = write(tmp_path, "never.py", "print('never runs')\n")
    proc = subprocess.Popen([sys.executable, "-m", "stepcast", "run", "--", str(script)], cwd=REPO_ROOT,
                            env={**os.environ, "STEPCAST_CACHE_DIR": str(cache)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(cache.glob("driver-*/.build-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert list(cache.glob("driver-*/.build-*")), "no build started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err[:3000]
    assert [line for line in err.splitlines() if line.startswith("stepcast:")] == [
        "stepcast: stopped by SIGTERM while building the emulated driver; nothing was built"]
    assert not list(cache.glob("driver-*/.build-*")) and not list(cache.glob("driver-*/libcuda.so.1"))
    time.sleep(0.5)
    compilers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(cache).encode() in
                 _read(p / "cmdline")]
    assert compilers == [] and "never runs" not in out


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_replaying_a_capture_says_its_durations_are_predicted_and_refuses_measured_ones(tmp_path):
    script = write(tmp_path, "small.py", """
        import torch
        x = torch.randn(256, 256, device="cuda")
        for _ in range(4):
            (x @ x).sum().backward() if x.requires_grad else x.mul_(1.0)
    """)
    proc, report, _ = run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = report["traces"][0]
    replay = subprocess.run([sys.executable, "-m", "stepcast", "replay", trace], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert replay.returncode == 0 and "(predicted durations)" in replay.stdout and "measured" not in replay.stdout
    refused = subprocess.run([sys.executable, "-m", "stepcast", "replay", "--durations", "measured", trace],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"stepcast: {trace}: --durations measured: the trace records no kernel durations (a stepcast capture "
        "measures none): use --durations predicted"]
