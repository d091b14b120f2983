"""Acceptance: on the emulated driver, the kernel torch.matmul launches through the real cuBLAS equals the top
choice of cuBLASLt's heuristic for the same problem on the same virtual device (h100-sxm, a100-sxm-80gb, l4)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from stepcast.emulate.driver.gemm_choice import Gemm, choose, torch_mm_gemm
from stepcast.emulate.driver.real_gpu import PRODUCTS
from stepcast.emulate.driver.torch_gemm import TorchRun, run_products
from stepcast.profiling.hardware import lookup

HARDWARE = ("h100-sxm", "a100-sxm-80gb", "l4")
# PRODUCTS, torch's (m, k) @ (k, n): large square, misaligned m (150, 141: C's leading dimension not 16-byte
# aligned), skinny n, a single row, split-K shapes, and the three dtypes


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[TorchRun, list]]:
    out = {}
    for hw in HARDWARE:
        torch_run = run_products(PRODUCTS, hw)
        choices = choose([torch_mm_gemm(p.m, p.n, p.k, p.dtype) for p in PRODUCTS], hw)
        out[hw] = (torch_run, choices)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("hardware", HARDWARE)
def test_torch_matmul_launches_the_heuristic_top_choice(runs, hardware):
    torch_run, choices = runs[hardware]
    for product, launched, choice in zip(PRODUCTS, torch_run.launches, choices, strict=True):
        assert launched, f"{hardware} {product}: torch.matmul launched nothing"
        got = [(x.name, x.grid, x.block, x.cluster) for x in launched]
        want = [(x.name, x.grid, x.block, x.cluster) for x in choice.launches]
        assert got == want, f"{hardware} {product}"
        assert choice.cublaslt_version >= 130000
        assert choice.query_launches == 0  # the heuristic query itself launches (times) nothing


@pytest.mark.slow
@pytest.mark.parametrize("hardware", HARDWARE)
def test_torch_sees_the_catalog_device(runs, hardware):
    torch_run, _ = runs[hardware]
    spec = lookup(hardware)
    assert torch_run.capability == tuple(spec.compute_capability)
    assert torch_run.sm_count == spec.sm_count
    assert torch_run.total_memory == spec.memory_bytes
    assert torch_run.device_name in spec.aliases


@pytest.mark.slow
def test_the_choice_follows_the_device(runs):
    """Hopper gets its own nvjet kernels with clusters; Ampere and Ada get sm80-class kernels, no clusters."""
    first = {hw: runs[hw][1][0].launches[0] for hw in HARDWARE}
    assert first["h100-sxm"].name.startswith("nvjet_sm90") and first["h100-sxm"].cluster != (1, 1, 1)
    for hw in ("a100-sxm-80gb", "l4"):
        assert "sm90" not in first[hw].name and first[hw].cluster == (1, 1, 1)
    assert first["a100-sxm-80gb"].name != first["l4"].name


def test_torch_layout_is_the_transposed_problem():
    assert torch_mm_gemm(150, 8192, 28672, "bf16") == Gemm(m=8192, n=150, k=28672, dtype="bf16", transa="N",
                                                            transb="N")
    with pytest.raises(ValueError, match="positive"):
        Gemm(0, 1, 1)


def test_gemm_choice_cli_rejects_bad_input_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate.driver.gemm_choice", "--m", "0", "--n", "8", "--k",
                           "8"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("stepcast: gemm m, n, k must be positive")


@pytest.mark.parametrize(("hardware", "family"), [("t4", "magma_sgemmEx"), ("b200", "nvjet_sm100")])
def test_gemm_choice_covers_older_and_newer_catalog_gpus(hardware, family):
    """sm_75 (no reserved shared memory per block: occupancy must not divide by zero) and sm_100."""
    (choice,) = choose([Gemm(4096, 4096, 4096)], hardware)
    assert family in choice.kernel


def test_gemm_choice_reports_a_device_the_library_does_not_support():
    with pytest.raises(RuntimeError, match="cublasLtCreate returned"):  # CUDA 13 dropped sm_70
        choose([Gemm(64, 64, 64)], "v100-sxm2-32gb")


def test_gemm_choice_cli_labels_a_batch_file_one_json_line_per_row(tmp_path):
    import json

    batch = tmp_path / "shapes.csv"
    batch.write_text("m,n,k,dtype,layout\n4096,4096,4096,bf16,TN\n141,512,512,fp16,NN\n")
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate.driver.gemm_choice", "--hardware", "a100-sxm-80gb",
                           "--batch", str(batch)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["gemm"]["m"], r["gemm"]["dtype"], r["gemm"]["transa"]) for r in rows] == [(4096, "bf16", "T"),
                                                                                        (141, "fp16", "N")]
    assert all(r["kernel"] and r["cublaslt_version"] >= 130000 and r["launches"] for r in rows)
    batch.write_text("m,n\n1,2\n")
    bad = subprocess.run([sys.executable, "-m", "stepcast.emulate.driver.gemm_choice", "--batch", str(batch)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith(f"stepcast: {batch} line 2:")
