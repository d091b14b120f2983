"""``stepcast search --ray-address auto`` against a real local Ray cluster (``ray start --head``): the trials
of a tiny one-rank script run as Ray Tune trials on the cluster's workers, an out-of-memory one is infeasible, and a
second search is answered from the cache the workers wrote. Skipped when Ray is not installed."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from stepcast.profiling.paths import REPO_ROOT

pytest.importorskip("ray")

TINY = '''
import argparse
import torch

p = argparse.ArgumentParser()
p.add_argument("--reserve-gib", type=float, required=True)
args = p.parse_args()
held = torch.empty(int(args.reserve_gib * 2**30), dtype=torch.uint8, device="cuda")
w = torch.randn(256, 256, device="cuda", requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(3):
    (w @ w).sum().backward()
    opt.step()
    opt.zero_grad()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster():
    """A one-node cluster of its own (port, temp folder; token authentication off, so nothing is written to the
    home folder), started by ``ray start --head --block`` and stopped by signalling that process, which stops the
    cluster's processes it started. Yields the environment a client needs to find it as ``auto``."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")   # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    ray = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        for line in head.stdout:
            if "Ray runtime started" in line:
                break
            if time.monotonic() > deadline:
                pytest.fail("ray start --head did not start within 120 s")
        else:
            pytest.fail(f"ray start --head exited ({head.wait()})")
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()


@pytest.mark.slow
def test_search_runs_its_trials_on_a_local_ray_cluster_and_reruns_nothing(tmp_path, ray_cluster):
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tiny", "script": str(script), "hardware": "h100-sxm", "gpus": 1, "space": {"reserve": [1, 100]},
        "args": ["--reserve-gib={reserve}"], "search": {"sampler": "grid"}}))
    command = [sys.executable, "-m", "stepcast.emulate.search", str(config), "--ray-address", "auto", "--no-mlflow",
               "--cache-dir", str(tmp_path / "cache"), "--output", str(tmp_path / "out")]
    first = subprocess.run(command, env=ray_cluster, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "reserve=100: oom" in first.stdout and "reserve=1:" in first.stdout
    assert "evaluations (emulated / cache hits)" in first.stdout and "2 (2 / 0)" in first.stdout
    trials = yaml.safe_load((tmp_path / "out" / "trials.json").read_text())
    assert sorted((t["reserve"], t["status"]) for t in trials) == [(1, "ok"), (100, "oom")]
    again = subprocess.run(command, env=ray_cluster, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 (0 / 2)" in again.stdout


def test_an_unreachable_ray_cluster_is_one_line(tmp_path, capsys):
    from stepcast.emulate.search.cli import main

    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({"name": "tiny", "script": str(script), "gpus": 1,
                                      "space": {"reserve": [1]}, "args": ["--reserve-gib={reserve}"]}))
    code = main([str(config), "--ray-address", f"127.0.0.1:{free_port()}", "--no-mlflow",
                 "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert err.startswith("stepcast: --ray-address 127.0.0.1:") and "cannot connect" in err
