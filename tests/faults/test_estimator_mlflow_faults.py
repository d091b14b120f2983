"""A tracking store that is down or cannot be written ends ``stepcast train`` with one line naming the
tracking URI, exit 2, within seconds (it used to retry a closed port for minutes, and a SQLite file it could not
open for about 100 s over 185 lines)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from stepcast import estimator
from stepcast.estimator.tracking import HTTP_SETTINGS, TrackingError, connect
from stepcast.profiling.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def restored_http_settings(monkeypatch):
    """connect() sets MLflow's HTTP settings in os.environ; undo that after each test."""
    for name in HTTP_SETTINGS:
        monkeypatch.setenv(name, "0")  # records the original value (or its absence) for the undo
        monkeypatch.delenv(name)


def closed_port() -> int:
    """A local port nothing listens on: bound by us, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rows") / "rows.parquet"
    pd.DataFrame({"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": [64.0, 128.0] * 20, "n": 256.0,
                  "k": 256.0, "batch": 1.0, "runtime_us": 10.0, "source": "test", "group": "g"}).to_parquet(path)
    return path


def train(rows: Path, tmp_path: Path, uri: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "stepcast.estimator.train", "family=gemm", f"data.path={rows}",
         f"mlflow.tracking_uri={uri}",
         "mlflow.plots=false", f"hydra.run.dir={tmp_path / 'hydra'}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=150,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}, "PYTHONWARNINGS": "ignore"})
    return proc, time.monotonic() - started


def assert_one_line(proc: subprocess.CompletedProcess, seconds: float, uri: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("stepcast: ") and uri in lines[0], proc.stderr[-2000:]
    assert seconds < 10, f"took {seconds:.1f} s"
    return lines[0]


def test_unreachable_tracking_server(rows, tmp_path):
    uri = f"http://127.0.0.1:{closed_port()}"
    line = assert_one_line(*train(rows, tmp_path, uri), uri)
    assert "unreachable" in line


@pytest.mark.parametrize("store", ["database is a folder", "folder is a file"])
def test_unwritable_sqlite_store(rows, tmp_path, store):
    if store == "database is a folder":
        database = tmp_path / "mlflow.db"
        database.mkdir()
    else:
        (tmp_path / "plain-file").write_text("")
        database = tmp_path / "plain-file" / "mlflow.db"
    uri = f"sqlite:///{database}"
    line = assert_one_line(*train(rows, tmp_path, uri), uri)
    assert "cannot write" in line


def test_registry_uri_with_a_server_down(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port()}")
    started = time.monotonic()
    with pytest.raises(TrackingError, match=r"^MLflow tracking server http://127\.0\.0\.1:\d+ is unreachable"):
        estimator.load("models:/kernel-runtime-gemm@champion")
    assert time.monotonic() - started < 10


def test_http_retries_are_bounded_unless_the_user_chose(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")
    connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == HTTP_SETTINGS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"


def test_password_is_not_shown(monkeypatch):
    with pytest.raises(TrackingError) as caught:
        connect(f"http://user:s3cret@127.0.0.1:{closed_port()}")
    assert "s3cret" not in str(caught.value) and "user:***@" in str(caught.value)
