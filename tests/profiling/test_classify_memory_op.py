"""profiling.classify.classify_memory_op: a kernel no family describes is at least the bytes its op's tensors move."""
from __future__ import annotations

import pytest

from stepcast.profiling.classify import classify_memory_op, classify_op

SHARD = [8, 65667072]   # FSDP2's all-gather output of the 8B model's embedding over 8 ranks


def test_fsdp_copy_out_reads_the_gathered_parameters_and_writes_them_once_each():
    row = classify_memory_op("aten.split_with_sizes_copy.out", [SHARD, [], [], [SHARD]],
                             ["torch.bfloat16", "", "", ["torch.bfloat16"]])
    assert row == {"family": "elementwise", "dtype": "bf16", "op": "copy", "numel": 8 * 65667072}


def test_an_out_overloads_inputs_count_at_most_its_output_a_gather_reads_the_rows_it_indexes():
    row = classify_memory_op("aten.gather.out", [[128256, 4096], [], [16384, 4096], [], [16384, 4096]],
                             ["torch.bfloat16", "", "torch.int64", "", "torch.bfloat16"])
    moved_bytes = 16384 * 4096 * (2 + 8 + 2)          # table rows read, indices read, result written
    assert row["numel"] == moved_bytes // 2 // 2      # bf16 elements, half of them a stream


def test_a_functional_op_writes_a_result_and_an_in_place_one_does_not():
    shapes, dtypes = [[1024, 1024], [1024, 1024]], ["torch.float32", "torch.float32"]
    functional = classify_memory_op("aten.index_add.default", shapes, dtypes)
    in_place = classify_memory_op("aten.copy_.default", shapes + [[]], dtypes + [""])
    assert functional["numel"] == 3 * 1024 * 1024 // 2 and in_place["numel"] == 2 * 1024 * 1024 // 2


@pytest.mark.parametrize("op, shapes, dtypes", [
    ("CompiledFunction.default", [[2, 8192, 4096]], ["torch.bfloat16"]),      # a graph's inputs, not one kernel's
    ("aten.mul.Tensor", [[2, 8192, 32, 64], [2, 8192, 1, 64]], ["torch.other", "torch.other"]),   # width unknown
    ("aten.arange.start_out", [[], [], []], ["", "", ""]),
])
def test_calls_without_sized_aten_tensors_get_no_row(op, shapes, dtypes):
    assert classify_memory_op(op, shapes, dtypes) is None


def test_a_complex_rotary_multiply_is_an_elementwise_op_of_its_width():
    """torchtitan's rotary embedding multiplies complex64 tensors: timed as 8-byte elements, not at a launch floor."""
    row = classify_op("aten.mul.Tensor", [[2, 8192, 32, 64], [2, 8192, 1, 64]], ["torch.complex64", "torch.complex64"])
    assert row == {"family": "elementwise", "dtype": "fp64", "op": "mul", "numel": 2 * 8192 * 32 * 64}
