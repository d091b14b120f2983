"""Targets older than the oldest architecture in torch's CUDA 13 binaries (V100, P100, P4) still run the library
code paths that ask the runtime which code version a kernel has (CUB's radix sort: embedding backward, sort)."""
from __future__ import annotations

import textwrap

import pytest

SORTS = textwrap.dedent("""
    import torch
    emb = torch.nn.Embedding(30522, 64).cuda()
    idx = torch.randint(0, 30522, (8, 512), device="cuda")
    emb(idx).sum().backward()          # more than 3,072 indices: a radix sort
    torch.sort(torch.randn(5000, device="cuda"))
    torch.cuda.synchronize()
""")


@pytest.mark.slow
@pytest.mark.parametrize("hardware", ["v100-pcie-32gb", "p4"])
def test_radix_sorts_run_on_a_target_older_than_the_binaries_oldest_architecture(emulate_run, tmp_path, hardware):
    script = tmp_path / "sorts.py"
    script.write_text(SORTS)
    proc, doc, traces = emulate_run(tmp_path, script, hardware=hardware)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = [e["name"] for e in traces[0]["events"] if e["kind"] == "kernel"]
    assert any("Radix" in n or "radix" in n for n in names)
