"""The small data path (emulate/driver/csrc/datapath.c): which device bytes read back for real."""
from __future__ import annotations

import textwrap

import pytest

# What printing a CUDA tensor does first (torch/_tensor_str.py): masked_select's count is written by nonzero's
# kernel into a scratch block of the caching allocator and read back. Before that rule, the block still held bytes
# an earlier op had copied in, and the count read as 0x01010101 (16.8 M elements: printing never ended).
STALE_SCRATCH = """
    import torch
    for _ in range(3):
        v = torch.randn(6).cuda().bfloat16().float()
        print("SELECTED", torch.masked_select(v, torch.isfinite(v) & v.ne(0)).numel())
    print("ROUNDTRIP", torch.tensor([3.0, 4.0], device="cuda").cpu().tolist())
"""


@pytest.mark.slow
def test_a_count_an_op_reads_back_after_its_kernel_is_not_an_earlier_ops_bytes(tmp_path, emulate_run):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(STALE_SCRATCH))
    proc, _, _ = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("SELECTED")]
    assert len(counts) == 3 and all(0 <= c <= 6 for c in counts)
    assert "ROUNDTRIP [3.0, 4.0]" in proc.stdout  # bytes copied in still read back
