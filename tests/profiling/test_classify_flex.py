"""profiling.classify: Inductor's FlexAttention templates as the attention they compute."""
from __future__ import annotations

import pytest

from stepcast.profiling.classify import classify_flex_attention_kernel, flex_attention_pass
from stepcast.profiling.families import key_columns

#: torchtitan's Llama 3.1 8B forward (local batch 2, sequence 8192): Q, K, V, then the block mask's int32 tensors
EAGER_SHAPES = [[2, 32, 8192, 128], [2, 8, 8192, 128], [2, 8, 8192, 128], [2, 1, 64, 64], [2, 1, 64], [2, 8192]]
EAGER_DTYPES = ["torch.bfloat16"] * 3 + ["torch.int32"] * 3


@pytest.mark.parametrize("name, expected", [
    ("triton_tem_fused_flex_attention_0", "fwd"),
    ("triton_tem_fused_flex_attention_backward_1", "bwd"),
    ("triton_tem_fused__to_copy__unsafe_view_clone_flex_attention_split_with_sizes_transpose_view_6", "fwd"),
    ("triton_tem_fused__to_copy__unsafe_view_clone_flex_attention_backward_split_with_sizes_transpose_view_9", "bwd"),
    ("triton_per_fused_flex_attention_backward_0", None),   # the backward's delta reduction: a memory-bound kernel
    ("triton_tem_fused_mm_4", None),
])
def test_flex_attention_templates_are_told_apart_by_pass_and_from_other_kernels(name, expected):
    assert flex_attention_pass(name) == expected


def test_a_flex_forward_is_the_grouped_query_causal_attention_of_its_query_and_key():
    row = classify_flex_attention_kernel("triton_tem_fused_flex_attention_0", [64, 2, 32], EAGER_SHAPES, EAGER_DTYPES)
    assert row == {"family": "attention", "dtype": "bf16", "batch": 2, "heads_q": 32, "heads_kv": 8, "seq_q": 8192,
                   "seq_kv": 8192, "head_dim": 128, "causal": True, "pass": "fwd"}
    assert set(key_columns("attention")) - {"hardware"} == set(row)


#: torch.compile of a whole block: the graph's inputs (activation, positions, norm weight, fused QKV weight, rotary
#: table, block mask ...), no Q, K or V
COMPILED_SHAPES = [[2, 8192, 4096], [2, 8192], [4096], [6144, 4096], [8192, 64], [2, 1, 64, 64], [2, 1, 64]]
COMPILED_DTYPES = ["torch.bfloat16", "torch.int64", "torch.bfloat16", "torch.bfloat16", "torch.other", "torch.int32",
                   "torch.int32"]
COMPILED_NAME = "triton_tem_fused__to_copy__unsafe_view_clone_flex_attention_split_with_sizes_transpose_view_6"


def test_a_flex_forward_in_a_compiled_block_reads_its_shapes_from_the_mask_activation_and_output():
    out_bytes = 2 * 32 * 8192 * 128 * 2
    row = classify_flex_attention_kernel(COMPILED_NAME, [64, 2, 32], COMPILED_SHAPES, COMPILED_DTYPES, out_bytes)
    assert row == {"family": "attention", "dtype": "bf16", "batch": 2, "heads_q": 32, "heads_kv": 32, "seq_q": 8192,
                   "seq_kv": 8192, "head_dim": 128, "causal": True, "pass": "fwd"}


@pytest.mark.parametrize("out_bytes", [0, 2 * 32 * 8192 * 100 * 2 + 2, 2 * 32 * 8192 * 4096 * 2])
def test_a_compiled_flex_forward_whose_output_gives_no_head_dim_gets_no_row(out_bytes):
    assert classify_flex_attention_kernel(COMPILED_NAME, [64, 2, 32], COMPILED_SHAPES, COMPILED_DTYPES,
                                          out_bytes) is None


def test_a_flex_kernel_without_its_shapes_gets_no_row():
    no_mask = [[2, 8192, 4096], [6144, 4096]]
    assert classify_flex_attention_kernel("triton_tem_fused_flex_attention_6", [64, 2, 32], no_mask,
                                          ["torch.bfloat16", "torch.bfloat16"], 2**27) is None
    assert classify_flex_attention_kernel("triton_tem_fused_flex_attention_backward_1", [1280, 2, 8], EAGER_SHAPES,
                                          EAGER_DTYPES) is None
