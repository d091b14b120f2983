"""profiling.classify: convolution op calls (cuDNN, torch's depthwise kernels) -> implicit-GEMM or bytes rows."""
from __future__ import annotations

import math

import pytest

from stepcast.profiling.classify import classify_op, conv_parts, winograd_parts

F32 = "torch.float32"
# cudnn_convolution(input, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
FWD_SHAPES = [[8, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], [], [], []]
FWD_DTYPES = [F32, F32] + [""] * 7


def fwd_args(pad=(1, 1), stride=(1, 1), dil=(1, 1), groups=1, tf32=True):
    return [None, None, list(pad), list(stride), list(dil), groups, False, False, tf32]


def bwd(x, w, y, *, stride=(1, 1), pad=(0, 0), groups=1, transposed=False, mask=None, kernel=None, dtype=F32):
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask)."""
    args = [None, None, None, [w[0]], list(stride), list(pad), [1, 1], transposed, [0, 0], groups, mask]
    return classify_op("aten.convolution_backward.default", [y, x, w] + [[]] * 8, [dtype] * 3 + [""] * 8,
                       kernel_name=kernel, args=args)


def flops(row):
    return 2 * row["m"] * row["n"] * row["k"] * row["batch"]


def test_forward_is_the_implicit_gemm_of_its_output_pixels():
    row = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args())
    assert row == {"family": "gemm", "dtype": "tf32", "m": 8 * 56 * 56, "n": 128, "k": 64 * 9, "batch": 1}


def test_stride_padding_and_dilation_set_the_output_size():
    row = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES,
                      args=fwd_args(pad=(2, 0), stride=(2, 3), dil=(2, 1)))
    ho, wo = (56 + 4 - 2 * 2 - 1) // 2 + 1, (56 - 2 - 1) // 3 + 1
    assert row["m"] == 8 * ho * wo


def test_kineto_text_arguments_are_read():
    row = classify_op("aten::cudnn_convolution", [[8, 64, 56, 56], [128, 64, 3, 3]] + [[]] * 7,
                      ["float", "float", "GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"],
                      args=["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "False"])
    assert (row["dtype"], row["m"]) == ("fp32", 8 * 28 * 28)


def test_tf32_follows_allow_tf32():
    on = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args(tf32=True))
    off = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args(tf32=False))
    half = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, ["torch.bfloat16"] * 2 + [""] * 7,
                       args=fwd_args())
    assert (on["dtype"], off["dtype"], half["dtype"]) == ("tf32", "fp32", "bf16")


def test_groups_are_the_batch():
    shapes = [[8, 64, 28, 28], [128, 16, 3, 3]] + [[]] * 7
    row = classify_op("aten.cudnn_convolution.default", shapes, FWD_DTYPES, args=fwd_args(groups=4))
    assert (row["n"], row["k"], row["batch"]) == (32, 16 * 9, 4)


def test_forward_without_its_arguments_gives_none():
    assert classify_op("aten::cudnn_convolution", FWD_SHAPES, FWD_DTYPES) is None


def test_backward_kernels_time_their_own_pass():
    x, w, y = [8, 64, 56, 56], [128, 64, 3, 3], [8, 128, 28, 28]
    dgrad = bwd(x, w, y, stride=(2, 2), pad=(1, 1), kernel="sm80_xmma_dgrad_implicit_gemm_tf32f32")
    wgrad = bwd(x, w, y, stride=(2, 2), pad=(1, 1), kernel="sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32")
    transform = bwd(x, w, y, stride=(2, 2), pad=(1, 1), kernel="void cudnn::engines_precompiled::nchwToNhwcKernel")
    assert (dgrad["m"], dgrad["n"]) == (8 * 56 * 56, 64)
    assert (wgrad["m"], wgrad["n"], wgrad["k"]) == (128, 64 * 9, 8 * 28 * 28)
    assert transform == wgrad  # cuDNN's NHWC wgrad kernels follow a layout transform in their call
    fwd = classify_op("aten.cudnn_convolution.default", [x, w] + [[]] * 7, FWD_DTYPES,
                      args=fwd_args(stride=(2, 2)))
    assert flops(dgrad) == flops(wgrad) == flops(fwd)  # a strided dgrad skips the zero taps


def test_backward_as_a_whole_is_both_passes():
    x, w, y = [8, 64, 56, 56], [128, 64, 3, 3], [8, 128, 56, 56]
    whole = bwd(x, w, y, pad=(1, 1))
    one = bwd(x, w, y, pad=(1, 1), kernel="sm80_xmma_dgrad_implicit_gemm")
    assert whole["batch"] == 2 * one["batch"] and flops(whole) == 2 * flops(one)


def test_output_mask_drops_the_input_gradient():
    x, w, y = [8, 3, 224, 224], [64, 3, 7, 7], [8, 64, 112, 112]
    row = bwd(x, w, y, stride=(2, 2), pad=(3, 3), mask=[False, True, False], kernel="sm80_xmma_dgrad_implicit")
    assert (row["m"], row["n"], row["k"]) == (64, 3 * 49, 8 * 112 * 112)
    assert bwd(x, w, y, mask=[False, False, True]) is None


def test_transposed_forward_is_the_dgrad_of_the_plain_convolution():
    # conv_transpose2d: input [8, 32, 15, 15], weight [32 (in), 8 (out), 4, 4], stride 2 -> output [8, 8, 32, 32]
    # cudnn_convolution_transpose(input, weight, padding, output_padding, stride, dilation, groups, ...)
    shapes = [[8, 32, 15, 15], [32, 8, 4, 4]] + [[]] * 8
    row = classify_op("aten.cudnn_convolution_transpose.default", shapes, [F32] * 2 + [""] * 8,
                      args=[None, None, [0, 0], [0, 0], [2, 2], [1, 1], 1, False, False, True])
    plain = bwd([8, 8, 32, 32], [32, 8, 4, 4], [8, 32, 15, 15], stride=(2, 2), kernel="xmma_dgrad")
    assert row == plain


def test_transposed_backward_swaps_fprop_and_dgrad():
    x, w, y = [8, 32, 15, 15], [32, 8, 4, 4], [8, 8, 32, 32]
    grad_input = bwd(x, w, y, stride=(2, 2), transposed=True, kernel="sm80_xmma_fprop_implicit_gemm")
    assert (grad_input["m"], grad_input["n"], grad_input["k"]) == (8 * 15 * 15, 32, 8 * 16)


def test_depthwise_is_timed_by_its_bytes():
    """torch's kernel reads every tap of every output from memory, cuDNN's each tensor once."""
    native = classify_op("aten._conv_depthwise2d.default", [[8, 32, 64, 64], [32, 1, 3, 3], [], [32], [], [], []],
                         [F32, F32, "", F32, "", "", ""], args=[None, None, [3, 3], None, [1, 1], [1, 1], [1, 1]])
    cudnn = classify_op("aten.cudnn_convolution.default", [[8, 32, 64, 64], [32, 1, 3, 3]] + [[]] * 7, FWD_DTYPES,
                        args=[None, None, [1, 1], [1, 1], [1, 1], 32, False, False, True])
    out = 8 * 32 * 64 * 64
    assert native == {"family": "elementwise", "dtype": "fp32", "op": "copy", "numel": round((out * 10 + 288) / 2)}
    assert cudnn["numel"] == round((2 * out + 288) / 2)
    backward = bwd([8, 32, 64, 64], [32, 1, 3, 3], [8, 32, 64, 64], pad=(1, 1), groups=32)
    assert backward["numel"] == 2 * native["numel"]  # both passes, torch's kernels


def test_native_im2col_kernels_get_no_row_but_cudnns_own_do():
    args = fwd_args()
    assert classify_op("aten.convolution_backward.default", [[8, 128, 56, 56], [8, 64, 56, 56], [128, 64, 3, 3]]
                       + [[]] * 8, [F32] * 3 + [""] * 8, kernel_name="void at::native::im2col_kernel<float>",
                       args=[None] * 11) is None
    assert classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES,
                       kernel_name="void cudnn::cnn::im2col4d_kernel<float, long>", args=args) is not None


def test_winograd_kernels_do_fewer_multiplications():
    plain = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args())
    nonfused = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args(),
                           kernel_name="void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>")
    fused = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args(),
                        kernel_name="void cudnn::winograd::generateWinogradTilesKernel<0, float, float>")
    assert nonfused["batch"] == 36 and fused["batch"] == 16
    assert flops(nonfused) == pytest.approx(flops(plain) / 4, rel=0.01)
    assert flops(fused) == pytest.approx(flops(plain) / 2.25, rel=0.01)
    strided = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, args=fwd_args(stride=(2, 2)),
                          kernel_name="void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>")
    assert strided["batch"] == 1  # cuDNN's Winograd is stride 1 only: the name alone does not change the row


def test_pass_geometry_of_a_3d_convolution():
    (m, n, k, b), = conv_parts((2, 4, 8, 8, 8), (16, 4, 3, 3, 3), (2, 16, 6, 6, 6), 1, (1, 1, 1), False, ["fprop"])
    assert (m, n, k, b) == (2 * 216, 16, 4 * 27, 1)
    assert winograd_parts((2, 4, 8, 8, 8), (16, 4, 3, 3, 3), (2, 16, 6, 6, 6), 1, False, ["fprop"], 4) is None
    assert math.prod(conv_parts((2, 4, 8, 8, 8), (16, 4, 3, 3, 3), (2, 16, 6, 6, 6), 1, (1, 1, 1), False,
                                ["wgrad"])[0]) == m * n * k


def test_a_stride_1_transposed_convolution_can_run_winograd():
    shapes = [[8, 32, 16, 16], [32, 64, 3, 3]] + [[]] * 8
    args = [None, None, [0, 0], [0, 0], [1, 1], [1, 1], 1, False, False, True]
    plain = classify_op("aten.cudnn_convolution_transpose.default", shapes, [F32] * 2 + [""] * 8, args=args)
    winograd = classify_op("aten.cudnn_convolution_transpose.default", shapes, [F32] * 2 + [""] * 8, args=args,
                           kernel_name="void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>")
    assert (winograd["m"], winograd["n"], winograd["k"], winograd["batch"]) == (8 * 5 * 5, 64, 32, 36)
    assert flops(plain) > 3 * flops(winograd)


@pytest.mark.parametrize("kernel, dtype", [
    ("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc", "tf32"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>", "tf32"),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8", "fp32"),
    ("void implicit_convolve_sgemm<float, float, int, 1024, 5, 5, 3, 3, 3, 1, false>", "fp32"),
    ("_5x_cudnn_volta_scudnn_128x64_relu_small_nn_v1", "fp32"),
])
def test_tf32_needs_a_tensor_core_kernel(kernel, dtype):
    row = classify_op("aten.cudnn_convolution.default", FWD_SHAPES, FWD_DTYPES, kernel_name=kernel, args=fwd_args())
    assert row["dtype"] == dtype
