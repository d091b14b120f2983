"""``stepcast search`` with real emulations of a tiny one-rank script: an out-of-memory trial is recorded
as infeasible (torch's own OutOfMemoryError on the virtual GPU), the best configuration and the trials reach
MLflow, and running the same search again emulates nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

TINY = '''
import argparse
import torch

p = argparse.ArgumentParser()
p.add_argument("--reserve-gib", type=float, required=True)
p.add_argument("--dim", type=int, default=256)
args = p.parse_args()
held = torch.empty(int(args.reserve_gib * 2**30), dtype=torch.uint8, device="cuda")
w = torch.randn(args.dim, args.dim, device="cuda", requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(3):
    (w @ w).sum().backward()
    opt.step()
    opt.zero_grad()
'''


@pytest.fixture
def search_config(tmp_path: Path) -> Path:
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    doc = {"name": "tiny", "script": str(script), "hardware": "h100-sxm", "gpus": 1,
           "space": {"reserve": [1, 100]}, "fixed": {"dim": 256},
           "args": ["--reserve-gib={reserve}", "--dim={dim}"],
           "baseline": {"reserve": 1}, "search": {"sampler": "grid"}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
def test_search_records_oom_as_infeasible_logs_to_mlflow_and_reruns_nothing(search_config, tmp_path, capsys,
                                                                          monkeypatch):
    from stepcast.emulate.search.cli import main

    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    argv = [str(search_config), "--cache-dir", str(tmp_path / "cache"), "--output", str(tmp_path / "out")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = {r["reserve"]: r for r in json.loads((tmp_path / "out" / "trials.json").read_text())}
    assert rows[1]["status"] == "ok" and rows[1]["iteration_time_ms"] > 0
    assert rows[100]["status"] == "oom" and "rank0" in rows[100]["reason"]
    assert "best" in out and "reserve=1" in out
    assert (tmp_path / "out" / "trials.png").stat().st_size > 0

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    runs = mlflow.search_runs(experiment_names=["stepcast-search"])
    assert len(runs) == 1
    assert runs.iloc[0]["params.best.reserve"] == "1" and runs.iloc[0]["metrics.infeasible"] == 1
    assert runs.iloc[0]["metrics.speedup_vs_baseline"] == pytest.approx(1.0)

    assert main(argv + ["--no-mlflow"]) == 0
    again = capsys.readouterr().out
    assert again.count("(cached)") == 2  # both trials from the cache: nothing emulated
