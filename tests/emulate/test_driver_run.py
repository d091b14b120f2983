"""``python -m emulate run --backend driver``: the GPT example on the emulated driver, where torch's real cuBLAS,
cuDNN and kernels run, predicts close to the shim backend (the estimators time ops, not kernel names) and its trace
holds the kernels a real GPU of the target model runs (cuBLASLt's nvjet kernels on H100, ampere ones on A100)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulate.trace import read_trace
from profiling.paths import REPO_ROOT

pytestmark = pytest.mark.slow

GPT_ARGS = ("--layers", "4", "--d-model", "1024", "--heads", "16", "--seq", "512", "--batch", "8", "--steps", "3")
#: how the GEMM kernels cuBLASLt picks are named on each target
GEMM_PREFIXES = {"h100-sxm": ("nvjet_sm90",), "a100-sxm-80gb": ("ampere_", "cutlass", "sm80_")}


def command(tmp: Path, backend: str, hardware: str, script: Path, *args: str,
            capture_only: bool = False) -> tuple[list[str], Path]:
    report = tmp / f"{backend}-{hardware}.json"
    return [sys.executable, "-m", "emulate", "run", "--backend", backend, "--hardware", hardware, "--report",
            str(report), "--trace-dir", str(tmp / f"{backend}-{hardware}"),
            *(["--capture-only"] if capture_only else []), "--", str(script), *args], report


def emulate(tmp: Path, backend: str, hardware: str, script: Path, *args: str,
            capture_only: bool = False) -> tuple[subprocess.CompletedProcess, dict | None]:
    cmd, report = command(tmp, backend, hardware, script, *args, capture_only=capture_only)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    return proc, json.loads(report.read_text()) if report.is_file() else None


@pytest.fixture(scope="module", params=sorted(GEMM_PREFIXES))
def gpt_runs(request, tmp_path_factory) -> tuple[str, dict, dict]:
    """The GPT example on both backends, captured side by side (each capture is mostly one busy thread; host gaps
    are thread CPU time, which the other capture does not inflate)."""
    hardware = request.param
    tmp = tmp_path_factory.mktemp(hardware)
    runs = {backend: command(tmp, backend, hardware, REPO_ROOT / "examples" / "gpt.py", *GPT_ARGS)
            for backend in ("driver", "shim")}
    procs = {backend: subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for backend, (cmd, _) in runs.items()}
    reports = {}
    for backend, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        report = runs[backend][1]
        assert proc.returncode == 0 and report.is_file(), err[-3000:]
        reports[backend] = json.loads(report.read_text())
    print(f"{hardware}: iteration driver {reports['driver']['iteration_time_ms']:.3f} ms, shim "
          f"{reports['shim']['iteration_time_ms']:.3f} ms; peak driver {reports['driver']['peak_memory_bytes']}, shim "
          f"{reports['shim']['peak_memory_bytes']}")
    return hardware, reports["driver"], reports["shim"]


def test_driver_backend_predicts_close_to_the_shim(gpt_runs):
    _, driver, shim = gpt_runs
    assert driver["emulation"]["backend"] == "driver" and shim["emulation"]["backend"] == "shim"
    ratio = driver["iteration_time_ms"] / shim["iteration_time_ms"]
    assert 1 / 1.5 < ratio < 1.5, (driver["iteration_time_ms"], shim["iteration_time_ms"])
    assert abs(driver["peak_memory_bytes"] / shim["peak_memory_bytes"] - 1) < 0.10
    # torch's own allocator statistics: the same script asks for the same memory on either backend
    assert driver["ranks"][0]["max_memory_reserved"] == shim["ranks"][0]["max_memory_reserved"]


def test_driver_trace_holds_the_targets_real_gemm_kernels(gpt_runs):
    hardware, driver, _ = gpt_runs
    doc = read_trace(driver["trace"])
    assert doc["meta"]["backend"] == "driver" and doc["meta"]["op_context"] == "record_function"
    kernels = [e for e in doc["events"] if e["kind"] == "kernel"]
    gemms = [e for e in kernels if (e["spec"] or {}).get("family") == "gemm"]
    assert gemms and all(e["lib"] is None and e["grid"] for e in gemms)
    assert all(e["name"].startswith(GEMM_PREFIXES[hardware]) for e in gemms), {e["name"] for e in gemms}
    assert all(e["op"] in ("aten.mm.default", "aten.addmm.default", "aten.bmm.default") for e in gemms)
    # every kernel launched inside an op knows it, with the shapes the estimators read
    assert all(e["op_shapes"] is not None for e in kernels if e["op"])
    assert sum(e["op"] is not None for e in kernels) > 0.9 * len(kernels)
    # host gaps are the thread's CPU time; iterations are cut at the optimizer's steps
    iterations = [e for e in doc["events"] if e["kind"] == "iteration"]
    assert [e["step"] for e in iterations] == [0, 1, 2, 3] and iterations[1]["source"] == "optimizer"
    assert doc["meta"]["host_clock"] == "cpu" and sum(e["gap_ns"] for e in doc["events"]) > 0
    kinds = {e["kind"] for e in doc["events"]}
    assert {"malloc", "memcpy", "stream_sync"} <= kinds


def test_allocation_beyond_the_device_raises_torchs_out_of_memory(tmp_path):
    script = tmp_path / "oom.py"
    script.write_text("import torch\n"
                      "x = torch.empty(2**30, device='cuda')\n"  # 4 GiB: fits
                      "y = torch.empty(100 * 2**30, dtype=torch.uint8, device='cuda')\n")  # 100 GiB: an H100 has 80
    proc, doc = emulate(tmp_path, "driver", "h100-sxm", script, capture_only=True)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "OutOfMemoryError" in proc.stderr
    rank = doc["ranks"][0]
    assert rank["failed_mallocs"] >= 1 and rank["status"]["type"] == "torch.OutOfMemoryError"
    assert rank["device_malloc_peak_bytes"] >= 2**32


def test_two_ranks_on_the_driver_run_ddp_with_the_shims_nccl(tmp_path):
    """The shim's NCCL, preloaded above the driver, stands in for the real libnccl: DDP's collectives are recorded
    and pair up across ranks, and its small exchanges (the bucket indices rank 0 broadcasts after the first
    iteration, which the other ranks read back) carry real bytes, without which rank 1 crashed."""
    script = REPO_ROOT / "examples" / "ddp.py"
    cmd = [sys.executable, "-m", "emulate", "run", "--backend", "driver", "--nproc", "2", "--hardware", "h100-sxm",
           "--report", str(tmp_path / "ddp.json"), "--trace-dir", str(tmp_path / "traces"), "--", str(script),
           "--steps", "4"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "ddp.json").read_text())
    assert doc["world_size"] == 2 and doc["emulation"]["backend"] == "driver"
    assert doc["breakdown_ms"]["communication"] > 0
    traces = [read_trace(path) for path in doc["traces"]]
    calls = [[(e["comm"], e["comm_seq"], e["op"], e["bytes"]) for e in t["events"] if e["kind"] == "collective"]
             for t in traces]
    assert calls[0] and calls[0] == calls[1]
    assert {op for _, _, op, _ in calls[0]} >= {"broadcast", "all_reduce"}
    assert all(e["ranks"] == 2 for t in traces for e in t["events"] if e["kind"] == "collective")


def test_host_gaps_end_where_the_script_entered_the_real_runtime(tmp_path):
    """On the driver backend torch's real libcudart runs, and the simulator adds the calibrated cost of each runtime
    call to the gap before it: the gap must therefore end at the runtime's entry (marked by the preloaded
    emulate/csrc/runtime_marks.c), not at the driver's, or the runtime's own time is counted twice. Launches that
    bypass libcudart (cuBLASLt's statically linked runtime) keep the driver-entry gap."""
    script = tmp_path / "mm.py"
    script.write_text("import torch\nx = torch.randn(64, 64, device='cuda')\n"
                      "for _ in range(3):\n    y = (x @ x).relu()\ntorch.cuda.synchronize()\n")
    proc, _ = emulate(tmp_path, "driver", "h100-sxm", script, capture_only=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for log in (tmp_path / "driver-h100-sxm").glob("rank0.log.driver.*.jsonl")
               for line in log.read_text().splitlines()]
    launches = [r for r in records if r.get("event") == "launch"]
    torch_kernels = [r for r in launches if "elementwise" in r["name"] or "normal" in r["name"]]
    cublas_kernels = [r for r in launches if "gemm" in r["name"]]  # fp32: sm80_xmma_gemm on H100
    assert torch_kernels and all(r["rt"] == 1 for r in torch_kernels)
    assert cublas_kernels and all(r["rt"] == 0 for r in cublas_kernels)
    assert all(r["rt"] == 1 for r in records if r.get("event") == "device_sync")
