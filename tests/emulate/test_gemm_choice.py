"""gemm_choice asks a given libcublasLt (another cuBLAS version than torch's wheel) as well as the wheel's own; the
answer carries that library's version. The older-cuBLAS tests need its library fetched
(``python -m stepcast.estimator.kernel_labels --fetch-cublas 12.1.3.1``) and skip otherwise."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stepcast.emulate.driver.gemm_choice import choose, torch_linear_gemm
from stepcast.estimator.kernel_labels import CublasMissingError, cublaslt_library
from stepcast.profiling.paths import REPO_ROOT

OLD_CUBLAS = "12.1.3.1"  # what Vidur ran (estimator.kernel_labels.SOURCE_CUBLAS)


def old_library() -> Path:
    try:
        return cublaslt_library(OLD_CUBLAS)
    except CublasMissingError as exc:
        pytest.skip(str(exc))


def test_a_library_that_is_not_there_fails_before_any_child_starts(tmp_path):
    with pytest.raises(FileNotFoundError, match="libcublasLt.so.99"):
        choose([torch_linear_gemm(64, 64, 64, "bf16")], "h100-sxm", library=tmp_path / "libcublasLt.so.99")


def test_the_command_line_refuses_a_missing_library_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate.driver.gemm_choice", "--m", "64", "--n", "64",
                           "--k", "64",
                           "--cublaslt", str(tmp_path / "nothing.so")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--cublaslt" in proc.stderr


@pytest.mark.slow
def test_an_older_cublaslt_answers_with_its_own_version_and_kernels():
    gemms = [torch_linear_gemm(520, 4096, 11008, "fp16")]
    old = choose(gemms, "a100-sxm-80gb", library=old_library())[0]
    new = choose(gemms, "a100-sxm-80gb")[0]
    assert old.cublaslt_version // 100 == 1201 and new.cublaslt_version >= 130000
    assert old.kernel and old.main_launch.grid


@pytest.mark.slow
def test_cublas_12_1_runs_on_the_emulated_hopper():
    choice = choose([torch_linear_gemm(520, 4096, 11008, "fp16")], "h100-sxm", library=old_library())[0]
    assert choice.kernel.startswith("sm90_xmma")
