"""emulate.sim.durations: Inductor's Triton kernels (no aten op, no spec) are timed from their launch."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.estimator.base import KernelEstimator


class Recording(KernelEstimator):
    """Times each row with ``per_row`` (a frame -> microseconds) and records the rows it saw."""

    name = "recording"

    def __init__(self, per_row) -> None:
        self.per_row = per_row
        self.seen: list[dict] = []

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        self.seen += frame.to_dict("records")
        return np.asarray(self.per_row(frame), dtype=float)


def elements_estimator() -> Recording:
    """One microsecond per million elements of an elementwise row."""
    return Recording(lambda frame: frame["numel"] / 1e6)


def test_a_triton_pointwise_kernel_is_predicted_from_its_grid_not_the_launch_floor():
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    ev = b.kernel(stream=1, name="triton_poi_fused_add_mul_0")
    ev.update(grid=[4096, 1, 1], block=[128, 1, 1], op="CompiledFunction.default", op_shapes=[[4096, 1024]],
              op_dtypes=["torch.bfloat16"])
    b.device_sync()
    b.iteration(1, end=True)
    est = elements_estimator()
    result = simulate([b.doc()], "h100-sxm", estimator=est)
    assert est.seen and est.seen[0]["numel"] == 4096 * 128 * 8 and est.seen[0]["dtype"] == "bf16"
    assert result.durations.fallback_reasons == {}
    kernel = next(i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "kernel")
    assert result.durations.us[0][kernel] == 4096 * 128 * 8 / 1e6


def attention_estimator() -> Recording:
    """1000 us for an attention row, 1 us for anything else."""
    return Recording(lambda frame: np.where(frame["family"] == "attention", 1000.0, 1.0))


def test_flex_attention_templates_are_timed_as_the_attention_they_compute_forward_and_backward():
    """torchtitan's FlexAttention: the forward's op context holds Q, K, V; the backward's launch has none and takes
    its forward's shapes. Both were timed at the launch floor (2 us) from the block mask's bytes before."""
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    fwd = b.kernel(stream=1, name="triton_tem_fused_flex_attention_0")
    fwd.update(grid=[64, 2, 32], block=[128, 1, 1], op="CompiledFunction.default",
               op_shapes=[[2, 32, 8192, 128], [2, 8, 8192, 128], [2, 8, 8192, 128], [2, 1, 64, 64], [2, 1, 64]],
               op_dtypes=["torch.bfloat16"] * 3 + ["torch.int32"] * 2, bytes_read=65536, bytes_written=2**27)
    bwd = b.kernel(stream=1, name="triton_tem_fused_flex_attention_backward_1")
    bwd.update(grid=[1280, 2, 8], block=[128, 1, 1], op="autograd.engine.evaluate_function: CompiledFunctionBackward",
               op_shapes=[], op_dtypes=[], bytes_read=65536, bytes_written=2**25)
    b.device_sync()
    b.iteration(1, end=True)
    est = attention_estimator()
    result = simulate([b.doc()], "h100-sxm", estimator=est)
    rows = [r for r in est.seen if r["family"] == "attention"]
    assert sorted(r["pass"] for r in rows) == ["bwd", "fwd"]
    assert all((r["batch"], r["heads_q"], r["heads_kv"], r["seq_q"], r["head_dim"], r["causal"])
               == (2, 32, 8, 8192, 128, True) for r in rows)
    kernels = [i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "kernel"]
    assert [result.durations.us[0][i] for i in kernels] == [1000.0, 1000.0]


def test_a_flex_backward_takes_its_forwards_shapes_and_the_kv_heads_of_its_own_launch():
    """A compiled block's forward cannot see its key/value heads; the backward's grid (blocks, batch, kv heads) can."""
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    fwd = b.kernel(stream=1, name="triton_tem_fused__to_copy_clone_flex_attention_view_6")
    fwd.update(grid=[64, 2, 32], block=[256, 1, 1], op="CompiledFunction.default",
               op_shapes=[[2, 8192, 4096], [6144, 4096], [2, 1, 64, 64], [2, 1, 64]],
               op_dtypes=["torch.bfloat16", "torch.bfloat16", "torch.int32", "torch.int32"], bytes_read=65536,
               bytes_written=2 * 32 * 8192 * 128 * 2)
    bwd = b.kernel(stream=1, name="triton_tem_fused__to_copy_clone_flex_attention_backward_view_9")
    bwd.update(grid=[320, 2, 8], block=[256, 1, 1], op="autograd.engine.evaluate_function: CompiledFunctionBackward",
               op_shapes=[], op_dtypes=[], bytes_read=65536, bytes_written=2**25)
    b.device_sync()
    b.iteration(1, end=True)
    est = attention_estimator()
    simulate([b.doc()], "h100-sxm", estimator=est)
    rows = {r["pass"]: r for r in est.seen if r["family"] == "attention"}
    assert (rows["fwd"]["heads_kv"], rows["bwd"]["heads_kv"]) == (32, 8)
    assert rows["bwd"]["seq_q"] == rows["fwd"]["seq_q"] == 8192 and rows["bwd"]["head_dim"] == 128


def test_an_unclassified_aten_kernel_is_timed_from_its_tensors_bytes_not_the_launch_floor():
    """FSDP2's all-gather copy-out moves the whole unsharded parameters; it took the 2 us launch floor before."""
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    ev = b.kernel(stream=1, name="at::native::detail::split_with_sizes_copy_out_contiguous_no_cast_kernel")
    ev.update(grid=[4096, 1, 1], block=[128, 1, 1], op="aten.split_with_sizes_copy.out",
              op_shapes=[[8, 2**20], [], [], [[8, 2**20]]], op_dtypes=["torch.bfloat16", "", "", ["torch.bfloat16"]])
    b.device_sync()
    b.iteration(1, end=True)
    est = elements_estimator()
    result = simulate([b.doc()], "h100-sxm", estimator=est)
    assert est.seen and est.seen[0]["op"] == "copy" and est.seen[0]["numel"] == 8 * 2**20
    assert result.durations.fallback_reasons.get("no_spec_launch_floor", 0) == 0
    kernel = next(i for i, e in enumerate(b.doc()["events"]) if e["kind"] == "kernel")
    assert result.durations.us[0][kernel] == 8 * 2**20 / 1e6


def test_a_librarys_triton_kernel_is_timed_from_the_tensors_its_launch_passed():
    """torchao's Float8 cast kernels (no aten op, no Inductor name) took the launch floor before."""
    b = TraceBuilder(rank=0, world_size=1, meta={"launch_latency_us": 0.0})
    b.iteration(0)
    ev = b.kernel(stream=1, name="_triton_fp8_rowwise_2d_fused_scale_and_cast_kernel")
    ev.update(grid=[512, 1, 1], block=[128, 1, 1], op="torchao.triton_fp8_rowwise_2d_scale_and_cast.default",
              op_shapes=[[4096, 2048]], op_dtypes=["torch.bfloat16"], bytes_read=4096 * 2048 * 3)
    b.device_sync()
    b.iteration(1, end=True)
    est = elements_estimator()
    result = simulate([b.doc()], "h100-sxm", estimator=est)
    assert est.seen and est.seen[0]["op"] == "copy" and est.seen[0]["dtype"] == "bf16"
    assert est.seen[0]["numel"] == 4096 * 2048 * 3 / 2 / 2   # bytes / 2 streams / 2 bytes an element
    assert result.durations.fallback_reasons.get("no_spec_launch_floor", 0) == 0
