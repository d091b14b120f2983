"""stepcast predict: the command-line contract (good file, malformed row, unknown hardware)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from stepcast.estimator.predict import main
from stepcast.profiling.families import FAMILIES

KERNELS = """family,hardware,dtype,m,n,k,batch,op,numel,rows,cols,pass
gemm,h100-sxm,bf16,4096,4096,4096,1,,,,,
gemm,,fp16,128,11008,4096,1,,,,,
elementwise,a100-sxm-80gb,bf16,,,,,gelu,1000000,,,
norm,h100-sxm,bf16,,,,,rms_norm,,8192,4096,fwd
"""


@pytest.fixture
def kernels(tmp_path) -> Path:
    path = tmp_path / "kernels.csv"
    path.write_text(KERNELS)
    return path


def test_good_file_gets_the_input_columns_plus_predictions(kernels, tmp_path):
    out = tmp_path / "predictions.csv"
    assert main(["--input", str(kernels), "--output", str(out), "--hardware", "a100-sxm-80gb",
                 "--model", "roofline"]) == 0
    result = pd.read_csv(out)
    assert list(result.columns) == list(pd.read_csv(kernels).columns) + ["predicted_us", "estimator", "in_range"]
    assert result["hardware"].tolist() == ["h100-sxm", "a100-sxm-80gb", "a100-sxm-80gb", "h100-sxm"]
    assert (result["predicted_us"] > 0).all() and (result["estimator"] == "roofline@1").all()


def test_parquet_in_and_out_with_default_model(kernels, tmp_path):
    src = tmp_path / "kernels.parquet"
    pd.read_csv(kernels).assign(hardware="h100-sxm").to_parquet(src)
    out = tmp_path / "predictions.parquet"
    assert main(["--input", str(src), "--output", str(out)]) == 0
    result = pd.read_parquet(out)
    assert len(result) == 4 and result["predicted_us"].gt(0).all()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepcast.estimator.predict", *args], capture_output=True, text=True)


def test_malformed_row_one_line_error_and_nothing_written(kernels, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(KERNELS.replace("rms_norm,,8192,4096", "rms_norm,,8192,wide"))
    out = tmp_path / "predictions.csv"
    proc = run_cli("--input", str(bad), "--output", str(out), "--hardware", "h100-sxm", "--model", "roofline")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert f"{bad}:5: column 'cols'" in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".predictions*"))


def test_missing_family_column_is_named(kernels, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(KERNELS.replace("gemm,,fp16,128,11008,4096,1", "gemm,,fp16,128,11008,,1"))
    proc = run_cli("--input", str(bad), "--output", str(tmp_path / "o.csv"), "--hardware", "h100-sxm",
                   "--model", "roofline")
    assert proc.returncode == 2 and f"{bad}:3: column 'k'" in proc.stderr


def test_unknown_hardware_names_the_catalog(kernels, tmp_path):
    proc = run_cli("--input", str(kernels), "--output", str(tmp_path / "o.csv"), "--hardware", "z100")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "z100" in proc.stderr and "h100-sxm" in proc.stderr and "a100-sxm-80gb" in proc.stderr
    assert not (tmp_path / "o.csv").exists()


def test_every_family_has_a_valid_example(tmp_path):
    """One row per family with exactly the contract's columns predicts without error."""
    rows = {
        "gemm": dict(m=64, n=64, k=64, batch=1), "attention": dict(batch=1, heads_q=8, heads_kv=8, seq_q=128,
        seq_kv=128, head_dim=64, causal="true", **{"pass": "bwd"}), "elementwise": dict(op="add", numel=1000),
        "norm": dict(op="softmax", rows=10, cols=10, **{"pass": "fwd"}),
        "collective": dict(op="all_gather", bytes=2**20, ranks=8, ranks_per_node=8),
        "optimizer": dict(op="adamw_fused", params=10**6),
    }
    assert set(rows) == set(FAMILIES)
    src = tmp_path / "all.csv"
    pd.DataFrame([dict(family=f, dtype="bf16", **cols) for f, cols in rows.items()]).to_csv(src, index=False)
    assert main(["--input", str(src), "--output", str(tmp_path / "o.csv"), "--hardware", "h100-sxm"]) == 0
    assert len(pd.read_csv(tmp_path / "o.csv")) == len(FAMILIES)
