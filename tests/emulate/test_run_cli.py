"""``stepcast run`` as a user meets it: the virtual device looks like the catalog's GPU, device reads work,
iterations are cut at profiler steps, out-of-memory is torch's own error, peak memory adds up, and what cannot be
emulated is said in one line."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepcast.emulate.trace import read_trace
from stepcast.profiling.hardware import lookup
from stepcast.profiling.paths import REPO_ROOT




def write_script(tmp: Path, body: str) -> Path:
    path = tmp / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.slow
def test_virtual_device_reads_and_profiler_iterations(tmp_path, emulate_run):
    script = write_script(tmp_path, """
        import torch, torch.nn as nn
        assert torch.cuda.is_available()
        p = torch.cuda.get_device_properties(0)
        print("DEVICE", p.name, p.multi_processor_count, p.major, p.minor, p.total_memory)
        small = torch.tensor([3.0, 4.0], device="cuda")
        print("ROUNDTRIP", small.cpu().tolist())          # copied in, copied out: real bytes
        model = nn.Linear(16, 4).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                loss = model(torch.randn(8, 16, device="cuda")).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                print("LOSS", loss.item())                 # a kernel's output: reads as zero
                prof.step()
        """)
    proc, report, _ = emulate_run(tmp_path, script, hardware="a100-sxm-80gb")
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = lookup("a100-sxm-80gb")
    device = next(line for line in proc.stdout.splitlines() if line.startswith("DEVICE")).split()
    assert device[-4:] == [str(spec.sm_count), *map(str, spec.compute_capability), str(spec.memory_bytes)]
    assert "ROUNDTRIP [3.0, 4.0]" in proc.stdout and proc.stdout.count("LOSS 0.0") == 3
    trace = read_trace(report["traces"][0])
    marks = [e for e in trace["events"] if e["kind"] == "iteration"]
    assert [m["step"] for m in marks] == [0, 1, 2, 3] and {m["source"] for m in marks} == {"profiler"}
    assert trace["hardware"] == "a100-sxm-80gb" and report["hardware"] == "a100-sxm-80gb"


@pytest.mark.slow
def test_grad_scaler_steps_are_not_skipped(tmp_path, emulate_run):
    proc, report, _ = emulate_run(tmp_path, REPO_ROOT / "examples" / "gpt.py", "--amp-dtype=fp16", "--grad-scaler",
                               "--steps=2", "--layers=1", "--d-model=32", "--heads=2", "--seq=16", "--vocab=64")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["ranks"][0]["iterations"] == 3  # found_inf reads 0: both optimizer steps ran


@pytest.mark.slow
def test_a_model_too_large_raises_torchs_out_of_memory(tmp_path, emulate_run):
    # ~1.6B parameters (6.4 GB in fp32) and their gradients fit the 16 GB device; AdamW's state does not
    proc, report, _ = emulate_run(tmp_path, REPO_ROOT / "examples" / "gpt.py", "--layers=8", "--d-model=4096",
                               "--heads=32", "--seq=64", "--batch=1", "--vocab=1024", "--steps=1", hardware="t4")
    assert proc.returncode != 0
    assert "torch.OutOfMemoryError: CUDA out of memory" in proc.stderr
    rank = report["ranks"][0]
    assert rank["status"]["type"] == "torch.OutOfMemoryError" and rank["failed_mallocs"] >= 1
    assert rank["peak_memory_bytes"] <= lookup("t4").memory_bytes


@pytest.mark.slow
def test_peak_memory_is_parameters_gradients_optimizer_state_and_activations(tmp_path, emulate_run):
    layers, width, batch = 8, 4096, 8
    script = write_script(tmp_path, f"""
        import torch, torch.nn as nn
        with torch.device("cuda"):
            model = nn.Sequential(*[nn.Linear({width}, {width}) for _ in range({layers})])
        opt = torch.optim.Adam(model.parameters(), foreach=False)
        for _ in range(3):
            model(torch.randn({batch}, {width}, device="cuda")).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        """)
    proc, report, _ = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    params = layers * (width * width + width)
    state = 16 * params                                  # fp32 weights + gradients + Adam exp_avg + exp_avg_sq
    activations = 4 * layers * batch * width * 4         # saved inputs and outputs, generously
    adam_temporaries = 2 * 4 * width * width             # sqrt(exp_avg_sq) and its scaled copy, largest param
    workspaces = 64 * 2**20                              # cuBLAS + cuBLASLt workspaces (32 MiB each on Hopper)
    rank = report["ranks"][0]
    allocated = rank["max_memory_allocated"]
    assert state <= allocated <= state + activations + adam_temporaries + workspaces
    assert allocated <= report["peak_memory_bytes"] <= allocated + 20 * 2**20  # caching allocator rounding
    # the device also holds what the libraries allocate outside torch's allocator (cuBLAS's and cuDNN's handles)
    assert report["peak_memory_bytes"] <= rank["device_malloc_peak_bytes"] <= report["peak_memory_bytes"] + 2**28


@pytest.mark.slow
@pytest.mark.parametrize("python_op_context", [False, True])
def test_op_context_from_either_hook(tmp_path, python_op_context):
    script = write_script(tmp_path, """
        import torch
        a = torch.randn(32, 16, device="cuda")
        b = torch.randn(16, 8, device="cuda")
        (a @ b).sum().item()
        """)
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "stepcast.emulate", "run", "--capture-only", "--report", str(report), "--trace-dir",
           str(tmp_path / "traces"), *(["--python-op-context"] if python_op_context else []), "--", str(script)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = read_trace(json.loads(report.read_text())["traces"][0])
    assert trace["meta"]["op_context"] == ("dispatch_mode" if python_op_context else "record_function")
    mm = [e for e in trace["events"] if e["kind"] == "kernel" and (e.get("spec") or {}).get("family") == "gemm"]
    assert len(mm) == 1 and mm[0]["op"] == "aten.mm.default" and mm[0]["op_shapes"][:2] == [[32, 16], [16, 8]]
    assert mm[0]["spec"] == {"family": "gemm", "dtype": "fp32", "m": 32, "n": 8, "k": 16, "batch": 1}


@pytest.mark.slow
def test_identical_ranks_are_deduplicated_and_their_traces_rebuilt(tmp_path, emulate_run):
    script = write_script(tmp_path, f"""
        import os, torch, torch.distributed as dist
        def note(text):  # one file per rank: the ranks' stdout lines would interleave
            with open(os.path.join({str(tmp_path)!r}, f"rank{{dist.get_rank()}}.txt"), "a") as f:
                f.write(text + "\\n")
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        names = [None] * 3
        dist.all_gather_object(names, f"r{{dist.get_rank()}}")   # pickled objects through small collectives
        first = [dict(origin=dist.get_rank())]
        dist.broadcast_object_list(first, src=0)
        note(f"objects {{names}} {{first}}")
        model = torch.nn.Linear(8, 8).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            model(torch.randn(4, 8, device="cuda")).sum().backward()
            opt.step()
            opt.zero_grad()
            t = torch.tensor([float(dist.get_rank() + 1)], device="cuda")
            dist.all_reduce(t)                        # small: exchanged for real between live ranks
            note(f"step {{step}} sum {{t.item()}}")
        dist.destroy_process_group()
        """)
    proc, report, _ = emulate_run(tmp_path, script, nproc=3)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [(tmp_path / f"rank{rank}.txt").read_text().splitlines() for rank in range(3)]
    assert all(n[0] == "objects ['r0', 'r1', 'r2'] [{'origin': 0}]" for n in notes)
    assert all(n[1] == "step 0 sum 6.0" for n in notes)  # 1 + 2 + 3, exchanged for real before dedup
    # ranks 1 and 2 did the same device work as rank 0 in the first two full iterations (steps 1 and 2, the second
    # confirming the first): they stopped at the end of step 2, before its note
    assert report["deduplicated_ranks"] == {"1": 0, "2": 0} and report["processes_run_to_completion"] == 1
    assert len(notes[0]) == 5 and len(notes[1]) == len(notes[2]) == 3
    assert any("stopped after iteration 3 as copies of rank(s) 0" in w for w in report["capture_warnings"])
    traces = [read_trace(t) for t in report["traces"]]
    colls = [[(e["comm_seq"], e["op"], e["bytes"]) for e in t["events"] if e["kind"] == "collective"] for t in traces]
    assert colls[0] == colls[1] == colls[2] and len(colls[0]) >= 4
    assert [e["step"] for e in traces[2]["events"] if e["kind"] == "iteration"] == [0, 1, 2, 3, 4]
    assert traces[1]["meta"]["deduplicated_from"] == 0


def test_unknown_hardware_is_one_line_naming_the_catalog(tmp_path):
    script = write_script(tmp_path, "print('never runs')\n")
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate", "run", "--hardware", "h900", "--", str(script)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "never runs" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown hardware 'h900'" in lines[0] and "h100-sxm" in lines[0]


def _simulate_a_capture_whose_reading(tmp_path, monkeypatch, error: BaseException) -> int:
    """emulate.cli.simulate_capture over one capture whose trace reading raises ``error``."""
    import argparse

    import stepcast.emulate.trace

    from stepcast import emulate
    from stepcast.emulate.cli import simulate_capture

    def read(path):
        raise error

    monkeypatch.setattr(emulate.trace, "read_trace", read)
    ns = argparse.Namespace(nodes=1, host_speed=None, launch_queue=None, report=None, trace=None,
                            trace_rank_list=None)
    capture = {"traces": [str(tmp_path / "rank0.trace.json")], "capture_dir": str(tmp_path)}
    return simulate_capture(ns, lookup("h100-sxm"), capture, None, 0)


def test_traces_the_simulator_refuses_are_one_line_naming_the_capture_folder(tmp_path, monkeypatch, capsys):
    from stepcast.emulate.trace import TraceFormatError

    error = TraceFormatError("rank0.trace.json: field 'events': expected a list")
    assert _simulate_a_capture_whose_reading(tmp_path, monkeypatch, error) == 2
    assert capsys.readouterr().err == (f"stepcast: rank0.trace.json: field 'events': expected a list; traces in "
                                       f"{tmp_path}\n")


def test_a_stop_while_simulating_reaches_the_caller_that_reports_it(tmp_path, monkeypatch):
    import signal

    from stepcast.emulate.launcher import RunInterrupted

    with pytest.raises(RunInterrupted):
        _simulate_a_capture_whose_reading(tmp_path, monkeypatch, RunInterrupted(signal.SIGTERM))
