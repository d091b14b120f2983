"""Bad input to ``stepcast predict`` ends in one line naming the file (and the column), exit 2, and leaves
every file as it was."""
from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from stepcast.estimator.predict import main
from stepcast.profiling.paths import REPO_ROOT

KERNELS = "family,hardware,dtype,m,n,k,batch\ngemm,h100-sxm,bf16,4096,4096,4096,1\n"


def one_line_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stepcast: "), lines
    return lines[0]


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_output_equal_to_input_is_refused(tmp_path, capsys, spelling):
    kernels = tmp_path / "kernels.csv"
    kernels.write_text(KERNELS)
    output = {"same": kernels, "dotted": tmp_path / "." / "sub" / ".." / "kernels.csv",
              "link": tmp_path / "link.csv"}[spelling]
    if spelling == "link":
        output.symlink_to(kernels)
    (tmp_path / "sub").mkdir()
    assert main(["--input", str(kernels), "--output", str(output), "--model", "roofline"]) == 2
    assert "--output is the --input file" in one_line_error(capsys)
    assert kernels.read_text() == KERNELS


@pytest.mark.parametrize("content, expected", [
    (b"", "empty"),
    (bytes(range(256)) * 4, "a binary file (NUL byte at offset 0)"),
    (b"family,hardware\n\xff\xfe\xfa,x\n", "not UTF-8 text (invalid start byte)"),
], ids=["empty", "binary", "latin"])
def test_empty_or_binary_csv_names_the_file(tmp_path, capsys, content, expected):
    bad = tmp_path / "kernels.csv"
    bad.write_bytes(content)
    assert main(["--input", str(bad), "--output", str(tmp_path / "out.csv"), "--model", "roofline"]) == 2
    line = one_line_error(capsys)
    assert f"{bad}: {expected}" in line
    assert not (tmp_path / "out.csv").exists()


def test_garbage_parquet_names_the_file(tmp_path, capsys):
    bad = tmp_path / "kernels.parquet"
    bad.write_bytes(b"PAR1" + bytes(range(256)))
    assert main(["--input", str(bad), "--output", str(tmp_path / "out.csv"), "--model", "roofline"]) == 2
    assert f"{bad}: not a readable parquet file" in one_line_error(capsys)


@pytest.mark.parametrize("values", [
    pd.to_datetime(["2021-01-01", "2021-01-02"]),
    pd.to_timedelta([1, 2], unit="s"),
    [True, False],
], ids=["datetime", "timedelta", "bool"])
def test_non_numeric_parquet_column_is_named(tmp_path, capsys, values):
    src = tmp_path / "kernels.parquet"
    pd.DataFrame({"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": values, "n": 64, "k": 64,
                  "batch": 1}).to_parquet(src)
    assert main(["--input", str(src), "--output", str(tmp_path / "out.csv"), "--model", "roofline"]) == 2
    assert f"{src}: row 1: column 'm': expected numbers, got a column of dtype" in one_line_error(capsys)


def test_cli_reports_in_one_line_with_exit_2(tmp_path):
    empty = tmp_path / "kernels.csv"
    empty.write_text("")
    proc = subprocess.run([sys.executable, "-m", "stepcast.estimator.predict", "--input", str(empty), "--output",
                           str(tmp_path / "o.csv")], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"stepcast: {empty}: empty (expected a header line, then one row "
                                                "per kernel)"]
