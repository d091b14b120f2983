"""``stepcast run`` on the emulated driver, where torch's real cuBLAS, cuDNN and kernels run: the GPT
example's trace holds the kernels a real GPU of the target model runs (cuBLASLt's nvjet kernels on H100, ampere ones
on A100), the faster GPU is predicted faster, and several ranks run DDP with rank dedup."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stepcast.emulate.trace import read_trace
from stepcast.profiling.paths import REPO_ROOT

pytestmark = pytest.mark.slow

GPT_ARGS = ("--layers", "4", "--d-model", "1024", "--heads", "16", "--seq", "512", "--batch", "8", "--steps", "3")
#: how the GEMM kernels cuBLASLt picks are named on each target
GEMM_PREFIXES = {"h100-sxm": ("nvjet_sm90",), "a100-sxm-80gb": ("ampere_", "cutlass", "sm80_")}


def command(tmp: Path, hardware: str, script: Path, *args: str,
            capture_only: bool = False) -> tuple[list[str], Path]:
    report = tmp / f"{hardware}.json"
    return [sys.executable, "-m", "stepcast.emulate", "run", "--hardware", hardware, "--report",
            str(report), "--trace-dir", str(tmp / hardware),
            *(["--capture-only"] if capture_only else []), "--", str(script), *args], report


def emulate(tmp: Path, hardware: str, script: Path, *args: str,
            capture_only: bool = False) -> tuple[subprocess.CompletedProcess, dict | None]:
    cmd, report = command(tmp, hardware, script, *args, capture_only=capture_only)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    return proc, json.loads(report.read_text()) if report.is_file() else None


@pytest.fixture(scope="module")
def gpt_reports(tmp_path_factory) -> dict[str, dict]:
    """The GPT example on each target, captured side by side (each capture is mostly one busy thread; host gaps
    are thread CPU time, which the other capture does not inflate)."""
    tmp = tmp_path_factory.mktemp("gpt")
    runs = {hw: command(tmp, hw, REPO_ROOT / "examples" / "gpt.py", *GPT_ARGS) for hw in sorted(GEMM_PREFIXES)}
    procs = {hw: subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for hw, (cmd, _) in runs.items()}
    reports = {}
    for hw, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        report = runs[hw][1]
        assert proc.returncode == 0 and report.is_file(), err[-3000:]
        reports[hw] = json.loads(report.read_text())
    return reports


def test_the_faster_gpu_is_predicted_faster_with_the_same_memory(gpt_reports):
    h100, a100 = gpt_reports["h100-sxm"], gpt_reports["a100-sxm-80gb"]
    assert h100["emulation"]["backend"] == "driver"
    assert h100["breakdown_ms"]["compute"] < 0.8 * a100["breakdown_ms"]["compute"]
    # torch's own allocator statistics: the same script asks for about the same memory on either GPU (cuBLAS's
    # workspace and cuDNN's choices differ)
    assert abs(h100["peak_memory_bytes"] / a100["peak_memory_bytes"] - 1) < 0.15


@pytest.fixture(scope="module", params=sorted(GEMM_PREFIXES))
def gpt_runs(request, gpt_reports) -> tuple[str, dict]:
    return request.param, gpt_reports[request.param]


def test_the_trace_holds_the_targets_real_gemm_kernels(gpt_runs):
    hardware, driver = gpt_runs
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
    proc, doc = emulate(tmp_path, "h100-sxm", script, capture_only=True)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "OutOfMemoryError" in proc.stderr
    rank = doc["ranks"][0]
    assert rank["failed_mallocs"] >= 1 and rank["status"]["type"] == "torch.OutOfMemoryError"
    assert rank["device_malloc_peak_bytes"] >= 2**32


def test_two_ranks_run_ddp_on_the_emulated_nccl_and_the_duplicate_is_rebuilt(tmp_path):
    """The emulated NCCL, preloaded above the driver, stands in for the real libnccl: DDP's collectives are recorded
    and pair up across ranks, and its small exchanges (the bucket indices rank 0 broadcasts after the first
    iteration, which the other ranks read back) carry real bytes, without which rank 1 crashed. Rank 1 asks for the
    same device work as rank 0, so it stops as a duplicate and its trace is rebuilt from rank 0's."""
    script = REPO_ROOT / "examples" / "ddp.py"
    cmd = [sys.executable, "-m", "stepcast.emulate", "run", "--nproc", "2", "--hardware", "h100-sxm",
           "--report", str(tmp_path / "ddp.json"), "--trace-dir", str(tmp_path / "traces"), "--", str(script),
           "--steps", "4"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "ddp.json").read_text())
    assert doc["world_size"] == 2 and doc["emulation"]["backend"] == "driver"
    assert doc["deduplicated_ranks"] == {"1": 0} and doc["processes_run_to_completion"] == 1
    assert doc["breakdown_ms"]["communication"] > 0
    traces = [read_trace(path) for path in doc["traces"]]
    calls = [[(e["comm"], e["comm_seq"], e["op"], e["bytes"]) for e in t["events"] if e["kind"] == "collective"]
             for t in traces]
    assert calls[0] and calls[0] == calls[1]
    assert {op for _, _, op, _ in calls[0]} >= {"broadcast", "all_reduce"}
    assert all(e["ranks"] == 2 for t in traces for e in t["events"] if e["kind"] == "collective")


def test_host_gaps_end_where_the_script_entered_the_real_runtime(tmp_path):
    """On the emulated driver torch's real libcudart runs, and the simulator adds the calibrated cost of each runtime
    call to the gap before it: the gap must therefore end at the runtime's entry (marked by the preloaded
    emulate/driver/csrc/runtime_marks.c), not at the driver's, or the runtime's own time is counted twice. Launches that
    bypass libcudart (cuBLASLt's statically linked runtime) keep the driver-entry gap."""
    script = tmp_path / "mm.py"
    script.write_text("import torch\nx = torch.randn(64, 64, device='cuda')\n"
                      "for _ in range(3):\n    y = (x @ x).relu()\ntorch.cuda.synchronize()\n")
    proc, _ = emulate(tmp_path, "h100-sxm", script, capture_only=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for log in (tmp_path / "h100-sxm").glob("rank0.log.driver.*.jsonl")
               for line in log.read_text().splitlines()]
    launches = [r for r in records if r.get("event") == "launch"]
    torch_kernels = [r for r in launches if "elementwise" in r["name"] or "normal" in r["name"]]
    cublas_kernels = [r for r in launches if "gemm" in r["name"]]  # fp32: sm80_xmma_gemm on H100
    assert torch_kernels and all(r["rt"] == 1 for r in torch_kernels)
    assert cublas_kernels and all(r["rt"] == 0 for r in cublas_kernels)
    assert all(r["rt"] == 1 for r in records if r.get("event") == "device_sync")
