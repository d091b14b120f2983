"""examples/llama_fsdp2.py (the torchtitan row's script) under the emulator: FSDP2's collectives on every rank, and
torchtitan's "op" selective checkpointing, which recomputes every second matmul of a block in the backward."""
from __future__ import annotations

import pytest

from stepcast.profiling.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "llama_fsdp2.py"
LAYERS = 2
ARGS = ("--layers", str(LAYERS), "--dim", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256", "--vocab", "256",
        "--seq", "64", "--batch", "2", "--steps", "3")
pytestmark = pytest.mark.slow
#: the aten ops of a Linear (a cuDNN convolution's implicit GEMM is a GEMM row too, but none runs here)
MATMULS = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default")


def steady_kernels(trace: dict) -> list[dict]:
    """Events of the second iteration (the first after warm-up)."""
    marks = [i for i, ev in enumerate(trace["events"]) if ev["kind"] == "iteration"]
    return trace["events"][marks[1] + 1:marks[2]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, emulate_run) -> dict[str, list[dict]]:
    out = {}
    for ac in ("selective", "none"):
        proc, _, traces = emulate_run(tmp_path_factory.mktemp(ac), SCRIPT, *ARGS, "--ac", ac, nproc=2,
                                      hardware="h100-sxm")
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[ac] = traces
    return out


def test_every_rank_shards_with_all_gathers_and_reduce_scatters(runs):
    for trace in runs["none"]:
        ops = {ev["op"] for ev in steady_kernels(trace) if ev["kind"] == "collective"}
        assert {"all_gather", "reduce_scatter"} <= ops


def test_selective_checkpointing_recomputes_every_second_matmul(runs):
    def gemm_count(trace: dict) -> int:
        return sum(1 for ev in steady_kernels(trace) if ev["kind"] == "kernel" and ev.get("op") in MATMULS
                   and (ev.get("spec") or {}).get("family") == "gemm")

    # a block's forward runs 7 matmuls (wq, wk, wv, wo, w1, w3, w2); the policy keeps the 1st, 3rd, 5th, 7th
    assert gemm_count(runs["selective"][0]) - gemm_count(runs["none"][0]) == 3 * LAYERS
