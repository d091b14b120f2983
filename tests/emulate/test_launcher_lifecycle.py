"""``stepcast run`` owns its ranks: SIGTERM, Ctrl-C or a failed rank stops every rank, keeps what each
captured, removes the run's shared memory and writes a partial report, with one line and a documented exit code;
each run captures into a folder of its own; the script sees what torchrun would give it and nothing of the project;
collectives the ranks disagree on end the run with one line."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from stepcast.emulate.collate import complete_iterations, repair_log
from stepcast.emulate.launcher import EXIT_RANK_FAILED
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.run_dirs import CaptureDir, prune_runs, runs_root
from stepcast.emulate.trace import read_trace
from stepcast.profiling.paths import REPO_ROOT

DDP = REPO_ROOT / "examples" / "ddp.py"


def emulate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "stepcast.emulate", "run", *args]


def processes_logging_into(folder: Path) -> list[int]:
    """Live processes whose capture log (STEPCAST_LOG) lies in ``folder``: the run's ranks."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            env = (entry / "environ").read_bytes().split(b"\0")
            if any(v.startswith(f"STEPCAST_LOG={folder}/".encode()) for v in env):
                found.append(int(entry.name))
    return found


def rank_script(body: str) -> str:
    """A rank's script: joins the NCCL process group on its own device as torchrun's workers do, then ``body``."""
    return textwrap.dedent("""
        import os, torch, torch.distributed as dist
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        """) + textwrap.dedent(body)


def shared_memory_of(launcher_pid: int) -> list[str]:
    return [p.name for p in Path("/dev/shm").glob(f"stepcast-{launcher_pid}-*")]


class Output:
    """Collects a process's stdout lines on a thread, so a test can wait for a line without blocking."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True)
        self._thread.start()

    def wait_for(self, prefix: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.lines):
                return True
            time.sleep(0.1)
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_rank_keeps_their_traces_and_writes_a_partial_report(tmp_path, sig):
    traces, report = tmp_path / "traces", tmp_path / "report.json"
    proc = subprocess.Popen(emulate_cmd("--nproc", "2", "--no-dedup", "--report", str(report), "--trace-dir",
                                        str(traces), "--", str(DDP), "--steps", "100000"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = Output(proc.stdout)
        assert out.wait_for("step 3:", timeout=120), "the run never reached step 3"
        assert len(processes_logging_into(traces)) == 2
        proc.send_signal(sig)
        started = time.monotonic()
        code = proc.wait(timeout=30)
        seconds = time.monotonic() - started
        stderr = proc.stderr.read()
    finally:
        for pid in processes_logging_into(traces):  # what the old launcher left behind
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert code == 128 + sig and seconds < 10, (code, seconds, stderr[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stepcast: stopped by {sig.name}"), stderr[-2000:]
    assert processes_logging_into(traces) == [] and shared_memory_of(proc.pid) == []
    doc = json.loads(report.read_text())
    assert doc["partial"] is True and doc["capture_dir"] == str(traces) and doc["iterations_simulated"] >= 4
    for rank in doc["ranks"]:
        assert rank["status"] == {"exit": "signal", "signal": "SIGTERM"}  # the launcher stopped it
        assert rank["iterations"] >= 4                                    # its trace up to the signal
    assert doc["iteration_time_ms"] > 0


@pytest.mark.slow
def test_a_failed_rank_stops_the_others_and_exits_3_with_a_partial_report(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(rank_script("""
        model = torch.nn.Linear(64, 64).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = 0
        while True:                       # rank 0 would run until stopped
            model(torch.randn(8, 64, device="cuda")).sum().backward()
            dist.all_reduce(model.weight.grad)
            opt.step()
            step += 1
            if step == 3 and dist.get_rank() == 1:
                raise RuntimeError("rank 1 gives up")
        """))
    traces, report = tmp_path / "traces", tmp_path / "report.json"
    started = time.monotonic()
    proc = subprocess.run(emulate_cmd("--nproc", "2", "--no-dedup", "--report", str(report), "--trace-dir",
                                      str(traces), "--", str(script)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_RANK_FAILED, proc.stderr[-2000:]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("stepcast:")]
    assert len(ours) == 1 and "failed on rank(s) [1]" in ours[0] and "others were stopped" in ours[0]
    assert processes_logging_into(traces) == [] and time.monotonic() - started < 60
    doc = json.loads(report.read_text())
    assert doc["partial"] is True and doc["exit_codes"][0] == 128 + signal.SIGTERM and doc["exit_codes"][1] == 1
    assert doc["ranks"][1]["status"]["message"] == "rank 1 gives up"
    assert doc["iterations_simulated"] >= 2 and doc["iteration_time_ms"] > 0


@pytest.mark.slow
def test_a_rank_killed_outright_still_gives_a_partial_report_of_what_was_captured(tmp_path):
    traces, report = tmp_path / "traces", tmp_path / "report.json"
    proc = subprocess.Popen(emulate_cmd("--nproc", "2", "--no-dedup", "--report", str(report), "--trace-dir",
                                        str(traces), "--", str(DDP), "--steps", "100000"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert Output(proc.stdout).wait_for("step 40:", timeout=120), "the run never reached step 40"
        rank1 = next(pid for pid in processes_logging_into(traces)
                     if f"STEPCAST_LOG={traces}/rank1.log".encode() in Path(f"/proc/{pid}/environ").read_bytes())
        os.kill(rank1, signal.SIGKILL)  # no end record: the records its log had written, the op table of its last mark
        code = proc.wait(timeout=30)
        stderr = proc.stderr.read()
    finally:
        for pid in processes_logging_into(traces):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert code == EXIT_RANK_FAILED, stderr[-2000:]
    ours = [line for line in stderr.splitlines() if line.startswith("stepcast:")]
    assert len(ours) == 1 and "failed on rank(s) [1] (exit -9)" in ours[0], stderr[-2000:]
    doc = json.loads(report.read_text())
    assert doc["partial"] is True and doc["exit_codes"] == [128 + signal.SIGTERM, -signal.SIGKILL]
    # the op table saved at its last iteration mark: the rank's kernels keep their ops, the partial report is timed
    assert doc["ranks"][1]["status"]["exit"] == "running" and doc["ranks"][1]["events"] > 0
    assert list(doc["incomplete_ranks"]) == ["1"]
    assert doc["incomplete_ranks"]["1"].startswith("the log has no end record: the process was killed")
    assert doc["iterations_simulated"] >= 30 and doc["iteration_time_ms"] > 0
    assert processes_logging_into(traces) == [] and shared_memory_of(proc.pid) == []


@pytest.mark.slow
def test_two_runs_in_one_folder_each_capture_into_their_own(tmp_path):
    def script(name: str, n: int, m: int) -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(f"""
            import torch
            a = torch.randn({m}, 16, device="cuda")
            b = torch.randn(16, 8, device="cuda")
            for _ in range({n}):
                (a @ b).sum().item()
            """))
        return path

    runs = {"a": (3, 32), "b": (5, 64)}
    procs = {name: subprocess.Popen(emulate_cmd("--capture-only", "--report", f"{name}.json", "--",
                                                str(script(name, n, m))),
                                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (n, m) in runs.items()}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    dirs = set()
    for name, (n, m) in runs.items():
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        folder = Path(doc["capture_dir"])
        assert folder.parent == runs_root() and Path(doc["traces"][0]).parent == folder
        dirs.add(folder)
        gemms = [e["spec"] for e in read_trace(doc["traces"][0])["events"]
                 if e["kind"] == "kernel" and (e.get("spec") or {}).get("family") == "gemm"]
        assert [(g["m"], g["n"], g["k"]) for g in gemms] == [(m, 8, 16)] * n  # its own script's, as alone
    assert len(dirs) == 2 and not (tmp_path / "stepcast-capture").exists()


def test_a_capture_folder_in_use_is_refused_in_one_line(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print('never runs')\n")
    with CaptureDir(tmp_path / "busy"):
        proc = subprocess.run(emulate_cmd("--trace-dir", str(tmp_path / "busy"), "--", str(script)), cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "in use by another run" in lines[0]
    assert "never runs" not in proc.stdout


def test_pruning_keeps_the_newest_run_folders_and_any_in_use(tmp_path):
    folders = []
    for i in range(5):
        folders.append(tmp_path / f"2026010{i}-000000-1")
        folders[-1].mkdir()
    with CaptureDir(folders[0]):  # the oldest, but a live run holds it
        removed = prune_runs(tmp_path, keep=2)
    assert sorted(removed) == folders[1:3]
    assert sorted(p for p in tmp_path.iterdir()) == [folders[0], *folders[3:]]


def test_more_ranks_than_a_node_has_gpus_names_nodes(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print('never runs')\n")
    proc = subprocess.run(emulate_cmd("--nproc", "16", "--", str(script)), cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--nodes 2 --nproc 8" in lines[0], proc.stderr[-2000:]


@pytest.mark.slow
def test_one_rank_sees_torchruns_variables_and_nothing_of_the_project(tmp_path):
    script = tmp_path / "env.py"
    script.write_text(textwrap.dedent("""
        import importlib.util, json, os, sys, torch
        torch.empty(1 << 20, device="cuda")          # the allocator reads its configuration here
        names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
        spec = importlib.util.find_spec("datasets")
        print("ENV", json.dumps({"env": {n: os.environ.get(n) for n in names}, "path": sys.path,
                                 "datasets": spec.origin if spec else None}))
        """))
    env = {**os.environ, "PYTORCH_ALLOC_CONF": "expandable_segments:True",
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:64"}
    proc = subprocess.run(emulate_cmd("--capture-only", "--nproc", "1", "--trace-dir", str(tmp_path / "t"), "--",
                                      str(script)), cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("ENV "))[4:])
    assert {k: seen["env"][k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")} == \
        {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"}
    assert seen["env"]["MASTER_ADDR"] == "127.0.0.1" and int(seen["env"]["MASTER_PORT"]) > 0
    # both allocator-setting names reach the script as given: the driver serves expandable segments' virtual-memory API
    assert seen["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True,max_split_size_mb:64"
    assert seen["env"]["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
    # the repository's datasets/ folder would shadow HuggingFace datasets (installed or not: the frameworks extra
    # brings it); the script's own folder comes first
    assert seen["datasets"] is None or not seen["datasets"].startswith(str(REPO_ROOT))
    assert str(REPO_ROOT) not in seen["path"] and seen["path"][0] == str(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["missing", "deadlock"])
def test_collectives_the_ranks_disagree_on_end_the_run_with_one_line(tmp_path, fault):
    script = tmp_path / "disagree.py"
    script.write_text(rank_script(f"""
        a, b = dist.new_group([0, 1]), dist.new_group([0, 1])
        big = torch.empty(4 << 20, device="cuda")    # 16 MiB: not exchanged for real, so no rank waits in capture
        rank = dist.get_rank()
        for step in range(3):
            big.add_(1.0)
            if {fault!r} == "missing":
                if not (rank == 1 and step == 1):    # rank 1 skips one all-reduce
                    dist.all_reduce(big, group=a)
            else:                                    # opposite orders: a real program would hang
                for g in ((a, b) if rank == 0 else (b, a)):
                    dist.all_reduce(big, group=g)
            torch.cuda.synchronize()
        dist.destroy_process_group()
        """))
    proc = subprocess.run(emulate_cmd("--nproc", "2", "--no-dedup", "--trace-dir", str(tmp_path / "t"), "--",
                                      str(script)), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("stepcast:")]
    assert proc.returncode == 2 and len(ours) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    if fault == "missing":
        assert "only rank(s) [0] of its 2 members" in ours[0] and "rank(s) [1] never made it" in ours[0]
    else:
        assert "rank 0 is stuck" in ours[0] and "rank 1 is stuck" in ours[0]


@pytest.mark.slow
def test_a_rank_blocked_for_good_after_the_others_ended_is_stopped_as_hung_with_one_line(tmp_path):
    script = tmp_path / "blocks.py"
    script.write_text(rank_script("""
        import threading
        model = torch.nn.Linear(64, 64).cuda()
        for _ in range(3):
            model(torch.randn(8, 64, device="cuda")).sum().backward()
            dist.all_reduce(model.weight.grad)
        if dist.get_rank() == 0:
            threading.Event().wait()          # a lock never released: no CPU, no end
        """))
    traces, report = tmp_path / "traces", tmp_path / "report.json"
    started = time.monotonic()
    proc = subprocess.run(emulate_cmd("--nproc", "2", "--no-dedup", "--report", str(report), "--trace-dir",
                                      str(traces), "--", str(script)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=170,
                          env={**os.environ, "STEPCAST_STALL_LIMIT_S": "4"})
    assert proc.returncode == EXIT_RANK_FAILED, proc.stderr[-2000:]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("stepcast:")]
    assert len(ours) == 1 and "rank(s) [0] stopped as hung" in ours[0], proc.stderr[-2000:]
    assert processes_logging_into(traces) == [] and time.monotonic() - started < 150
    doc = json.loads(report.read_text())
    assert doc["partial"] is True and "stopped as hung" in doc["partial_reason"] and doc["exit_codes"][1] == 0


@pytest.mark.slow
def test_the_rendezvous_store_outlives_a_rank_0_that_finishes_first(tmp_path):
    # rank 0's collectives are not exchanged for real, so it can finish while rank 1 still reads the store (a slow
    # CI machine did so inside new_group): the launcher hosts the store, as torchrun's agent does
    script = tmp_path / "early.py"
    script.write_text(rank_script("""
        import time
        store = dist.distributed_c10d._get_default_store()
        if dist.get_rank() == 0:
            store.set("rank0_pid", str(os.getpid()))
        else:
            status = f"/proc/{int(store.get('rank0_pid'))}/status"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:   # until rank 0 has exited (gone, or a zombie not yet reaped)
                try:
                    if "State:\\tZ" in open(status).read():
                        break
                except OSError:
                    break
                time.sleep(0.05)
            print("READ", store.get("rank0_pid").decode(), flush=True)
        """))
    proc = subprocess.run(emulate_cmd("--nproc", "2", "--no-dedup", "--capture-only", "--trace-dir",
                                      str(tmp_path / "t"), "--", str(script)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and "READ " in proc.stdout, proc.stderr[-3000:]


def test_a_log_cut_mid_record_keeps_its_whole_records(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_bytes(b"H\t1\nK\t10\t0\t0\t-1\t0\t1\t1,1,1\t1,1,1\t0\nK\t20\t0\t0")  # SIGKILL mid-write
    assert repair_log(log) and log.read_bytes().endswith(b"\t0\n") and log.read_bytes().count(b"\n") == 2
    assert not repair_log(log)


def test_a_stopped_run_is_simulated_over_the_iterations_every_rank_completed():
    docs = []
    for rank, iterations in enumerate((5, 3)):      # rank 1 was stopped during its fourth iteration
        b = TraceBuilder(rank=rank, world_size=2)
        for step in range(iterations):
            b.iteration(step)
            b.kernel(stream=1, duration_us=5.0)
            b.collective(stream=1, comm_seq=step, duration_us=10.0)
        docs.append(b.doc())
    cut, done = complete_iterations(docs)
    assert done == 2
    assert [sum(e["kind"] == "collective" for e in d["events"]) for d in cut] == [2, 2]
    assert all(d["events"][-1]["kind"] == "iteration" for d in cut)
    assert complete_iterations(docs[:1] + [TraceBuilder(rank=1, world_size=2).doc()])[1] == 0
