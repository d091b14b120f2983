"""emulate.replay on the traces of a sparse run (``stepcast run --run-ranks``): the copies described beside them
(``copies.json``) are replayed as the run simulated them, so the replay reports what every rank's own trace
reports."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepcast.emulate.replay import replay
from stepcast.emulate.trace import write_trace
from test_sim_copies import COPIES, WORLD, tp_dp_trace


def write_capture(folder: Path, ranks: list[int], copies: dict | None) -> list[Path]:
    """A capture folder as ``stepcast run --trace-dir`` leaves it: one trace per running rank, copies.json."""
    folder.mkdir()
    paths = []
    for r in ranks:
        doc = tp_dp_trace(r)
        paths.append(write_trace(folder / f"rank{r}.trace.json", rank=r, world_size=doc["world_size"],
                                 hardware=doc["hardware"], events=doc["events"], meta=doc["meta"]))
    if copies is not None:
        (folder / "copies.json").write_text(json.dumps({str(a): c for a, c in copies.items()}))
    return paths


def test_replaying_a_sparse_capture_reports_what_every_rank_running_reports(tmp_path):
    full = replay(write_capture(tmp_path / "full", list(range(WORLD)), None), quiet=True)
    sparse = replay(write_capture(tmp_path / "sparse", [0, 1], COPIES), quiet=True)
    assert sparse["world_size"] == full["world_size"] == WORLD and len(sparse["per_rank"]) == WORLD
    assert sparse["iteration_time_ms"] == full["iteration_time_ms"]
    assert [r["iterations_ms"] for r in sparse["per_rank"]] == [r["iterations_ms"] for r in full["per_rank"]]
    assert sparse["ranks_run"] == "0-1" and sparse["ranks_copied"] == {"0": "2", "1": "3"}
    assert any(w.startswith("sparse run: ranks 0-1 ran") for w in sparse["warnings"])


def test_a_sparse_capture_missing_a_twins_trace_is_one_line(tmp_path):
    paths = write_capture(tmp_path / "sparse", [0, 1], COPIES)
    with pytest.raises(ValueError, match=r"need the traces of rank\(s\) \[1\]"):
        replay(paths[:1], quiet=True)


@pytest.mark.slow
def test_replaying_a_sparse_runs_traces_reports_what_the_run_reported(tmp_path):
    import subprocess
    import sys

    from stepcast.profiling.paths import REPO_ROOT

    report = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate", "run", "--nproc", "4", "--nodes", "2",
                           "--run-ranks", "0",
                           "--report", str(report), "--trace-dir", str(tmp_path / "traces"), "--",
                           str(REPO_ROOT / "examples" / "ddp.py"), "--steps", "3"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = json.loads(report.read_text())
    replayed = replay(sorted((tmp_path / "traces").glob("rank*.trace.json")), quiet=True)
    assert replayed["iteration_time_ms"] == ran["iteration_time_ms"]
    assert replayed["breakdown_ms"] == ran["breakdown_ms"] and replayed["ranks_copied"] == ran["ranks_copied"]
    assert [r["peak_memory_bytes"] for r in replayed["per_rank"]] == [r["peak_memory_bytes"] for r in ran["per_rank"]]
