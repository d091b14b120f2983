"""torch.compile on the emulated driver: Triton finds the virtual driver (module loading, cuLaunchKernelEx, pointer checks,
context limits), compiles with the wheel's ptxas, and its kernels are captured with name, grid and op context."""
from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("triton")

MLP_STEP = textwrap.dedent("""
    import sys
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss

    compiled = torch.compile(step, mode=None if sys.argv[1] == "default" else sys.argv[1])
    x = torch.randn(32, 64, device="cuda")
    for _ in range(3):
        compiled(x)
        opt.step()
        opt.zero_grad()
""")


@pytest.mark.slow
def test_compiled_training_step_records_triton_kernels(emulate_run, tmp_path, monkeypatch):
    """Default mode (~45 s here). max-autotune-no-cudagraphs runs too (its benchmarks read the predicted event
    clock), but its first step compiles and times ~20 GEMM templates per matmul: minutes on two cores."""
    # fresh caches: the kernels are really compiled (ptxas) and loaded (cuModuleLoadData) in this run
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    script = tmp_path / "mlp_step.py"
    script.write_text(MLP_STEP)
    proc, doc, traces = emulate_run(tmp_path, script, "default")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception in RecordFunction callback" not in proc.stderr
    events = traces[0]["events"]
    last_iteration = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"][-2]
    steady = [e for e in events[last_iteration:] if e["kind"] == "kernel" and e["name"].startswith("triton_")]
    assert steady, "no Triton kernel in the last iteration"
    assert all(len(e["grid"]) == 3 and e["grid"][0] >= 1 and e["block"][0] % 32 == 0 for e in steady)
    # the forward's and backward's fused kernels, each under the compiled graph's autograd function
    assert {e["op"].split(": ")[-1] for e in steady} >= {"CompiledFunction.default",
                                                          "CompiledFunctionBackward.default"}


@pytest.mark.slow
def test_reduce_overhead_replays_cuda_graphs_of_triton_kernels(emulate_run, tmp_path, monkeypatch):
    """mode="reduce-overhead" (Inductor's CUDA graph trees): stream capture, the graph's private memory pool and
    graph launches work on the emulated driver; each steady step is graph launches whose nodes are the compiled Triton
    kernels, charged one launch call per graph."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    script = tmp_path / "mlp_step.py"
    script.write_text(MLP_STEP)
    proc, _, traces = emulate_run(tmp_path, script, "reduce-overhead")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = traces[0]["events"]
    marks = [i for i, ev in enumerate(events) if ev["kind"] == "iteration"]
    last = events[marks[-2]:marks[-1]]
    replayed = [e for e in last if "graph_launch" in e]
    assert replayed and any(e["kind"] == "kernel" and e["name"].startswith("triton_") for e in replayed)
    # the forward's and the backward's graphs: each launch's nodes numbered from 0
    launches = {e["graph_launch"] for e in replayed}
    assert len(launches) >= 2
    assert sum(1 for e in replayed if e["graph_node"] == 0) == len(launches)
