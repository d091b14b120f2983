"""Each bundled example runs unchanged under ``stepcast run`` and its trace holds what the model asks of
the GPU: the GEMM shapes computed from the model config, attention calls, the optimizer's kernels, and for DDP and
FSDP2 the collectives with the right byte counts on both ranks."""
from __future__ import annotations

from collections import Counter

import pytest

from stepcast.profiling.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
pytestmark = pytest.mark.slow




def iterations(trace: dict) -> list[list[dict]]:
    """Events of each iteration (split at the iteration events)."""
    out: list[list[dict]] = []
    for ev in trace["events"]:
        if ev["kind"] == "iteration":
            out.append([])
        else:
            out[-1].append(ev)
    return out


def gemm_calls(events: list[dict]) -> list[dict]:
    """The kernel timed for each GEMM call (its first GEMM kernel; cuBLASLt's split-K reduction is its part)."""
    return [e for e in events if e["kind"] == "kernel" and (e.get("spec") or {}).get("family") == "gemm"]


def gemms(events: list[dict]) -> Counter:
    return Counter((e["spec"]["m"], e["spec"]["n"], e["spec"]["k"]) for e in gemm_calls(events))


GPT = dict(layers=2, d_model=64, heads=4, seq=32, batch=2, vocab=128, steps=2)


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory, emulate_run):
    args = [f"--{k.replace('_', '-')}={v}" for k, v in GPT.items()]
    proc, report, traces = emulate_run(tmp_path_factory.mktemp("gpt"), EXAMPLES / "gpt.py", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, report, traces[0]


def test_gpt_gemm_shapes_match_the_model_config(gpt_run):
    _, _, trace = gpt_run
    tokens, d, v = GPT["batch"] * GPT["seq"], GPT["d_model"], GPT["vocab"]
    linears = [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)] * GPT["layers"] + [(d, v)]  # (in, out)
    forward = Counter((tokens, out, inp) for inp, out in linears)
    input_grads = Counter((tokens, inp, out) for inp, out in linears)
    weight_grads = Counter((out, inp, tokens) for inp, out in linears)
    step = iterations(trace)[1]  # the second iteration: steady state
    assert gemms(step) == forward + input_grads + weight_grads
    assert {e["spec"]["dtype"] for e in gemm_calls(step)} == {"bf16"}  # autocast
    assert all(e["name"].startswith("nvjet_sm90") for e in gemm_calls(step))  # cuBLASLt's own choice on an H100


def test_gpt_attention_calls_carry_their_shapes(gpt_run):
    _, _, trace = gpt_run
    step = iterations(trace)[1]
    # the innermost aten op is recorded: on an H100 torch's SDPA takes cuDNN's attention, whose op takes q, k, v as
    # [batch, heads, seq, head_dim]
    bhsd = [GPT["batch"], GPT["heads"], GPT["seq"], GPT["d_model"] // GPT["heads"]]
    fwd = [e for e in step if e["kind"] == "kernel" and e["op"] == "aten._cudnn_attention_forward.default"]
    bwd = [e for e in step if e["kind"] == "kernel" and e["op"] == "aten._cudnn_attention_backward.default"]
    assert len(fwd) == GPT["layers"] and all("sdpa" in e["name"] and "fprop" in e["name"] for e in fwd)
    assert all(e["op_shapes"][:3] == [bhsd] * 3 for e in fwd)
    expected = {"family": "attention", "dtype": "bf16", "batch": GPT["batch"], "heads_q": GPT["heads"],
                "heads_kv": GPT["heads"], "seq_q": GPT["seq"], "seq_kv": GPT["seq"],
                "head_dim": GPT["d_model"] // GPT["heads"], "causal": True, "pass": "fwd"}
    assert all(e["spec"] == expected for e in fwd)
    # the backward launches three kernels per call; the call is timed once, by its first kernel
    timed = [e for e in bwd if e["spec"]]
    assert len(timed) == GPT["layers"] and all(e["spec"] == {**expected, "pass": "bwd"} for e in timed)
    assert sum(bool(e.get("op_part")) for e in bwd) == len(bwd) - len(timed) == 2 * GPT["layers"]


def test_gpt_optimizer_kernels_and_iterations(gpt_run):
    proc, report, trace = gpt_run
    marks = [e for e in trace["events"] if e["kind"] == "iteration"]
    assert [m["step"] for m in marks] == list(range(GPT["steps"] + 1))
    assert {m["source"] for m in marks} == {"optimizer"}
    step = iterations(trace)[1]
    foreach = [e for e in step if e["kind"] == "kernel" and (e["op"] or "").startswith("aten._foreach_")]
    assert foreach and all("multi_tensor_apply_kernel" in e["name"] for e in foreach)
    assert "step 1: loss" in proc.stdout  # loss.item() worked
    assert report["world_size"] == 1 and report["peak_memory_bytes"] > 0


def test_cnn_convolutions_batch_norm_and_sgd(tmp_path, emulate_run):
    channels, batch, image = 8, 4, 16
    proc, _, traces = emulate_run(tmp_path, EXAMPLES / "cnn.py", f"--channels={channels}", f"--batch={batch}",
                                  f"--image={image}", "--stages=2", "--steps=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    step = iterations(traces[0])[1]
    kernels = [e for e in step if e["kind"] == "kernel"]
    ops = Counter(e["op"] for e in kernels)
    assert ops["aten.cudnn_batch_norm.default"] and ops["aten.cudnn_batch_norm_backward.default"]
    # cuDNN's convolutions, each timed as the implicit GEMM of its pass: forward K = C_in * 3 * 3 (the first stage
    # reads the 3-channel image), M = the output pixels of the batch
    forward = [e for e in kernels if e["op"] == "aten.cudnn_convolution.default"]
    assert len(forward) == 2 and all("fprop" in e["name"] for e in forward)
    assert sorted(e["spec"]["k"] for e in forward) == [3 * 9, channels * 9]
    assert max(e["spec"]["m"] for e in forward) == batch * image * image
    backward = [e for e in kernels if e["op"] == "aten.convolution_backward.default" and e.get("spec")]
    assert any("wgrad" in e["name"] for e in backward) and any("dgrad" in e["name"] for e in backward)
    assert any((e["op"] or "").startswith("aten._foreach_") for e in kernels)  # SGD momentum


def test_ddp_all_reduces_every_gradient_byte_on_both_ranks(tmp_path, emulate_run):
    width, hidden, layers = 32, 128, 2
    proc, report, traces = emulate_run(tmp_path, EXAMPLES / "ddp.py", f"--width={width}", f"--hidden={hidden}",
                                       f"--layers={layers}", "--bucket-mb=0.05", "--steps=2", nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    params = (width * hidden + hidden) + (layers - 1) * (hidden * hidden + hidden) + (hidden * width + width)
    assert report["world_size"] == 2 and len(traces) == 2
    per_rank = []
    for trace in traces:
        colls = [e for e in iterations(trace)[1] if e["kind"] == "collective" and e["op"] == "all_reduce"]
        assert len(colls) > 1  # several buckets
        assert sum(e["bytes"] for e in colls) == 4 * params
        assert all(e["ranks"] == 2 and e["dtype"] == "fp32" for e in colls)
        per_rank.append([(e["comm"], e["comm_seq"], e["bytes"]) for e in colls])
    assert per_rank[0] == per_rank[1]


def test_fsdp2_gathers_and_reduce_scatters_each_unit_on_both_ranks(tmp_path, emulate_run):
    dim, blocks = 64, 2
    proc, _, traces = emulate_run(tmp_path, EXAMPLES / "fsdp2.py", f"--dim={dim}", f"--blocks={blocks}",
                                  "--steps=2", nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    unit = 2 * dim + (dim * 4 * dim + 4 * dim) + (4 * dim * dim + dim)  # LayerNorm + 2 Linear
    seen = []
    for trace in traces:
        colls = [e for e in iterations(trace)[1] if e["kind"] == "collective"]
        gathers = [e for e in colls if e["op"] == "all_gather"]
        scatters = [e for e in colls if e["op"] == "reduce_scatter"]
        assert len(gathers) == 2 * blocks and len(scatters) == blocks  # forward + backward re-gather
        assert all(e["bytes"] == unit * 2 and e["dtype"] == "bf16" for e in gathers)     # bf16 parameters
        assert all(e["bytes"] == unit * 4 and e["dtype"] == "fp32" for e in scatters)    # fp32 reduction
        seen.append([(e["comm"], e["comm_seq"], e["op"], e["bytes"]) for e in colls])
    assert seen[0] == seen[1]


def grouped_gemm_rows(trace: dict) -> list[int]:
    """The m of each grouped GEMM (torch._grouped_mm: the experts' forward and input gradient) a rank ran."""
    return [e["spec"]["m"] for e in trace["events"] if e["kind"] == "kernel"
            and e.get("op") == "aten._grouped_mm.default" and (e.get("spec") or {}).get("batch") == 1]


def test_torchtitan_moe_runs_expert_parallel_on_the_stated_routing(tmp_path, emulate_run):
    from stepcast.emulate.stated_routing import expert_counts, parse

    proc, report, traces = emulate_run(tmp_path, EXAMPLES / "torchtitan_moe.py", "--ep", "2", "--batch", "2",
                                       "--seq", "256", "--steps", "2", nproc=2,
                                       options=("--no-dedup", "--moe-routing", "power:1.2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["moe_routing"]["stated"] and report["moe_routing"]["routing"].startswith("power law, alpha 1.2")
    # the debug model: 512 tokens a rank, top-3 of 8 experts, 4 on each rank; a rank's grouped GEMMs run the routes
    # both ranks send its experts, each expert's padded to the 128-row tile
    counts = expert_counts(parse("power:1.2"), 512, 8, 3)
    padded = [sum(-(-2 * int(c) // 128) * 128 for c in half) for half in (counts[:4], counts[4:])]
    assert [set(grouped_gemm_rows(trace)) for trace in traces] == [{padded[0]}, {padded[1]}]
    assert "Failed to initialize the TMA descriptor" not in proc.stdout + proc.stderr


def test_megatron_moe_experts_run_the_tokens_the_stated_routing_sends_them(tmp_path, emulate_run):
    from stepcast.emulate.stated_routing import expert_counts, parse

    proc, report, traces = emulate_run(tmp_path, EXAMPLES / "megatron_gpt.py", "--experts", "4", "--topk", "2",
                                       "--ep", "2", "--layers", "1", "--hidden", "256", "--heads", "4", "--seq",
                                       "128", "--global-batch", "2", "--steps", "2", nproc=2,
                                       options=("--no-dedup", "--moe-routing", "power:1.2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = expert_counts(parse("power:1.2"), 128, 4, 2)  # a micro-batch of 128 tokens a rank
    for rank, trace in enumerate(traces):
        # each local expert's first GEMM (hidden -> 4 x hidden) runs the routes both ranks send it
        rows = {e["spec"]["m"] for e in trace["events"] if e["kind"] == "kernel"
                and (e.get("spec") or {}).get("family") == "gemm" and e["spec"]["n"] == 1024 and e["spec"]["k"] == 256}
        assert {2 * int(c) for c in counts[2 * rank:2 * rank + 2]} <= rows


def test_torchtitan_moe_float8_experts_run_scaled_grouped_gemms_and_their_casts_are_timed(tmp_path, emulate_run):
    """``--float8``: torchtitan's Float8GroupedExpertsConverter. The experts' GEMMs are torch's fp8
    ``_scaled_grouped_mm`` (timed as fp8 GEMMs of their padded rows) and torchao's Triton cast and scale kernels
    carry the bytes of their tensors (emulate/triton_bytes.py), so none of them falls to a launch floor."""
    proc, report, traces = emulate_run(tmp_path, EXAMPLES / "torchtitan_moe.py", "--ep", "2", "--batch", "2",
                                       "--seq", "256", "--steps", "2", "--float8", nproc=2,
                                       options=("--no-dedup",))
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = [e for e in traces[0]["events"] if e["kind"] == "kernel"]
    grouped = [e["spec"] for e in kernels if e.get("op") == "aten._scaled_grouped_mm.default" and e.get("spec")]
    assert grouped and {s["dtype"] for s in grouped} == {"fp8_e4m3"}
    casts = [e for e in kernels if (e.get("op") or "").startswith("torchao.triton_fp8")]
    assert casts and all((e.get("bytes_read") or 0) > 0 for e in casts)
