"""The C++ op-context hook (csrc/opctx.cpp) stays quiet under torch.compile: the fake tensors the compiler traces
with are CUDA tensors without memory, and asking them for a data pointer threw inside the RecordFunction callback,
which torch reports on stderr once per traced op."""
from __future__ import annotations

import textwrap

import pytest

COMPILED_FUNCTION = textwrap.dedent("""
    import torch

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(dim=0).clone()

    compiled = torch.compile(f, backend="aot_eager")  # traces with fake tensors, runs the aten ops (no Triton)
    x = torch.randn(8, 16, device="cuda", requires_grad=True)
    w = torch.tensor([[0.5] * 4] * 16, device="cuda")  # small host data: the shim keeps its real bytes
    compiled(x, w).sum().backward()
""")


@pytest.mark.slow
def test_compiling_prints_no_record_function_callback_errors(emulate_run, tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text(COMPILED_FUNCTION)
    proc, doc, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert doc["ranks"][0]["kernels"] > 0
    assert "Exception in RecordFunction callback" not in proc.stderr
