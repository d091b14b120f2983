"""profiling.classify: aten op + shapes + dtypes -> kernel row; kernel name -> family."""
from __future__ import annotations

from pathlib import Path

import pytest

from stepcast.profiling.classify import (canonical_dtype, classify_kernel_name, classify_op, is_convolution_kernel,
                                is_stand_in_op, op_base_name, tensor_dtype)
from stepcast.profiling.families import key_columns


@pytest.mark.parametrize("op", ["aten::addmm", "aten.addmm.default", "torch.ops.aten.addmm.default"])
def test_op_spellings_agree(op):
    row = classify_op(op, [[4096], [2048, 1024], [1024, 4096]], ["c10::Half"] * 3)
    assert row == {"family": "gemm", "dtype": "fp16", "m": 2048, "n": 4096, "k": 1024, "batch": 1}


def test_every_row_has_exactly_its_family_columns():
    rows = [
        classify_op("aten::mm", [[128, 1024], [1024, 1024]], ["float", "float"]),
        classify_op("aten::_scaled_dot_product_flash_attention", [[2, 16, 1024, 64], [2, 4, 1024, 64],
                                                                  [2, 4, 1024, 64], [], [], []],
                    ["c10::BFloat16"] * 3 + ["Double", "Bool", "Bool"]),
        classify_op("aten::native_layer_norm", [[32, 128, 768], [], [768], [768], []],
                    ["float", "", "float", "float", "Double"]),
        classify_op("aten::add_", [[2048, 512, 1, 1], [2048, 512, 1, 1], []], ["float", "float", "Int"]),
        classify_op("aten::_fused_adamw_", [[[1000], [24]]] * 5, [["torch.bfloat16"] * 2] * 5),
        classify_op("c10d::allreduce_", [[[1024, 1024]], [], []], [["c10::Half"], "", ""], ranks=4,
                    ranks_per_node=4),
    ]
    for row in rows:
        assert row is not None
        assert set(row) == set(key_columns(row["family"])) - {"hardware"}, row


@pytest.mark.parametrize("shapes, expected", [
    ([[128, 1024], [1024, 1024]], (128, 1024, 1024, 1)),  # aten::mm in the HTA control trace
    ([[1024, 256], [256, 256]], (1024, 256, 256, 1)),
])
def test_mm(shapes, expected):
    row = classify_op("aten::mm", shapes, ["float", "float"])
    assert (row["m"], row["n"], row["k"], row["batch"]) == expected and row["dtype"] == "fp32"


def test_integral_shape_entries_of_any_type():
    import numpy as np

    row = classify_op("aten::mm", [(np.int64(4), 3), [3, np.int32(5)]], ["float", "float"])
    assert row == {"family": "gemm", "dtype": "fp32", "m": 4, "n": 5, "k": 3, "batch": 1}
    assert all(type(v) is int for k, v in row.items() if k in ("m", "n", "k", "batch"))


def test_tf32_is_read_from_the_kernel_name():
    kernel = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x128_32x3_nt_align4>(...)"
    assert classify_op("aten::mm", [[128, 1024], [1024, 1024]], ["float", "float"], kernel)["dtype"] == "tf32"
    assert classify_op("aten::mm", [[128, 1024], [1024, 1024]], ["float", "float"],
                       "volta_sgemm_128x64_nn")["dtype"] == "fp32"


GROUPED = ("aten._grouped_mm.default", [[1536, 256], [4, 256, 512], [4], [], []],
           ["torch.bfloat16", "torch.bfloat16", "torch.int32", "", ""])
CUTLASS_GROUPED = "cutlass::device_kernel<GemmUniversal<GroupProblemShape<...>>>"


def test_a_grouped_gemm_is_one_gemm_of_its_groups_tile_padded_rows():
    op, shapes, dtypes = GROUPED
    even = classify_op(op, shapes, dtypes, CUTLASS_GROUPED, args=[None, None, [384, 768, 1152, 1536], None, None])
    assert (even["m"], even["n"], even["k"], even["batch"], even["dtype"]) == (1536, 512, 256, 1, "bf16")
    # a skewed routing: groups of 10, 758, 384 and 384 rows pad to 128 + 768 + 384 + 384 rows of tiles
    skewed = classify_op(op, shapes, dtypes, CUTLASS_GROUPED, args=[None, None, [10, 768, 1152, 1536], None, None])
    assert skewed["m"] == 1664
    assert classify_op(op, shapes, dtypes, CUTLASS_GROUPED)["m"] == 1536  # offsets unknown: a's rows
    weight_grad = classify_op(op, [[256, 1536], [1536, 512], [4], [], []], dtypes, CUTLASS_GROUPED,
                              args=[None, None, [384, 768, 1152, 1536], None, None])
    assert (weight_grad["m"], weight_grad["n"], weight_grad["k"], weight_grad["batch"]) == (256, 512, 384, 4)
    assert classify_op(op, shapes, dtypes, "void at::cuda::detail::prepare_grouped_gemm_data<...>") is None


def test_a_float8_grouped_gemm_is_the_fp8_gemm_of_its_groups_with_offsets_after_the_scales():
    # _scaled_grouped_mm(a, b, scale_a, scale_b, offs, ...): the offsets are its fifth argument
    shapes = [[1536, 256], [4, 256, 512], [1536], [4, 512], [4], [], []]
    dtypes = ["torch.float8_e4m3fn", "torch.float8_e4m3fn", "torch.float32", "torch.float32", "torch.int32", "", ""]
    row = classify_op("aten._scaled_grouped_mm.default", shapes, dtypes, CUTLASS_GROUPED,
                      args=[None, None, None, None, [10, 768, 1152, 1536], None, None])
    assert (row["m"], row["n"], row["k"], row["batch"], row["dtype"]) == (1664, 512, 256, 1, "fp8_e4m3")
    assert classify_op("aten._scaled_grouped_mm.default", shapes, dtypes, CUTLASS_GROUPED)["m"] == 1536


def test_batched_and_folded_gemms():
    bmm = classify_op("aten.bmm.default", [[8, 128, 64], [8, 64, 256]], ["torch.bfloat16"] * 2)
    assert (bmm["m"], bmm["n"], bmm["k"], bmm["batch"], bmm["dtype"]) == (128, 256, 64, 8, "bf16")
    baddbmm = classify_op("aten::baddbmm", [[8, 128, 256], [8, 128, 64], [8, 64, 256], [], []],
                          ["c10::Half"] * 3 + ["Scalar", "Scalar"])
    assert (baddbmm["m"], baddbmm["n"], baddbmm["k"], baddbmm["batch"]) == (128, 256, 64, 8)
    # GPT-2 style linear on [batch, seq, hidden]: tokens fold into m; the weight is [out, in].
    linear = classify_op("aten::linear", [[4, 1024, 768], [3072, 768], [3072]], ["float"] * 3)
    assert (linear["m"], linear["n"], linear["k"], linear["batch"]) == (4096, 3072, 768, 1)
    folded = classify_op("aten::matmul", [[4, 128, 512], [512, 1024]], ["c10::Half"] * 2)
    assert (folded["m"], folded["n"], folded["k"], folded["batch"]) == (512, 1024, 512, 1)
    batched = classify_op("aten::matmul", [[4, 8, 128, 64], [4, 8, 64, 128]], ["c10::Half"] * 2)
    assert (batched["m"], batched["n"], batched["k"], batched["batch"]) == (128, 128, 64, 32)
    broadcast = classify_op("aten::matmul", [[4, 1, 128, 64], [8, 64, 32]], ["float"] * 2)
    assert broadcast["batch"] == 32
    assert classify_op("aten::mm", [[4, 128, 64], [64, 32]], ["float"] * 2) is None  # mm needs 2-D inputs


def test_attention_layouts_causal_and_pass():
    sdpa = classify_op("aten::_scaled_dot_product_flash_attention",
                       [[2, 16, 1024, 64], [2, 4, 1024, 64], [2, 4, 1024, 64], [], [], []],
                       ["c10::BFloat16"] * 3 + ["Double", "Bool", "Bool"], args=["", "", "", 0.0, "True", False])
    assert (sdpa["batch"], sdpa["heads_q"], sdpa["heads_kv"], sdpa["seq_q"], sdpa["head_dim"]) == (2, 16, 4, 1024, 64)
    assert sdpa["causal"] is True and sdpa["pass"] == "fwd"
    # The inner flash op takes [batch, seq, heads, head_dim].
    inner = classify_op("aten::_flash_attention_forward", [[2, 1024, 16, 64], [2, 512, 4, 64], [2, 512, 4, 64]],
                        ["c10::Half"] * 3)
    assert (inner["seq_q"], inner["seq_kv"], inner["heads_q"], inner["heads_kv"]) == (1024, 512, 16, 4)
    assert inner["causal"] is False
    bwd = classify_op("aten._scaled_dot_product_efficient_attention_backward.default",
                      [[2, 16, 1024, 64]] * 4, ["torch.float16"] * 4)
    assert bwd["pass"] == "bwd" and bwd["heads_q"] == 16


def test_norm_rows_and_cols():
    ln = classify_op("aten::native_layer_norm", [[32, 128, 768], [], [768], [768], []],
                     ["float", "", "float", "float", "Double"])
    assert (ln["op"], ln["rows"], ln["cols"], ln["pass"]) == ("layer_norm", 4096, 768, "fwd")
    # From the HTA control trace: native_layer_norm_backward with input [1024, 512], weight [512].
    lnb = classify_op("aten::native_layer_norm_backward",
                      [[1024, 512], [1024, 512], [], [1024, 1], [1024, 1], [512], [512], []],
                      ["float", "float", "", "float", "float", "float", "float", ""])
    assert (lnb["rows"], lnb["cols"], lnb["pass"]) == (1024, 512, "bwd")
    softmax = classify_op("aten::_softmax", [[8, 12, 128, 128], [], []], ["c10::Half", "Int", "Bool"])
    assert (softmax["rows"], softmax["cols"]) == (8 * 12 * 128, 128)
    softmax_dim1 = classify_op("aten::_softmax", [[8, 12, 128, 128], [], []], ["c10::Half", "Int", "Bool"],
                               args=["", 1, False])
    assert (softmax_dim1["rows"], softmax_dim1["cols"]) == (8 * 128 * 128, 12)
    nll = classify_op("aten::nll_loss_forward", [[32, 1000], [32], [], [], []], ["float", "long", "", "Int", "Int"])
    assert (nll["op"], nll["rows"], nll["cols"]) == ("cross_entropy", 32, 1000)
    total = classify_op("aten::sum", [[8, 4096], [], [], []], ["float", "", "Scalar", ""])
    assert (total["rows"], total["cols"]) == (1, 8 * 4096)
    bias_grad = classify_op("aten::sum", [[8, 4096], [], [], []], ["float", "", "Scalar", ""],
                            args=[None, "[0]", False, None])
    assert (bias_grad["rows"], bias_grad["cols"]) == (4096, 8)


def test_elementwise_numel_is_the_largest_operand_or_broadcast_output():
    assert classify_op("aten::add", [[32, 1, 128], [32, 128, 128]], ["float"] * 2)["numel"] == 32 * 128 * 128
    assert classify_op("aten::add", [[32, 1, 128], [1, 64, 1]], ["float"] * 2)["numel"] == 32 * 64 * 128
    mul = classify_op("aten::mul", [[512, 64], [], [512, 64]], ["float", "double", "float"])
    assert (mul["op"], mul["numel"], mul["dtype"]) == ("mul", 512 * 64, "fp32")
    # One tensor operand: the scalar kernel (NeuSight's "addu"/"mulu"), whether the scalar is a Python number or a
    # 0-dim tensor.
    assert classify_op("aten::mul", [[512, 64], []], ["float", "Scalar"])["op"] == "mul_scalar"
    assert classify_op("aten::add", [[512, 64], [], []], ["c10::Half", "double", "Scalar"])["op"] == "add_scalar"
    assert classify_op("aten::_to_copy", [[10, 10]], ["c10::BFloat16"])["op"] == "cast"
    assert classify_op("aten.copy_.default", [[10, 10], [10, 10]], ["torch.float16"] * 2)["op"] == "copy"
    assert classify_op("aten::native_dropout", [[64, 128], [], []], ["c10::Half", "Double", "Bool"])["op"] == \
        "dropout"
    assert classify_op("aten::zero_", [[7, 9]], ["long"]) == {"family": "elementwise", "dtype": "int64",
                                                              "op": "fill", "numel": 63}


def test_a_binary_op_over_a_broadcast_operand_keeps_the_two_operand_kind():
    """A broadcast operand (a row statistic, an attention mask over the heads) is torch's non-vectorised
    broadcasting kernel, slower than the one-tensor kernel: timed as that, the unseen NeuSight labels got worse on
    every GPU (reads_one_stream). Only a one-element operand makes the one-tensor form."""
    x, rms = [16, 64, 256, 256], [16, 1, 256, 256]
    assert classify_op("aten.div.Tensor", [x, rms], ["torch.float32"] * 2)["op"] == "div"
    assert classify_op("aten::add", [[8, 16, 512, 512], [8, 1, 1, 512]], ["float"] * 2)["op"] == "add"
    assert classify_op("aten.div.Tensor", [x, []], ["torch.float32"] * 2)["op"] == "div_scalar"
    assert classify_op("aten.div.Tensor", [x, [1]], ["torch.float32"] * 2)["op"] == "div_scalar"


def test_optimizer_and_collectives():
    foreach = classify_op("aten::_foreach_addcdiv_", [[[10, 10], [5]], [[10, 10], [5]], [[10, 10], [5]], []],
                          [["torch.float32"] * 2] * 3 + ["Scalar"])
    assert foreach == {"family": "optimizer", "dtype": "fp32", "op": "foreach_addcdiv", "params": 105}
    fused = classify_op("aten._fused_adamw_.default", [[[1000], [24]]] * 5, [["torch.bfloat16"] * 2] * 5)
    assert (fused["op"], fused["params"]) == ("adamw_fused", 1024)
    ar = classify_op("c10d::allreduce_", [[[1024, 1024]], [], []], [["c10::Half"], "", ""], ranks=8,
                     ranks_per_node=8)
    assert (ar["op"], ar["bytes"], ar["ranks"]) == ("all_reduce", 2 * 1024 * 1024, 8)
    # _allgather_base_(output, input): bytes per rank is the larger buffer, the gathered output.
    ag = classify_op("c10d::_allgather_base_", [[8192], [1024], []], ["float", "float", ""], ranks=8)
    assert (ag["op"], ag["bytes"]) == ("all_gather", 8192 * 4)
    functional = classify_op("_c10d_functional::all_gather_into_tensor", [[1024], [], []],
                             ["c10::BFloat16", "Int", ""], ranks=8)
    assert functional["bytes"] == 1024 * 2 * 8
    assert classify_op("_c10d_functional.all_reduce.default", [[4096], [], []], ["torch.float32", "", ""])[
        "ranks"] is None


@pytest.mark.parametrize("op", ["aten::convolution", "aten::cudnn_convolution", "aten::view", "aten::index_select",
                                "CompiledFunction", "fbgemm::permute_2D_sparse_data", "aten::unknown_op"])
def test_unknown_ops_give_none(op):
    assert classify_op(op, [[32, 3, 224, 224], [64, 3, 7, 7]], ["float", "float"]) is None


def test_dtype_names():
    assert canonical_dtype("c10::Half") == canonical_dtype("torch.float16") == canonical_dtype("float16") == "fp16"
    assert canonical_dtype("c10::BFloat16") == canonical_dtype("bfloat16") == "bf16"
    assert canonical_dtype("float") == canonical_dtype("torch.float32") == "fp32"
    assert canonical_dtype("Double") is None  # Kineto's tag for a Python float scalar, not a tensor
    assert canonical_dtype("int") is None  # int32 has no exact family dtype...
    assert tensor_dtype("int") == "fp32" and tensor_dtype("Scalar") is None  # ...and is timed as fp32
    assert op_base_name("aten::_foreach_mul_") == ("aten", "_foreach_mul")
    assert op_base_name("nccl:all_reduce") == ("nccl", "all_reduce")


@pytest.mark.parametrize("name, expected", [
    ("ampere_sgemm_128x64_nn", {"family": "gemm", "dtype": "fp32"}),
    ("volta_h884gemm_64x128_ldg8_nn", {"family": "gemm", "dtype": "fp16"}),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", {"family": "gemm", "dtype": "bf16"}),
    ("nccl:all_reduce", {"family": "collective", "op": "all_reduce"}),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", {"family": "collective", "op": "all_reduce", "dtype": "fp32"}),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     {"family": "collective", "op": "broadcast", "dtype": "int8"}),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     {"family": "elementwise", "op": "add", "dtype": "fp32"}),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64> >",
     {"family": "attention", "pass": "bwd"}),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(float const*)",
     {"family": "norm", "op": "layer_norm", "pass": "bwd", "dtype": "fp32"}),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float)", None),
])
def test_kernel_name_fallback(name, expected):
    assert classify_kernel_name(name) == expected


# One case per naming scheme a CUDA / library version launches (issue 32): the family, and what else the name shows.
@pytest.mark.parametrize("name, expected", [
    # cuBLAS 13.x nvjet (SM-tagged) and cuBLAS 12.8's untagged ones; the operand-type tag gives the dtype
    ("nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT", {"family": "gemm", "dtype": "bf16"}),
    ("nvjet_sm100_hsh_64x8_64x16_1x1_h_bz_splitK_NNT", {"family": "gemm", "dtype": "fp16"}),
    ("nvjet_tst_256x128_64x4_2x4_v_bz_coopA_NNT", {"family": "gemm", "dtype": "bf16"}),
    ("nvjet_hss_64x8_64x16_1x1_v_bz_splitK_NNT", {"family": "gemm", "dtype": "fp16"}),
    ("nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT", {"family": "gemm", "dtype": "fp8_e4m3"}),
    # cuBLAS's xmma, CUTLASS 2 (WMMA, mma.sync) and CUTLASS 3 kernels; a named bf16 / fp16 wins over the instruction
    # shape TF32 shares
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__"
     "5x_cublas", {"family": "gemm", "dtype": "bf16"}),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_"
     "segment_k_off_kernel__5x_cublas", {"family": "gemm", "dtype": "tf32"}),
    # cuBLAS 13's fp32 GEMM on Hopper runs on the CUDA cores
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize256x64x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
     "split_k_kernel__5x_cublas", {"family": "gemm", "dtype": "fp32"}),
    ("cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_64x2_nn_align2", {"family": "gemm", "dtype": "fp16"}),
    ("cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2", {"family": "gemm", "dtype": "bf16"}),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "256x64_16x4_nn_align4::Params)", {"family": "gemm", "dtype": "tf32"}),
    ("cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_void_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_"
     "pingpong_epi_tma", {"family": "gemm", "dtype": "bf16"}),
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", {"family": "gemm", "dtype": "bf16"}),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", {"family": "gemm", "dtype": "fp16"}),
    ("maxwell_sgemm_128x64_nt", {"family": "gemm", "dtype": "fp32"}),
    ("void gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false, cublasGemvParams<"
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float> >", {"family": "gemm", "dtype": "fp32"}),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>",
     {"family": "gemm", "dtype": "fp32"}),  # part of the GEMM call (the capture makes it the op's op_part)
    # cuDNN SDPA, FlashAttention 2 (torch's and the package's), FlashAttention 3, memory-efficient attention
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     {"family": "attention", "pass": "fwd"}),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)", {"family": "attention", "pass": "fwd"}),
    ("void flash::flash_fwd_kernel<flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t> >, "
     "true>(flash::Flash_fwd_params)", {"family": "attention", "pass": "fwd"}),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
     "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, 256, cutlass::bfloat16_t, float, cutlass::arch::Sm90> > > >"
     "(flash::Params)", {"family": "attention", "pass": "fwd"}),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90"
     "<2, 2> > > >(flash::Params)", {"family": "attention", "pass": "bwd"}),
    ("void cutlass::device_kernel<flash::FlashAttnBwdPostprocessConvertdQ<cute::tuple<cute::C<128> > > >"
     "(flash::Params)", {"family": "attention", "pass": "bwd"}),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)", {"family": "attention", "pass": "fwd"}),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, "
     "cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)", {"family": "attention", "pass": "bwd"}),
    # Inductor: pointwise, reductions (the op classify_triton_kernel times them as, or the norm the name shows),
    # templates and a template's autotuning candidates
    ("triton_poi_fused__to_copy_convert_element_type_1", {"family": "elementwise", "op": "copy"}),
    ("triton_poi_fused_convolution_relu_2", {"family": "elementwise", "op": "relu"}),  # a convolution's epilogue
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", {"family": "norm", "op": "rms_norm", "pass": "fwd"}),
    ("triton_per_fused__softmax_amax_exp_sub_sum_3", {"family": "norm", "op": "softmax", "pass": "fwd"}),
    ("triton_red_fused_sum_7", {"family": "norm", "op": "sum", "pass": "fwd"}),
    ("triton_per_fused_native_layer_norm_native_layer_norm_backward_4",
     {"family": "norm", "op": "layer_norm", "pass": "bwd"}),
    ("triton_tem_fused_mm_0", {"family": "gemm"}),
    ("triton_tem_fused_addmm_relu_1", {"family": "gemm"}),
    ("triton_mm", {"family": "gemm"}),
    ("triton_tem_fused_flex_attention_0", {"family": "attention", "pass": "fwd"}),
    ("triton_tem_fused_flex_attention_backward_1", {"family": "attention", "pass": "bwd"}),
    ("triton_rms_norm_kernel", {"family": "norm", "op": "rms_norm", "pass": "fwd"}),  # hand-written: by the rules
    # convolutions and a cuDNN call's layout transform: no family of their own (timed through the op)
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", None),
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc_unity_stride_"
     "align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc_unity_stride_align4::Params)", None),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::"
     "nchw2nhwc_params_t<float>, float const*, float*)", None),
    ("triton_tem_fused_convolution_0", None),
])
def test_each_libraries_naming_scheme_gets_its_family(name, expected):
    assert classify_kernel_name(name) == expected


@pytest.mark.parametrize("name, convolution", [
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", True),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1"
     "_g1_tensor16x8x8_execute_split_k_kernel_cudnn_train", True),
    ("cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4", True),
    ("cutlass3x_sm100_tensorop_s256x128x8tf32implicit_gemm_strided_dgrad_f32_f32_f32_void_f32_f32_256x128x32_"
     "16w16h1d1n_dyn_cga_ndhwc_ndhwc_ndhwc_align4_2sm", True),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, true, true>(int, int, int)", True),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", True),
    ("ampere_gcgemm_64x64_nt", True),  # FFT convolution's complex GEMM
    ("void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int)", True),
    ("triton_tem_fused_convolution_0", True),
    ("triton_poi_fused_convolution_relu_2", False),
    ("triton_poi_fused__to_copy_convert_element_type_1", False),
    ("void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8> >(Flash_bwd_params)", False),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0", False),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>()", False),
    ("nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT", False),
])
def test_convolution_kernels_are_told_apart_in_every_librarys_spelling(name, convolution):
    assert is_convolution_kernel(name) is convolution


def test_real_trace_ops_classify(shared_data: Path):
    from stepcast.profiling.kineto import read_trace

    kernels = read_trace(shared_data / "hta/tests/data/trace_diff/control/control.json.gz").kernels()
    with_shapes = kernels[kernels["op_input_dims"].notna() & (kernels["cat"] == "kernel")]
    rows = [classify_op(r.op_name, r.op_input_dims, r.op_input_types, r.name) for r in with_shapes.itertuples()]
    classified = [(r, row) for r, row in zip(with_shapes.itertuples(), rows) if row]
    assert len(classified) / len(rows) > 0.8
    for r, row in classified:
        if r.op_name == "aten::mm":
            (m, k), (k2, n) = r.op_input_dims
            assert (row["m"], row["n"], row["k"]) == (m, n, k) and k == k2
        # The kernel name's family agrees with the op's wherever the name is specific.
        by_name = classify_kernel_name(r.name)
        if by_name and by_name["family"] == "gemm":
            assert row["family"] == "gemm", (r.op_name, r.name)


def test_cudnn_attention_ops_and_kernels_are_attention_with_their_pass():
    """The emulated driver runs cuDNN, so SDPA takes its cuDNN backend on sm90 (aten._cudnn_attention_*)."""
    from stepcast.profiling.classify import classify_kernel_name, classify_op

    qkv = ((8, 16, 512, 64),) * 3
    fwd = classify_op("aten._cudnn_attention_forward.default", qkv + ((),) * 8, ("torch.bfloat16",) * 3 + ("",) * 8,
                      args=(None,) * 10 + (True,))
    assert fwd == {"family": "attention", "dtype": "bf16", "batch": 8, "heads_q": 16, "heads_kv": 16, "seq_q": 512,
                   "seq_kv": 512, "head_dim": 64, "causal": True, "pass": "fwd"}
    bwd = classify_op("aten._cudnn_attention_backward.default", ((8, 16, 512, 64),) * 5 + ((),) * 10,
                      ("torch.bfloat16",) * 5 + ("",) * 10, args=(None,) * 14 + (True,))
    assert bwd["pass"] == "bwd" and bwd["causal"]
    assert classify_kernel_name("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_"
                                "4x1x1_kernel0_0") == {"family": "attention", "pass": "bwd"}


# The launch and op context of Inductor kernels of examples/llama_fsdp2.py --compile (dim 1024, 2 x 2048 tokens):
# the graph's inputs, the activation first.
_GRAPH = ([[2, 2048, 1024], [2048, 64], [1024], [3584, 1024]], ["torch.bfloat16"] * 4)


def test_inductor_pointwise_kernel_covers_grid_times_threads_times_eight_elements():
    """triton_heuristics.pointwise gives a block 256 elements per warp: 14,336 blocks of 128 threads cover the
    14,680,064 elements (2 x 2048 x 3584) of the SwiGLU product."""
    from stepcast.profiling.classify import classify_triton_kernel

    row = classify_triton_kernel("triton_poi_fused__unsafe_view_mul_silu_4", [14336, 1, 1], [128, 1, 1], *_GRAPH)
    assert row == {"family": "elementwise", "dtype": "bf16", "op": "mul", "numel": 14680064}
    copy = classify_triton_kernel("triton_poi_fused_clone_transpose_view_7", [4, 1024, 1], [128, 1, 1], *_GRAPH)
    assert copy["op"] == "copy" and copy["numel"] == 4 * 1024 * 128 * 8


def test_inductor_reduction_kernel_is_a_norm_row_per_program_with_the_graph_width():
    from stepcast.profiling.classify import classify_triton_kernel

    fwd = classify_triton_kernel("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", [4096, 1, 1], [32, 1, 1],
                                 *_GRAPH)
    assert fwd == {"family": "norm", "dtype": "bf16", "op": "rms_norm", "rows": 4096, "cols": 1024, "pass": "fwd"}
    bwd = classify_triton_kernel("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", [4096, 1, 1], [32, 1, 1],
                                 *_GRAPH, backward=True)
    assert bwd["pass"] == "bwd"
    # a split reduction (2,048 programs of 128 threads) matches no graph input with >= 128 columns: threads x 8
    split = classify_triton_kernel("triton_red_fused_sum_view_8", [2048, 1, 1], [128, 1, 1], *_GRAPH)
    assert (split["op"], split["rows"], split["cols"]) == ("sum", 2048, 1024)


def test_non_inductor_or_gridless_kernels_get_no_triton_row():
    from stepcast.profiling.classify import classify_triton_kernel

    assert classify_triton_kernel("triton_tem_fused_mm_0", [64, 1, 1], [128, 1, 1], *_GRAPH) is None
    assert classify_triton_kernel("ampere_bf16_s16816gemm", [64, 1, 1], [128, 1, 1], *_GRAPH) is None
    assert classify_triton_kernel("triton_poi_fused_add_0", None, None, *_GRAPH) is None
    assert classify_triton_kernel("triton_poi_fused_add_0", [8, 1, 1], [128, 1, 1])["dtype"] == "fp32"


def test_inductor_kernel_with_recorded_bytes_is_a_copy_of_half_its_bytes_per_stream():
    """A launch that carries the bytes it read and wrote is timed from them, pointwise or reduction alike: the
    RMSNorm weight-gradient reduction (1,024 programs) reads seven activations, which its grid cannot show."""
    from stepcast.profiling.classify import classify_triton_kernel

    moved = 939_663_360 + 65_536
    row = classify_triton_kernel("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_sum_view_9", [1024, 1, 1],
                                 [64, 1, 1], *_GRAPH, bytes_moved=moved)
    assert row == {"family": "elementwise", "dtype": "bf16", "op": "copy", "numel": round(moved / 4)}
    gridded = classify_triton_kernel("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_sum_view_9", [1024, 1, 1],
                                     [64, 1, 1], *_GRAPH)
    assert gridded["family"] == "norm"  # without bytes (older traces): the grid, as before
    assert classify_triton_kernel("triton_tem_fused_mm_0", [64, 1, 1], [128, 1, 1], *_GRAPH, bytes_moved=moved) is None


# Op contexts as the driver capture records them (a ResNet-50 step: NCHW fp32 on cuDNN, channels-last bf16 on torch)
BN_SHAPES = [[8, 64, 32, 32], [64], [64], [64], [64], [], [], []]
BN_FP32 = ["torch.float32"] * 5 + [""] * 3
BN_ARGS = [None] * 5 + [True, 0.1, 1e-5]


def test_batch_norm_is_a_norm_row_per_channel_over_batch_and_pixels():
    fwd = classify_op("aten.cudnn_batch_norm.default", BN_SHAPES, BN_FP32,
                      "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args)",
                      args=BN_ARGS)
    assert fwd == {"family": "norm", "dtype": "fp32", "op": "layer_norm", "rows": 64, "cols": 8 * 32 * 32,
                   "pass": "fwd"}
    # torch's fused NCHW backward, native_batch_norm_backward(grad_out, input, ...): the input is the second argument
    bwd = classify_op("aten.native_batch_norm_backward.default",
                      [[8, 2048, 2, 2], [8, 2048, 2, 2], [2048], [2048], [2048], [2048], [2048], [], [], []],
                      ["torch.float16"] * 2 + ["torch.float32"] * 5 + [""] * 3,
                      "void at::native::batch_norm_backward_kernel<c10::Half, float, float, int>()")
    assert (bwd["op"], bwd["dtype"], bwd["rows"], bwd["cols"], bwd["pass"]) == ("layer_norm", "fp16", 2048, 32, "bwd")


BN_BWD_SHAPES = [[8, 64, 32, 32], [8, 64, 32, 32], [64], [64], [64], [64], [64], [], [], []]
BN_BWD_BF16 = ["torch.bfloat16"] * 2 + ["torch.float32"] * 5 + [""] * 3


def test_two_phase_batch_norm_kernels_are_each_timed_as_what_they_stream():
    # torch's channels-last kernels: a per-channel reduction, then an elementwise pass (the capture may put them in
    # different op calls, so neither may stand for the whole op)
    x = 8 * 64 * 32 * 32
    collect = classify_op("aten.native_batch_norm.default", BN_SHAPES, ["torch.bfloat16"] + BN_FP32[1:],
                          "void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, "
                          "c10::BFloat16, float, 4>()", args=BN_ARGS)
    assert collect == {"family": "norm", "dtype": "bf16", "op": "sum", "rows": 64, "cols": x // 64, "pass": "fwd"}
    transform = classify_op("aten.native_batch_norm.default", BN_SHAPES, ["torch.bfloat16"] + BN_FP32[1:],
                            "void at::native::batch_norm_transform_input_channels_last_kernel<c10::BFloat16, float, "
                            "float, 4>()", args=BN_ARGS)
    assert transform == {"family": "elementwise", "dtype": "bf16", "op": "copy", "numel": x}  # x read, y written
    reduce = classify_op("aten.native_batch_norm_backward.default", BN_BWD_SHAPES, BN_BWD_BF16,
                         "void at::native::batch_norm_backward_reduce_channels_last_kernel<4, c10::BFloat16, float, "
                         "float>()")
    assert (reduce["op"], reduce["rows"], reduce["cols"]) == ("sum", 64, 2 * x // 64)  # dy and x
    elemt = classify_op("aten.native_batch_norm_backward.default", BN_BWD_SHAPES, BN_BWD_BF16,
                        "void at::native::batch_norm_backward_elemt_channels_last_kernel<4, c10::BFloat16, float, "
                        "float>()")
    assert (elemt["family"], elemt["numel"] * 2) == ("elementwise", 3 * x)  # dy and x read, dx written


def test_batch_norm_statistics_update_is_small_and_inference_is_a_memory_sweep():
    update = classify_op("aten.native_batch_norm.default", BN_SHAPES, ["torch.bfloat16"] + BN_FP32[1:],
                         "void at::native::(anonymous namespace)::unrolled_elementwise_kernel_for_multi_outputs<3, "
                         "at::native::(anonymous namespace)::batch_norm_update_stats_and_invert(at::Tensor const&)"
                         "::{lambda(float, float, float, float)#1}, std::array<char*, 7ul>>()", args=BN_ARGS)
    # norm, as the reduction it finishes (in the same op call it is that kernel's op_part); fp32 running statistics
    assert (update["family"], update["dtype"]) == ("norm", "fp32")
    assert update["rows"] * update["cols"] < 64 * 8  # a few per-channel vectors, not the activations
    inference = classify_op("aten._native_batch_norm_legit_no_training.default", BN_SHAPES[:7], BN_FP32[:7])
    assert inference == {"family": "elementwise", "dtype": "fp32", "op": "copy", "numel": 8 * 64 * 32 * 32}


def test_an_instance_norms_inverse_std_kernel_is_a_per_channel_vector_not_a_sweep_of_the_input():
    """Without running statistics torch's batch norm (an instance norm's) turns the variance into the inverse std in
    a pointwise kernel over the channels, which was timed as a copy of the whole input (KernelBench's InstanceNorm
    40-97 % too slow on five GPUs)."""
    invstd = classify_op("aten.native_batch_norm.default", BN_SHAPES, ["torch.bfloat16"] + BN_FP32[1:],
                         "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
                         "batch_norm_calc_invstd(at::Tensor const&, at::Tensor const&, double)::{lambda()#1}::"
                         "operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
                         "std::array<char*, 2ul> >(int, T2, T3)", args=BN_ARGS)
    assert invstd["family"] == "norm" and invstd["rows"] * invstd["cols"] < 64 * 8


def test_max_pool_is_a_sweep_of_its_input_output_and_indices():
    x, y = 8 * 64 * 32 * 32, 8 * 64 * 16 * 16  # 3x3 window, stride 2, padding 1: 32 -> 16
    for dtype, width in (("torch.float32", 4), ("torch.bfloat16", 2)):
        fwd = classify_op("aten.max_pool2d_with_indices.default", [[8, 64, 32, 32], [], [], [], [], []],
                          [dtype, "", "", "", "", ""], "void at::native::max_pool_forward_nchw<float, int>()",
                          args=[None, [3, 3], [2, 2], [1, 1], [1, 1], False])
        moved = (x + y) * width + y * 8  # x read, y and its int64 indices written
        assert (fwd["family"], fwd["op"]) == ("elementwise", "copy")
        assert fwd["numel"] == moved / width / 2
        bwd = classify_op("aten.max_pool2d_with_indices_backward.default",
                          [[8, 64, 16, 16], [8, 64, 32, 32], [], [], [], [], [], [8, 64, 16, 16]],
                          [dtype, dtype, "", "", "", "", "", "torch.int64"],
                          args=[None, None, [3, 3], [2, 2], [1, 1], [1, 1], False, None])
        assert bwd["numel"] == moved / width / 2  # dy and indices read, dx written
    # a forward without its window arguments (Kineto before Concrete Inputs) has no output size to time
    assert classify_op("aten::max_pool2d_with_indices", [[8, 64, 32, 32], [], [], [], [], []],
                       ["float", "", "", "", "", ""]) is None


def test_pool_output_follows_ceil_mode_and_adaptive_size():
    ceil = classify_op("aten::avg_pool2d", [[1, 1, 5, 5]] + [[]] * 6, ["float"] + [""] * 6,
                       args=[None, [2, 2], [2, 2], [0, 0], True, True, None])
    assert ceil["numel"] == (25 + 9) / 2  # ceil_mode: 5 -> 3
    adaptive = classify_op("aten._adaptive_avg_pool2d.default", [[2, 8, 7, 7], []], ["torch.float16", ""],
                           args=[None, [1, 1]])
    assert adaptive["numel"] == (2 * 8 * 49 + 2 * 8) / 2


def test_random_fills_are_sweeps_of_what_they_write():
    randn = classify_op("aten.normal_.default", [[8, 3, 64, 64], [], [], []], ["torch.float32", "", "", ""],
                        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>")
    assert randn == {"family": "elementwise", "dtype": "fp32", "op": "copy", "numel": 8 * 3 * 64 * 64 // 2}
    randint = classify_op("aten.random_.from", [[8], [], [], []], ["torch.int64", "", "", ""])
    assert (randint["dtype"], randint["numel"]) == ("int64", 4)
    masked = classify_op("aten::bernoulli_", [[1024], [1024], []], ["float", "float", ""])
    assert masked["numel"] == 1024  # probabilities read, the draw written


@pytest.mark.parametrize("kernel", [
    "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)",
    "void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, c10::BFloat16, float, 4>()",
    "void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16, int>(c10::BFloat16 const*, int)",
])
def test_kernel_names_of_the_new_rows_do_not_claim_another_family(kernel):
    # the capture drops an op's row for a kernel whose name shows another family (a helper kernel of the op)
    assert classify_kernel_name(kernel) is None


@pytest.mark.parametrize("op, stand_in", [
    ("aten::cudnn_batch_norm", True), ("aten.native_batch_norm_backward.default", True),
    ("aten::max_pool2d_with_indices_backward", True), ("aten.normal_.default", True),
    ("aten::cudnn_convolution", True), ("aten::native_layer_norm", False), ("aten::add", False),
    ("aten::mm", False),
])
def test_rows_that_stand_in_for_another_kernel_are_named_for_importers(op, stand_in):
    assert is_stand_in_op(op) is stand_in


GN_SHAPES = [[16, 64, 256, 256], [64], [64], [], [], [], [], []]
GN_DTYPES = ["float", "float", "float", "", "", "", "", ""]
GN_ARGS = [None, None, None, 16, 64, 65536, 8, 1e-5]  # N, C, HxW, groups, eps


def test_group_norm_kernels_are_each_timed_as_what_they_stream():
    # before, none of torch's group-norm kernels had a row: each took the launch floor (6 us for 3.9 ms on a T4)
    x = 16 * 64 * 256 * 256
    moments = classify_op("aten.native_group_norm.default", GN_SHAPES, GN_DTYPES,
                          "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>()", args=GN_ARGS)
    assert moments == {"family": "norm", "dtype": "fp32", "op": "sum", "rows": 16 * 8, "cols": x // (16 * 8),
                       "pass": "fwd"}
    params = classify_op("aten.native_group_norm.default", GN_SHAPES, GN_DTYPES,
                         "void at::native::(anonymous namespace)::ComputeFusedParamsCUDAKernel<float>()", args=GN_ARGS)
    assert params["family"] == "elementwise" and params["numel"] * 2 == 4 * 16 * 64  # per-channel vectors only
    apply = classify_op("aten.native_group_norm.default", GN_SHAPES, GN_DTYPES,
                        "void at::native::elementwise_kernel<128, 2>()", args=GN_ARGS)
    assert apply == {"family": "elementwise", "dtype": "fp32", "op": "copy", "numel": x}  # x read, y written
    whole = classify_op("aten::native_group_norm", GN_SHAPES, GN_DTYPES, args=GN_ARGS)
    assert (whole["op"], whole["rows"], whole["cols"]) == ("layer_norm", 16 * 8, x // (16 * 8))
    assert is_stand_in_op("aten::native_group_norm")  # a profiler's group-norm time is no layer-norm sample


@pytest.mark.parametrize(("op", "streams"), [("aten.cumsum.default", 2), ("aten.flip.default", 2),
                                             ("aten.cummax.default", 4)])
def test_scans_and_reorderings_are_sweeps_of_their_input_and_output(op, streams):
    row = classify_op(op, [[128, 4000], []], ["float", ""], "void at::native::tensor_kernel_scan_innermost_dim<float>")
    assert row == {"family": "elementwise", "dtype": "fp32", "op": "copy", "numel": streams * 128 * 4000 // 2}
    assert is_stand_in_op(op)
