"""benchmarks.emulate.e2e.kernel_classes: the kind of kernel each device event of a trace is, as the attribution
needs."""
from __future__ import annotations

import pytest

from benchmarks.emulate.e2e.kernel_classes import kernel_class
from stepcast.emulate.emulation import iteration_family_ms


@pytest.mark.parametrize("event, expected", [
    ({"kind": "kernel", "name": "nvjet_sm90_tst_64x32", "op": "aten.mm.out",
      "spec": {"family": "gemm", "dtype": "bf16"}}, "gemm bf16"),
    ({"kind": "kernel", "name": "nvjet_sm90_qqtst_128x128", "op": "aten._scaled_mm.default",
      "spec": {"family": "gemm", "dtype": "fp8_e4m3"}}, "gemm fp8"),
    ({"kind": "kernel", "name": "sm90_xmma_gemm", "op": "aten._scaled_mm.default",
      "spec": {"family": "gemm", "dtype": "bf16"}}, "gemm fp8"),
    ({"kind": "kernel", "name": "ampere_sgemm", "op": "aten.mm.default",
      "spec": {"family": "gemm", "dtype": "fp32"}}, "gemm fp32"),
    ({"kind": "kernel", "name": "triton_tem_fused__to_copy_cat_flex_attention_backward_3", "spec": None},
     "flex attention"),
    ({"kind": "kernel", "name": "triton_tem_fused_mm_4", "spec": None}, "triton gemm template"),
    ({"kind": "kernel", "name": "triton_red_fused__to_copy_abs_amax_2", "spec": None}, "triton fused"),
    ({"kind": "kernel", "name": "triton_poi_fused_mul_silu_1", "spec": {"family": "elementwise"}}, "triton fused"),
    ({"kind": "kernel", "name": "cudnn_generated_fort_native_sdpa", "spec": {"family": "attention"}}, "attention"),
    ({"kind": "kernel", "name": "void at::native::reduce_kernel", "spec": None}, "other"),
    ({"kind": "collective", "op": "reduce_scatter"}, "nccl reduce_scatter"),
    ({"kind": "collective", "op": "all_gather"}, "nccl all_gather"),
    ({"kind": "memcpy", "name": "memcpy"}, "copy"),
    ({"kind": "memset"}, "memset"),
])
def test_each_device_event_gets_the_class_its_timing_model_needs(event, expected):
    assert kernel_class(event) == expected


def test_iteration_time_is_split_by_the_given_classifier():
    trace = {"events": [
        {"seq": 0, "kind": "iteration"},
        {"seq": 1, "kind": "kernel", "name": "triton_tem_fused_mm_0", "spec": None},
        {"seq": 2, "kind": "kernel", "name": "nvjet_sm90_qqtst", "op": "aten._scaled_mm.default",
         "spec": {"family": "gemm", "dtype": "fp8_e4m3"}},
        {"seq": 3, "kind": "collective", "op": "all_gather"},
    ]}
    kinds = {1: "kernel", 2: "kernel", 3: "collective"}
    timeline = {"traceEvents": [{"ph": "X", "pid": 0, "cat": kinds[s], "dur": 1000.0 * (s + 1), "args": {"seq": s}}
                                for s in (1, 2, 3)]}
    by_class = iteration_family_ms(trace, timeline, classify=kernel_class)
    assert by_class[0] == pytest.approx({"triton gemm template": 2.0, "gemm fp8": 3.0, "nccl all_gather": 4.0})
