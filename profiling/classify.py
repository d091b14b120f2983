"""Map an aten op with its input shapes and dtypes to a kernel row of ``profiling.families`` (no hardware).

Two callers: the emulator (every launch at capture time, through a TorchDispatchMode: names like
``aten.addmm.default``, dtypes like ``torch.float16``) and the Kineto importer (names like ``aten::addmm``, dtypes
like ``c10::Half``, shapes from ``Input Dims``). Both give one shape per positional argument; a non-tensor argument
has shape ``[]`` and a dtype such as ``""``, ``"Scalar"``, ``"Int"`` or ``None``; a tensor list is a list of shapes.

``classify_op(...)`` returns ``{"family", "dtype", <key columns>}`` or None for ops outside every family (views,
indexing, ...). Where the shapes alone cannot tell (the reduced dims of ``sum``, ``is_causal``), the
optional ``args`` (values aligned with ``shapes``, like Kineto's "Concrete Inputs") decide; without them:
softmax-like ops reduce the last dim, ``sum``/``mean`` reduce everything, attention is not causal.

Choices a reader should know:
- gemm shapes are logical (PyTorch reports sizes, not strides), so transposed operands need no special case;
  ``matmul``/``linear`` with a 2-D weight fold the leading dims into m; ``bmm``/``baddbmm``/batched ``matmul`` give
  ``batch``. fp32 GEMMs whose kernel name shows TF32 tensor cores (``s1688gemm``, ``tf32``) are ``tf32``.
- ``nll_loss`` (forward and backward) is recorded as norm ``cross_entropy`` with rows = N, cols = C: the family's
  vocabulary has no separate loss entry and the op is a row-wise reduction over the logits.
- dtypes the families do not list are timed as the listed dtype of the same width: int32 as fp32, int16 as fp16,
  uint8 as int8 (``canonical_dtype`` gives only exact names and None for these).
- ``add``/``sub``/``mul``/``div``/``pow`` with a single tensor operand (the other a Python scalar or a one-element
  tensor) are ``add_scalar`` etc.: a different kernel that reads one stream instead of two (NeuSight's ``addu``;
  :func:`reads_one_stream`, which says why a broadcast operand keeps the two-operand kind).
- foreach ops keep their name (``foreach_add``, ``foreach_addcdiv``...): one captured launch is one of these, not a
  whole optimizer step; fused optimizers are ``adamw_fused``, ``adam_fused``, ``sgd_fused``.
- Inductor's Triton kernels (``classify_triton_kernel``) have no aten op of their own: a memory-bound elementwise
  ``copy`` of the bytes their launch read and wrote (recorded at capture from the launcher's tensor arguments);
  for traces without those bytes, their size comes from the launch grid and block (Inductor's pointwise configs:
  8 elements per thread), their family from the name (``triton_poi`` elementwise, ``triton_per``/``triton_red``
  norm).
- convolutions (cuDNN's ops, ``convolution_backward``, torch's depthwise kernels) are implicit GEMMs
  (``conv_parts``: fprop, dgrad, wgrad of the plain convolution; a transposed one swaps fprop and dgrad), one row
  per op call (its further kernels, layout transforms and split-K reductions, are ``op_part``); cuDNN's Winograd
  kernels are their batched transformed-tile GEMMs (``winograd_parts``); a ``convolution_backward`` kernel times
  the pass its name shows; depthwise ones (one input channel a group) are memory bound: an elementwise ``copy``
  of their bytes. fp32 is ``tf32`` unless ``allow_tf32`` is False or the kernel runs on the CUDA cores (SIMT,
  Winograd). The native im2col path's kernels get none: its GEMMs are cuBLAS's.
- batch norm (cuDNN's and torch's ops, forward and backward) is norm ``layer_norm`` with rows = channels and
  cols = N x spatial: the same reduce-then-normalise over the transposed view (the family has no batch-norm op);
  torch's two-phase kernels are each what they stream (the reduction a norm ``sum``, the elementwise pass a memory
  sweep), an inference forward a memory sweep. Group norm likewise (its reductions norm ``sum`` over N x groups
  forward, N x C backward; its elementwise pass a memory sweep; the whole op a ``layer_norm`` of rows N x groups).
- pooling (max / average / adaptive, forward and backward), random-number fills (``normal_``, ``uniform_``,
  ``random_``, ``bernoulli_``...), scans (``cumsum``, ``cumprod``, ``cummax``...) and reorderings (``flip``,
  ``roll``) are memory sweeps (an elementwise ``copy`` of their bytes, as depthwise
  convolutions): each tensor once, a max pool's int64 indices included; a pooling forward's output size comes from
  its arguments.
- collectives: ``bytes`` per rank is the largest tensor argument (nccl-tests ``size``); ``ranks`` and
  ``ranks_per_node`` come from the keyword arguments (None when the caller does not know them).
"""
from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Callable, Sequence
from typing import Any

from stepcast.profiling.families import dtype_bytes

Shape = tuple[int, ...]
Row = dict[str, Any]

# ---- dtypes -------------------------------------------------------------------------------------------------------

_EXACT_DTYPES: dict[str, str] = {}
for _names, _dtype in (
    (("float", "float32", "torch.float32", "torch.float", "fp32"), "fp32"),
    (("double", "float64", "torch.float64", "torch.double", "fp64"), "fp64"),
    (("c10::half", "half", "float16", "torch.float16", "torch.half", "fp16"), "fp16"),
    (("c10::bfloat16", "bfloat16", "torch.bfloat16", "bf16"), "bf16"),
    (("c10::float8_e4m3fn", "float8_e4m3fn", "torch.float8_e4m3fn", "c10::float8_e4m3fnuz", "float8_e4m3fnuz",
      "torch.float8_e4m3fnuz", "fp8_e4m3"), "fp8_e4m3"),
    (("c10::float8_e5m2", "float8_e5m2", "torch.float8_e5m2", "c10::float8_e5m2fnuz", "float8_e5m2fnuz",
      "torch.float8_e5m2fnuz", "fp8_e5m2"), "fp8_e5m2"),
    (("long", "int64", "torch.int64", "torch.long", "long int"), "int64"),
    (("signed char", "int8", "torch.int8"), "int8"),
    (("bool", "torch.bool"), "bool"),
    (("tf32",), "tf32"),
):
    for _name in _names:
        _EXACT_DTYPES[_name] = _dtype

# Same width, not the same type: good enough to time memory-bound kernels, never written as training data.
_APPROXIMATE_DTYPES: dict[str, str] = {
    "int": "fp32", "int32": "fp32", "torch.int32": "fp32", "torch.int": "fp32", "unsigned int": "fp32",
    "short": "fp16", "int16": "fp16", "torch.int16": "fp16",
    "unsigned char": "int8", "uint8": "int8", "torch.uint8": "int8",
    # complex tensors (torchtitan's rotary embedding multiplies complex64): a pair of floats, timed by width
    "torch.complex32": "fp32", "complex32": "fp32", "c10::complex<c10::Half>": "fp32",
    "torch.complex64": "fp64", "complex64": "fp64", "c10::complex<float>": "fp64",
}

# Kineto's capitalised IValue tags ("Int", "Double", "Bool", "Scalar", "GenericList"...) are not tensor dtypes.


def canonical_dtype(name: str | None) -> str | None:
    """The family dtype for an exact tensor dtype name (Kineto or torch spelling); None for anything else."""
    if not name:
        return None
    if name in _EXACT_DTYPES:
        return _EXACT_DTYPES[name]
    if name.startswith("c10::"):  # c10::Half, c10::BFloat16, c10::Float8_e4m3fn
        return _EXACT_DTYPES.get(name.lower())
    return None


def tensor_dtype(name: str | None) -> str | None:
    """The family dtype a tensor of this dtype is timed as: the exact one, or the same-width stand-in (int32 ->
    fp32, int16 -> fp16, uint8 -> int8); None for non-tensor tags ("Scalar", "Int", "TensorList", "")."""
    exact = canonical_dtype(name)
    if exact or not name:
        return exact
    return _APPROXIMATE_DTYPES.get(name)


_row_dtype = tensor_dtype


def _is_tensor_dtype(name: str | None) -> bool:
    return isinstance(name, str) and _row_dtype(name) is not None


def _entry_dtype(entry: Any) -> str | None:
    """Row dtype of one argument's dtype entry: a name, or a tuple of names for a tensor list."""
    if isinstance(entry, tuple):
        return next((_row_dtype(d) for d in entry if isinstance(d, str) and _row_dtype(d)), None)
    return _row_dtype(entry) if isinstance(entry, str) else None


# ---- op names -----------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def op_base_name(op: str) -> tuple[str, str]:
    """("namespace", "base name") of an op: aten::add_ -> (aten, add), aten.addmm.default -> (aten, addmm).

    A trailing in-place underscore is dropped (``add_`` -> ``add``, ``_foreach_mul_`` -> ``_foreach_mul``).
    """
    op = op.strip()
    if op.startswith("torch.ops."):
        op = op[len("torch.ops."):]
    if "::" in op:
        namespace, name = op.split("::", 1)
        name = name.split(".", 1)[0]
    elif op.startswith("nccl:"):
        namespace, name = "nccl", op[len("nccl:"):]
    elif "." in op:
        namespace, name = op.split(".", 2)[:2]
    else:
        namespace, name = "", op
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return namespace, name


# ---- shape helpers ------------------------------------------------------------------------------------------------

def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _tensors(shapes: tuple, dtypes: tuple) -> list[tuple[Shape, str]]:
    """(shape, row dtype) of each plain tensor argument (tensor lists excluded)."""
    out = []
    for shape, dtype in zip(shapes, dtypes):
        if _is_tensor_dtype(dtype) and all(isinstance(d, numbers.Integral) for d in shape):
            out.append((shape, _row_dtype(dtype)))
    return out


def _tensor_list_numel(shape: Any) -> int:
    """Elements of a tensor-list argument given as a list of shapes; 0 when not such a list."""
    if isinstance(shape, (tuple, list)) and shape and all(isinstance(s, (tuple, list)) for s in shape):
        return sum(_numel(s) for s in shape)
    return 0


def _arg(args: tuple | None, index: int, default: Any = None) -> Any:
    if args is None or index >= len(args) or args[index] in (None, ""):
        return default
    return args[index]


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value)


def _as_dims(value: Any, ndim: int) -> tuple[int, ...] | None:
    """Dim argument(s) as non-negative ints; None when absent or unparsable."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        found = re.findall(r"-?\d+", value)
        if not found:
            return None
        value = [int(v) for v in found]
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        return tuple(int(v) % ndim for v in values) if ndim else ()
    except (TypeError, ValueError):
        return None


# ---- families -----------------------------------------------------------------------------------------------------

_TF32_KERNEL = re.compile(r"s1688gemm|s16816gemm|tf32|_s1688|xmma_gemm_f32f32_tf32", re.IGNORECASE)


def _gemm_row(m: int, n: int, k: int, batch: int, dtype: str | None, kernel_name: str | None) -> Row | None:
    if dtype is None or min(m, n, k, batch) <= 0:
        return None
    if dtype == "fp32" and kernel_name and _TF32_KERNEL.search(kernel_name):
        dtype = "tf32"
    return {"family": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "batch": batch}


def _gemm(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    t = _tensors(shapes, dtypes)
    if name in ("addmm", "_addmm_activation", "baddbmm", "addbmm"):
        t = t[1:] if len(t) >= 3 else t
    if len(t) < 2:
        return None
    (a, dtype), (b, _) = t[0], t[1]
    if name in ("linear",):  # y = x @ w.T: w is [n, k]
        if len(b) != 2 or not a:
            return None
        return _gemm_row(_numel(a[:-1]), b[0], a[-1], 1, dtype, kernel_name)
    if name in ("bmm", "baddbmm"):
        if len(a) != 3 or len(b) != 3:
            return None
        return _gemm_row(a[1], b[2], a[2], a[0], dtype, kernel_name)
    if name == "addbmm":  # sum over the batch of bmm products
        if len(a) != 3 or len(b) != 3:
            return None
        return _gemm_row(a[1], b[2], a[2], a[0], dtype, kernel_name)
    if name in ("mm", "addmm", "_addmm_activation", "_scaled_mm"):
        if len(a) != 2 or len(b) != 2:
            return None
        return _gemm_row(a[0], b[1], a[1], 1, dtype, kernel_name)
    # matmul: numpy semantics.
    if not a or not b:
        return None
    a2 = a if len(a) > 1 else (1,) + a
    b2 = b if len(b) > 1 else b + (1,)
    if len(b2) == 2:  # batch dims of a fold into m
        return _gemm_row(_numel(a2[:-1]), b2[1], a2[-1], 1, dtype, kernel_name)
    try:
        batch_shape = _broadcast(a2[:-2], b2[:-2])
    except ValueError:
        return None
    return _gemm_row(a2[-2], b2[-1], a2[-1], _numel(batch_shape), dtype, kernel_name)


#: a grouped GEMM's tile along a group's rows (CUTLASS's and Triton's MoE kernels: 128 x 128 or 128 x 256): each
#: group's rows are padded to it, so the work is the groups' padded rows, not their sum
GROUPED_TILE_M = 128
#: grouped GEMM op -> the argument holding its group offsets (the op context records their values there:
#: emulate/driver/csrc/opctx.cpp ``value_arguments``); ``_scaled_grouped_mm`` is the Float8 experts' (a, b, scale_a,
#: scale_b, offs, ...), its a and b in fp8
GROUPED_OFFSETS = {"_grouped_mm": 2, "_scaled_grouped_mm": 4}


def _grouped_gemm(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """``_grouped_mm(a, b, offs)`` (torch's grouped GEMM: MoE experts; ``_scaled_grouped_mm(a, b, scale_a, scale_b,
    offs)`` its Float8 form, a row of the inputs' fp8 dtype) as one GEMM of the groups' work. 2-D a by 3-D
    b (the experts' forward and input gradient): the groups split a's rows, so m is the sum of the groups' rows
    each padded to :data:`GROUPED_TILE_M` when the offsets' values are known (the capture records them once the
    routing is stated: emulate/stated_routing.py), else a's rows. 2-D by 2-D (the weight gradient): the groups split
    the shared k, giving one m x n product per group (batch), k their mean. 3-D by 3-D: a batched GEMM. The
    grouped kernel's set-up kernel (``prepare_grouped_gemm_data``) is no GEMM."""
    if kernel_name and "prepare_grouped_gemm" in kernel_name:
        return None
    t = _tensors(shapes[:2], dtypes[:2])
    if len(t) < 2:
        return None
    (a, dtype), (b, _) = t
    at = GROUPED_OFFSETS[name]
    offsets = args[at] if args is not None and len(args) > at and isinstance(args[at], (tuple, list)) else None
    sizes = None
    if offsets and all(isinstance(o, numbers.Integral) for o in offsets):
        bounds = (0, *offsets)
        sizes = [max(int(hi) - int(lo), 0) for lo, hi in zip(bounds[:-1], bounds[1:])]
    if len(a) == 2 and len(b) == 3:
        m = sum(-(-size // GROUPED_TILE_M) * GROUPED_TILE_M for size in sizes) if sizes else a[0]
        return _gemm_row(m, b[2], a[1], 1, dtype, kernel_name)
    if len(a) == 2 and len(b) == 2:
        groups = len(sizes) if sizes else (len(offsets) if offsets else 1)
        k = -(-a[1] // max(groups, 1))
        return _gemm_row(a[0], b[1], k, groups, dtype, kernel_name)
    if len(a) == 3 and len(b) == 3:
        return _gemm_row(a[1], b[2], a[2], a[0], dtype, kernel_name)
    return None


def _broadcast(*shapes: Shape) -> Shape:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        sizes = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


# name -> (query index, key index, layout, is_causal arg index, pass, causal means custom_mask_type != 0)
_ATTENTION: dict[str, tuple[int, int, str, int, str]] = {
    "scaled_dot_product_attention": (0, 1, "bhsd", 5, "fwd"),
    "_scaled_dot_product_attention_math": (0, 1, "bhsd", 5, "fwd"),
    "_scaled_dot_product_flash_attention": (0, 1, "bhsd", 4, "fwd"),
    "_scaled_dot_product_flash_attention_backward": (1, 2, "bhsd", 11, "bwd"),
    "_scaled_dot_product_efficient_attention": (0, 1, "bhsd", 6, "fwd"),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, "bhsd", 11, "bwd"),
    "_scaled_dot_product_cudnn_attention": (0, 1, "bhsd", 6, "fwd"),
    "_scaled_dot_product_cudnn_attention_backward": (1, 2, "bhsd", 14, "bwd"),
    "_flash_attention_forward": (0, 1, "bshd", 8, "fwd"),
    "_flash_attention_backward": (1, 2, "bshd", 11, "bwd"),
    "_efficient_attention_forward": (0, 1, "bshd", 9, "fwd"),  # causal: custom_mask_type != 0
    "_efficient_attention_backward": (1, 2, "bshd", 14, "bwd"),
    "_cudnn_attention_forward": (0, 1, "bhsd", 10, "fwd"),
    "_cudnn_attention_backward": (1, 2, "bhsd", 14, "bwd"),
}


def _attention(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    q_index, k_index, layout, causal_index, pass_ = _ATTENTION[name]
    if max(q_index, k_index) >= len(shapes):
        return None
    q, k = shapes[q_index], shapes[k_index]
    dtype = _entry_dtype(dtypes[q_index])
    if dtype is None or len(q) not in (3, 4) or len(k) != len(q):
        return None
    if len(q) == 3:
        q, k = (1,) + q, (1,) + k
    if layout == "bhsd":
        batch, heads_q, seq_q, head_dim = q
        heads_kv, seq_kv = k[1], k[2]
    else:
        batch, seq_q, heads_q, head_dim = q
        seq_kv, heads_kv = k[1], k[2]
    causal_value = _arg(args, causal_index, False)
    causal = _as_bool(causal_value) if not isinstance(causal_value, (int, float)) or isinstance(
        causal_value, bool) else causal_value != 0
    return {"family": "attention", "dtype": dtype, "batch": batch, "heads_q": heads_q, "heads_kv": heads_kv,
            "seq_q": seq_q, "seq_kv": seq_kv, "head_dim": head_dim, "causal": bool(causal), "pass": pass_}


# name -> (family op, input index, weight index (cols from its numel) or None, pass, reduction kind)
_NORM: dict[str, tuple[str, int, int | None, str, str]] = {
    "layer_norm": ("layer_norm", 0, 2, "fwd", "last"),
    "native_layer_norm": ("layer_norm", 0, 2, "fwd", "last"),
    "native_layer_norm_backward": ("layer_norm", 1, 5, "bwd", "last"),
    "rms_norm": ("rms_norm", 0, 2, "fwd", "last"),
    "_fused_rms_norm": ("rms_norm", 0, 2, "fwd", "last"),
    "_fused_rms_norm_backward": ("rms_norm", 1, 4, "bwd", "last"),
    "softmax": ("softmax", 0, None, "fwd", "dim1"),
    "_softmax": ("softmax", 0, None, "fwd", "dim1"),
    "_softmax_backward_data": ("softmax", 1, None, "bwd", "dim2"),
    "_safe_softmax": ("softmax", 0, None, "fwd", "dim1"),
    "log_softmax": ("log_softmax", 0, None, "fwd", "dim1"),
    "_log_softmax": ("log_softmax", 0, None, "fwd", "dim1"),
    "_log_softmax_backward_data": ("log_softmax", 1, None, "bwd", "dim2"),
    "cross_entropy_loss": ("cross_entropy", 0, None, "fwd", "class"),
    "nll_loss": ("cross_entropy", 0, None, "fwd", "class"),
    "nll_loss_forward": ("cross_entropy", 0, None, "fwd", "class"),
    "nll_loss_nd": ("cross_entropy", 0, None, "fwd", "class"),
    "nll_loss_backward": ("cross_entropy", 1, None, "bwd", "class"),
    "sum": ("sum", 0, None, "fwd", "dims1"),
    "mean": ("mean", 0, None, "fwd", "dims1"),
}


def _norm(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    op, index, weight_index, pass_, kind = _NORM[name]
    if index >= len(shapes):
        return None
    x, dtype = shapes[index], _entry_dtype(dtypes[index])
    if dtype is None or not all(isinstance(d, numbers.Integral) for d in x):
        return None
    numel = _numel(x)
    if not x:
        rows, cols = 1, 1
    elif kind == "last":
        weight = shapes[weight_index] if weight_index is not None and weight_index < len(shapes) else ()
        cols = _numel(weight) if weight and _is_tensor_dtype(dtypes[weight_index]) else x[-1]
        normalized = _as_dims(_arg(args, 1), 1 << 30) if name in ("layer_norm", "native_layer_norm", "rms_norm",
                                                                   "_fused_rms_norm") else None
        if normalized:
            cols = _numel(normalized)
        rows = numel // cols if cols else 0
    elif kind == "class":  # [N, C] or [N, C, d1, ...]: rows = N * d..., cols = C
        cols = x[1] if len(x) >= 2 else x[0]
        rows = numel // cols if cols else 0
    elif kind in ("dim1", "dim2"):
        dims = _as_dims(_arg(args, 1 if kind == "dim1" else 2), len(x))
        dim = dims[0] if dims else len(x) - 1
        cols = x[dim]
        rows = numel // cols if cols else 0
    else:  # sum / mean: reduced dims from args; without them the whole tensor
        dims = _as_dims(_arg(args, 1), len(x))
        cols = _numel(tuple(x[d] for d in set(dims))) if dims else numel
        rows = numel // cols if cols else 0
    if rows <= 0 or cols <= 0:
        return None
    return {"family": "norm", "dtype": dtype, "op": op, "rows": rows, "cols": cols, "pass": pass_}


_ELEMENTWISE_ALIASES: dict[str, str] = {
    "copy": "copy", "clone": "copy", "contiguous": "copy", "_to_copy": "cast", "to": "cast", "type_as": "cast",
    "native_dropout": "dropout", "dropout": "dropout", "native_dropout_backward": "dropout_backward",
    "_fused_dropout": "dropout", "_masked_scale": "dropout_backward",
    "fill": "fill", "zero": "fill", "zeros_like": "fill", "ones_like": "fill", "full_like": "fill",
    "threshold_backward": "relu_backward", "rsub": "sub", "true_divide": "div",
    "gelu": "gelu", "gelu_backward": "gelu_backward", "silu": "silu", "silu_backward": "silu_backward",
    "relu": "relu", "sigmoid": "sigmoid", "sigmoid_backward": "sigmoid_backward", "tanh": "tanh",
    "tanh_backward": "tanh_backward", "add": "add", "sub": "sub", "mul": "mul", "div": "div", "neg": "neg",
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "pow": "pow", "abs": "abs", "sign": "sign",
    "reciprocal": "reciprocal", "where": "where", "masked_fill": "masked_fill", "clamp": "clamp",
    "clamp_min": "clamp", "clamp_max": "clamp", "maximum": "maximum", "minimum": "minimum", "lerp": "lerp",
    "addcmul": "addcmul", "addcdiv": "addcdiv", "eq": "compare", "ne": "compare", "lt": "compare",
    "le": "compare", "gt": "compare", "ge": "compare", "logical_not": "logical", "logical_and": "logical",
    "logical_or": "logical", "bitwise_and": "logical", "bitwise_or": "logical", "bitwise_not": "logical",
    "cos": "trig", "sin": "trig", "erf": "erf", "softplus": "softplus", "hardtanh": "clamp",
    "leaky_relu": "relu", "elu": "elu", "mish": "mish", "square": "mul", "log2": "log", "log1p": "log",
    "exp2": "exp", "expm1": "exp", "floor": "round", "ceil": "round", "round": "round", "trunc": "round",
    "nan_to_num": "nan_to_num", "triu": "triu", "tril": "triu", "cat": "copy", "stack": "copy",
}


def _elementwise(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    t = _tensors(shapes, dtypes)
    list_numel = max((_tensor_list_numel(s) for s in shapes), default=0)
    if not t and not list_numel:
        return None
    numel = max((_numel(s) for s, _ in t), default=0)
    try:
        numel = max(numel, _numel(_broadcast(*(s for s, _ in t)))) if t else numel
    except ValueError:
        pass
    numel = max(numel, list_numel)
    dtype = max(t, key=lambda item: _numel(item[0]))[1] if t else _list_dtype(dtypes)
    if dtype is None or numel <= 0:
        return None
    op = _ELEMENTWISE_ALIASES[name]
    if op in SCALAR_VARIANTS and not list_numel and reads_one_stream([_numel(s) for s, _ in t]):
        op += "_scalar"
    return {"family": "elementwise", "dtype": dtype, "op": op, "numel": numel}


#: binary ops whose one-tensor form (x + 2, x * 0.5, x ** 2) is its own kernel with half the reads
SCALAR_VARIANTS = frozenset({"add", "sub", "mul", "div", "pow"})


def reads_one_stream(operands: list[int]) -> bool:
    """Whether a binary op over tensors of ``operands`` elements is its one-tensor form, the kernel
    that reads one stream: at most one operand of more than one element. An operand broadcast over the output (a
    bias, a row statistic, an attention mask over the heads) is read mostly from the cache, yet it keeps the
    two-operand kind: the broadcasting kernel is torch's non-vectorised ``elementwise_kernel``, slower than the
    vectorised one-tensor kernel, and the three streams the two-operand rows count come closer to its time. Timed
    as the one-tensor form instead, the NeuSight labels with each GPU unseen got worse on all five GPUs (OPT's
    broadcast mask ops 15-20 % under their measured times), KernelBench's RMSNorm better (cc2b271, undone)."""
    return sum(n > 1 for n in operands) <= 1


def _list_dtype(dtypes: tuple) -> str | None:
    return next((_entry_dtype(d) for d in dtypes if _entry_dtype(d)), None)


_FUSED_OPTIMIZERS = {"_fused_adamw": "adamw_fused", "_fused_adam": "adam_fused", "_fused_sgd": "sgd_fused",
                     "_fused_adagrad": "adagrad_fused"}


def _optimizer(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    lists = [(_tensor_list_numel(s), d) for s, d in zip(shapes, dtypes) if _tensor_list_numel(s)]
    if lists:
        params, dtype = lists[0][0], _entry_dtype(lists[0][1]) or _list_dtype(dtypes)
    else:  # a single tensor (foreach over one-element lists as some recorders flatten them)
        t = _tensors(shapes, dtypes)
        if not t:
            return None
        params, dtype = _numel(t[0][0]), t[0][1]
    if dtype is None or params <= 0:
        return None
    op = _FUSED_OPTIMIZERS.get(name) or "foreach_" + name[len("_foreach_"):]
    return {"family": "optimizer", "dtype": dtype, "op": op, "params": params}


_COLLECTIVES: dict[str, str] = {}
for _op, _names in {
    "all_reduce": ("allreduce", "all_reduce", "allreduce_coalesced", "all_reduce_coalesced"),
    "all_gather": ("allgather", "_allgather_base", "all_gather", "all_gather_into_tensor", "allgather_coalesced",
                   "allgather_into_tensor_coalesced", "all_gather_into_tensor_coalesced", "_allgather_into_tensor"),
    "reduce_scatter": ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor",
                       "reduce_scatter_tensor_coalesced", "reducescatter"),
    "all_to_all": ("alltoall", "alltoall_base", "all_to_all", "all_to_all_single", "all_to_allv"),
    "broadcast": ("broadcast", "_broadcast"),
    "send_recv": ("send", "recv", "recv_any_source", "sendrecv", "send_recv", "batch_isend_irecv"),
}.items():
    for _name in _names:
        _COLLECTIVES[_name] = _op

_COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional", "nccl", "gloo", "_dtensor"})
# Functional ops return the gathered tensor, so their argument is the per-rank shard: bytes scale by ranks.
_GATHERS_FROM_SHARD = frozenset({"all_gather_into_tensor", "all_gather_into_tensor_coalesced"})


def _collective(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, ranks: int | None,
                ranks_per_node: int | None) -> Row | None:
    t = _tensors(shapes, dtypes)
    candidates = [(_numel(s) * dtype_bytes(d), d) for s, d in t]
    for shape, dtype in zip(shapes, dtypes):  # tensor lists: the whole list's payload
        n, list_dtype = _tensor_list_numel(shape), _entry_dtype(dtype)
        if n and list_dtype:
            candidates.append((n * dtype_bytes(list_dtype), list_dtype))
    if not candidates:
        return None
    size, dtype = max(candidates)
    if name in _GATHERS_FROM_SHARD and ranks:
        size *= ranks
    return {"family": "collective", "dtype": dtype, "op": _COLLECTIVES[name], "bytes": int(size),
            "ranks": ranks, "ranks_per_node": ranks_per_node}


# ---- convolutions (cuDNN and torch's depthwise kernels) --------------------------------------------------------------

#: cuDNN's forward ops -> positions of their padding, stride, dilation, groups, output_padding (None: not
#: transposed) and allow_tf32 arguments
_CONV_FORWARD_ARGS = {
    "cudnn_convolution": (2, 3, 4, 5, None, 8),
    "cudnn_convolution_transpose": (2, 4, 5, 6, 3, 9),
}
#: native (slow) convolutions lower to im2col + cuBLAS GEMMs, which the capture times as GEMMs already
#: (cuDNN's own ``cudnn::cnn::im2col4d_kernel`` is one of its algorithms: it keeps its row)
_CUDNN_KERNEL = re.compile(r"cudnn|xmma|sm\d+_", re.IGNORECASE)
_NATIVE_CONV_KERNEL = re.compile(r"^(?!.*cudnn).*(im2col|col2im|vol2col|col2vol|slow_conv)", re.IGNORECASE)


def _ints(value: Any, ndim: int) -> tuple[int, ...] | None:
    """A per-dim int argument (list, int, or Kineto's text like ``"[1, 1]"``) broadcast to ``ndim``; None if absent."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = [int(v) for v in re.findall(r"-?\d+", value)]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        values = [int(v) for v in values]
    except (TypeError, ValueError):
        return None
    if len(values) == 1:
        values *= ndim
    return tuple(values) if len(values) == ndim else None


def _conv_out(size: Shape, kernel: Shape, pad: Shape, stride: Shape, dil: Shape,
              out_pad: Shape | None) -> Shape:
    """Spatial output of a convolution (``out_pad`` given: a transposed one)."""
    if out_pad is not None:
        return tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1
                     for i, k, p, s, d, o in zip(size, kernel, pad, stride, dil, out_pad))
    return tuple((i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, p, s, d in zip(size, kernel, pad, stride, dil))


def conv_parts(x: Shape, w: Shape, y: Shape, groups: int, stride: Shape, transposed: bool,
               passes: Sequence[str]) -> list[tuple[int, int, int, int]]:
    """The implicit GEMMs (m, n, k, batch) of a convolution's passes (``fprop``, ``dgrad``, ``wgrad``).

    ``x``/``y``: the op's input and output as written, ``w`` its weight. A transposed convolution is the dgrad of
    the plain one that maps ``y`` to ``x`` with the same weight, so every pass is taken on that plain convolution
    (Cout = w[0], Cin / groups = w[1] either way): fprop m = N x out pixels, n = Cout/g, k = Cin/g x taps; dgrad
    m = N x in pixels, n = Cin/g, k = Cout/g x taps / prod(stride) (a strided dgrad skips the zero taps: its
    FLOPs are fprop's); wgrad m = Cout/g, n = Cin/g x taps, k = N x out pixels; batch = groups."""
    src, dst = (y, x) if transposed else (x, y)        # the plain convolution's input and output
    cout, cin_g, taps = w[0] // groups, w[1], _numel(w[2:])
    out_px, in_px = src[0] * _numel(dst[2:]), src[0] * _numel(src[2:])
    plain = {"fprop": (out_px, cout, cin_g * taps, groups),
             "dgrad": (in_px, cin_g, max(1, math.ceil(cout * taps / _numel(stride))), groups),
             "wgrad": (cout, cin_g * taps, out_px, groups)}
    swap = {"fprop": "dgrad", "dgrad": "fprop"} if transposed else {}
    return [plain[swap.get(p, p)] for p in passes]


#: cuDNN's Winograd kernels (the family shows in every kernel of the call: tile generation, data and filter
#: transforms, the fused kernel) -> output tile: the fused ones F(2x2, 3x3), the non-fused F(4x4, 3x3)
_WINOGRAD_KERNEL = re.compile(r"winograd", re.IGNORECASE)
_WINOGRAD_NONFUSED = re.compile(r"winograd_?nonfused|winogradForward|winogradWgrad", re.IGNORECASE)


def winograd_parts(x: Shape, w: Shape, y: Shape, groups: int, transposed: bool, passes: Sequence[str],
                   tile: int) -> list[tuple[int, int, int, int]] | None:
    """The GEMMs of a Winograd F(tile x tile, r x r) convolution: one per point of the (tile + r - 1)^2 transformed
    tile (the batch), over the tiles of the output (fprop, wgrad) or the input (dgrad) of the plain convolution
    (:func:`conv_parts`): the multiplications drop by r^2 tile^2 / (tile + r - 1)^2 (2.25x for F(2, 3), 4x for
    F(4, 3)). None for anything but a 2-D convolution with a square kernel (cuDNN's Winograd kernels)."""
    if len(w) != 4 or w[2] != w[3]:
        return None
    src, dst = (y, x) if transposed else (x, y)
    alpha = tile + w[2] - 1
    cout, cin_g = w[0] // groups, w[1]
    out_tiles, in_tiles = (t[0] * math.prod(-(-d // tile) for d in t[2:]) for t in (dst, src))
    shapes = {"fprop": (out_tiles, cout, cin_g), "dgrad": (in_tiles, cin_g, cout), "wgrad": (cout, cin_g, out_tiles)}
    swap = {"fprop": "dgrad", "dgrad": "fprop"} if transposed else {}
    return [(*shapes[swap.get(p, p)], alpha * alpha * groups) for p in passes]


#: cuDNN's kernels that run fp32 on the CUDA cores even with TF32 allowed: the SIMT implicit / precomputed /
#: explicit GEMMs, the direct engines, Winograd, and xmma kernels named f32f32 (TF32 ones are named tf32)
_SIMT_CONV_KERNEL = re.compile(r"sgemm|scudnn|simt|convolve|_engine<float|engine<float|winograd|f32f32_f32f32",
                               re.IGNORECASE)


def _conv_dtype(dtype: str | None, allow_tf32: Any, kernel_name: str | None) -> str | None:
    """cuDNN may run fp32 convolutions on TF32 tensor cores unless told not to (``torch.backends.cudnn.allow_tf32``,
    True by default; the forward ops carry it, the backward follows the same flag); whether it does shows in the
    kernel it picked (:data:`_SIMT_CONV_KERNEL`: not). A layout transform opening the call (NCHW -> NHWC, which only
    the tensor-core kernels need) or no kernel name: TF32 as allowed."""
    if dtype == "fp32" and (allow_tf32 is None or _as_bool(allow_tf32)):
        return "fp32" if kernel_name and _SIMT_CONV_KERNEL.search(kernel_name) else "tf32"
    return dtype


def _depthwise(x: Shape, w: Shape, groups: int, transposed: bool) -> bool:
    return not transposed and groups > 1 and groups == x[1] and w[1] == 1


def _depthwise_row(dtype: str, x: Shape, w: Shape, y: Shape, passes: int, native: bool) -> Row:
    """A depthwise convolution (one input channel a group) does a few FMAs per byte: each pass (forward, dgrad,
    wgrad) is a memory-bound sweep, timed as the elementwise ``copy`` of its bytes (one stream read, one written).
    torch's own depthwise kernels (``native``) load every tap of every output from memory (no tiling in shared
    memory): out x (taps + 1) elements a pass; cuDNN's read input, output and weight once."""
    taps = _numel(w[2:])
    elements = _numel(y) * (taps + 1) + _numel(w) if native else _numel(x) + _numel(y) + _numel(w)
    return _memory_sweep_row(dtype, passes * elements)


def _memory_sweep_row(dtype: str, elements_moved: float) -> Row:
    """A memory-bound kernel that reads and writes ``elements_moved`` elements in all, timed as the elementwise
    ``copy`` (one stream read, one written) of half as many: the elementwise estimator's learned efficiency at that
    size times it (depthwise convolutions, Triton kernels with their launch bytes)."""
    return {"family": "elementwise", "dtype": dtype, "op": "copy", "numel": max(1, round(elements_moved / 2))}


def classify_memory_op(op: str | None, shapes: Sequence = (), dtypes: Sequence = ()) -> Row | None:
    """A memory-bound row for a kernel no family describes, from the tensors of its op call: FSDP2's all-gather
    copy-out (``split_with_sizes_copy.out``) and reduce-scatter copy-in (``_chunk_cat.out``), gathers, scatters,
    index and embedding-backward kernels. Such a kernel moves at least the bytes of the tensors it reads and writes,
    so it is timed as the elementwise ``copy`` of those bytes (:func:`_memory_sweep_row`) in the dtype of its
    largest tensor, rather than at a launch floor: every tensor argument (a tensor list: all of its tensors) is
    read or written once, an ``out=`` overload's inputs at most its output's size each (a gather reads the rows it
    indexes, not the table), and a functional op (not in place, no ``out``) writes a result as large as its largest
    tensor. None for ops outside aten (a compiled graph's context is its inputs, not what one kernel moves) and when
    the call names no sized tensor (a dtype the capture could not name has no width)."""
    tensors: list[tuple[int, str]] = []              # (elements, row dtype) of each tensor argument or list
    for shape, dtype in zip(shapes or (), dtypes or ()):
        if isinstance(dtype, (list, tuple)) and isinstance(shape, (list, tuple)):
            sized = [(s, tensor_dtype(d)) for s, d in zip(shape, dtype) if isinstance(d, str)]
        else:
            sized = [(shape, tensor_dtype(dtype) if isinstance(dtype, str) else None)]
        sized = [(_numel(tuple(s)), d) for s, d in sized if d and isinstance(s, (list, tuple))
                 and all(isinstance(n, numbers.Integral) for n in s)]
        if sized:
            tensors.append((sum(n for n, _ in sized), max(sized)[1]))
    namespace, _ = op_base_name(op or "")
    if not tensors or namespace != "aten":
        return None
    overload = (op or "").rsplit(".", 1)[-1] if (op or "").count(".") >= 2 else ""
    in_place = re.search(r"_(?:\.|$)", op or "") is not None       # aten.copy_.default, aten::add_
    largest, dtype = max(tensors)
    if overload.startswith("out"):
        out_elements, _ = tensors[-1]                # torch puts out= last
        moved = sum(min(n, out_elements) * dtype_bytes(d) for n, d in tensors[:-1]) + out_elements * dtype_bytes(
            tensors[-1][1])
    else:
        moved = sum(n * dtype_bytes(d) for n, d in tensors)
        if not in_place:
            moved += largest * dtype_bytes(dtype)
    return _memory_sweep_row(dtype, moved / dtype_bytes(dtype))


def _mask(value: Any) -> tuple[bool, bool]:
    """(grad input, grad weight) wanted by a ``convolution_backward`` call; both when its output_mask is unknown."""
    if isinstance(value, str):
        value = [v.lower() == "true" for v in re.findall(r"true|false", value, re.IGNORECASE)]
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        return _as_bool(value[0]), _as_bool(value[1])
    return True, True


def _conv_geometry(name: str, t: list, shapes: tuple, args: tuple | None) -> tuple | None:
    """(x, w, y, groups, stride, transposed, passes, allow_tf32) of a convolution op call, or None when its
    arguments do not fix it (a forward without stride and padding: Kineto traces before ``Concrete Inputs``)."""
    if name in _CONV_FORWARD_ARGS or name in ("_conv_depthwise2d", "conv_depthwise3d"):
        (x, _), (w, _) = t[0], t[1]
        nd = len(x) - 2
        pad_i, stride_i, dil_i, groups_i, out_pad_i, tf32_i = _CONV_FORWARD_ARGS.get(name, (5, 4, 6, None, None, None))
        pad, stride, dil = (_ints(_arg(args, i), nd) for i in (pad_i, stride_i, dil_i))
        out_pad = _ints(_arg(args, out_pad_i), nd) if out_pad_i is not None else None
        if pad is None or stride is None or (out_pad_i is not None and out_pad is None):
            return None
        groups = int(_arg(args, groups_i, 1)) if groups_i is not None else x[1]
        transposed = out_pad_i is not None
        y = x[:1] + ((w[1] * groups,) if transposed else (w[0],)) + _conv_out(x[2:], w[2:], pad, stride,
                                                                              dil or (1,) * nd, out_pad)
        return x, w, y, groups, stride, transposed, ["fprop"], _arg(args, tf32_i) if tf32_i else None
    if name == "convolution_backward":  # (grad_output, input, weight, bias_sizes, stride, padding, dilation,
        (y, _), (x, _), (w, _) = t[0], t[1], t[2]  # transposed, output_padding, groups, output_mask)
        nd = len(x) - 2
        passes = [p for p, want in zip(("dgrad", "wgrad"), _mask(_arg(args, 10))) if want]
        return (x, w, y, int(_arg(args, 9, 1)), _ints(_arg(args, 4), nd) or (1,) * nd, _as_bool(_arg(args, 7, False)),
                passes, None)
    # PyTorch < 1.11: cudnn_convolution_backward_{input,weight}(size of the result, grad_output, weight | input,
    # padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    (y, _), (other, _) = t[0], t[1]
    size = _ints(_arg(args, 0), len(y))
    if size is None:
        return None
    x, w = (size, other) if name.endswith("input") else (other, size)
    stride = _ints(_arg(args, 4), len(y) - 2) or (1,) * (len(y) - 2)
    passes = ["dgrad" if name.endswith("input") else "wgrad"]
    return x, w, y, int(_arg(args, 6, 1)), stride, False, passes, _arg(args, 9)


#: the pass a kernel of a ``convolution_backward`` call runs, from its name (cuDNN's xmma / engine kernels, torch's
#: depthwise kernels); "fprop" kernels compute a transposed convolution's grad input
_WGRAD_KERNEL = re.compile(r"wgrad|grad_weight|bwd_filter|bprop_filter", re.IGNORECASE)
_DGRAD_KERNEL = re.compile(r"dgrad|fprop|depthwise\d?d_backward|bwd_data|bprop_data", re.IGNORECASE)


def _backward_pass(passes: list[str], kernel_name: str | None) -> list[str]:
    """The pass one kernel of a ``convolution_backward`` call stands for. The capture splits the call at the
    gradient buffers' allocations, so grad input and grad weight are separate op calls, each timed by its first
    kernel: a dgrad kernel times dgrad; a wgrad kernel, or a layout transform (cuDNN's NHWC wgrad kernels follow
    one), wgrad. Without a kernel name (a trace's op as a whole) both."""
    if len(passes) < 2 or not kernel_name:
        return passes
    return ["dgrad"] if _DGRAD_KERNEL.search(kernel_name) and not _WGRAD_KERNEL.search(kernel_name) else ["wgrad"]


def _conv(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """A convolution op call as one implicit GEMM per pass it runs (:func:`conv_parts`; depthwise: its bytes).
    Two passes in one row (a backward without a kernel name) are the first GEMM with batch x 2: dgrad and wgrad
    do the same FLOPs. None without the arguments that fix the geometry, and for the native im2col path, whose
    GEMMs the capture times as GEMMs."""
    if kernel_name and _NATIVE_CONV_KERNEL.search(kernel_name):
        return None
    t = _tensors(shapes, dtypes)
    if len(t) < (3 if name == "convolution_backward" else 2):
        return None
    geometry = _conv_geometry(name, t, shapes, args)
    if geometry is None:
        return None
    x, w, y, groups, stride, transposed, passes, allow_tf32 = geometry
    dtype = t[0][1]
    if name == "convolution_backward":
        passes = _backward_pass(passes, kernel_name)
    if not passes or len(x) != len(w) or len(y) != len(x) or len(x) < 3 or min(*x, *w, *y, groups) <= 0:
        return None
    if _depthwise(x, w, groups, transposed):
        native = name in ("_conv_depthwise2d", "conv_depthwise3d") or (
            name == "convolution_backward" and not (kernel_name and _CUDNN_KERNEL.search(kernel_name)))
        return _depthwise_row(dtype, x, w, y, len(passes), native)
    parts = conv_parts(x, w, y, groups, stride, transposed, passes)
    if kernel_name and _WINOGRAD_KERNEL.search(kernel_name) and max(stride) == 1:
        tile = 4 if _WINOGRAD_NONFUSED.search(kernel_name) else 2
        parts = winograd_parts(x, w, y, groups, transposed, passes, tile) or parts
    m, n, k, batch = parts[0]
    return _gemm_row(m, n, k, batch * len(parts), _conv_dtype(dtype, allow_tf32, kernel_name), None)


# ---- batch norm, pooling, random numbers ----------------------------------------------------------------------------

#: batch-norm ops -> (position of the input, pass); the backward ops differ in where they put the input
_BATCH_NORM: dict[str, tuple[int, str]] = {
    "batch_norm": (0, "fwd"), "native_batch_norm": (0, "fwd"), "_native_batch_norm_legit": (0, "fwd"),
    "_native_batch_norm_legit_no_training": (0, "fwd"), "_native_batch_norm_legit_functional": (0, "fwd"),
    "_batch_norm_with_update": (0, "fwd"), "_batch_norm_no_update": (0, "fwd"), "cudnn_batch_norm": (0, "fwd"),
    "miopen_batch_norm": (0, "fwd"),
    "native_batch_norm_backward": (1, "bwd"), "batch_norm_backward": (1, "bwd"),
    "cudnn_batch_norm_backward": (0, "bwd"), "miopen_batch_norm_backward": (0, "bwd"),
}
#: forward ops that never compute batch statistics (the ``training`` argument of the others says)
_BATCH_NORM_EVAL = frozenset({"_native_batch_norm_legit_no_training", "_batch_norm_no_update"})
#: torch's own batch-norm kernels split the op in two phases, each its own kernel: a per-channel reduction (the
#: statistics; backward, the sums of dy and dy * x) and an elementwise pass (normalise; backward, grad input), with
#: the running-statistics update (``batch_norm_update_stats_and_invert``) finishing the statistics in between, or
#: without running statistics (an instance norm's) ``batch_norm_calc_invstd``, the inverse std from the variance: a
#: pointwise kernel over the channels, which the elementwise pattern below would time as a sweep of the whole input
_BN_UPDATE_KERNEL = re.compile(r"update_stats|calc_invstd", re.IGNORECASE)
_BN_REDUCE_KERNEL = re.compile(r"collect_statistics|backward_reduce|reduce_kernel|mean_var|welford", re.IGNORECASE)
_BN_ELEMENTWISE_KERNEL = re.compile(r"transform_input|backward_elemt|elementwise", re.IGNORECASE)
#: the running-statistics update reads the batch mean and variance and both running statistics and writes the
#: running statistics and the saved inverse std: 7 per-channel vectors
_BN_STAT_UPDATE_STREAMS = 7


def _batch_norm(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """A training batch norm is a layer norm of the transposed view: per channel, statistics over N x spatial,
    then normalise (forward: x read, y written; backward: x and dy read, dx written, as the layer norm's). A kernel
    that runs the whole op (cuDNN's, torch's fused NCHW backward; or no kernel name: the op as a whole) is the norm
    family's ``layer_norm`` with rows = C, cols = N x spatial (the family's op vocabulary has no batch norm).

    torch's two-phase kernels are timed each as what it streams, so that the op is counted once however the
    capture groups its kernels into op calls (an allocation between them starts a new call): the reduction is a
    norm ``sum`` over rows = C of its streams (forward x; backward dy and x: cols = 2 x N x spatial), the
    elementwise pass a memory sweep (forward x read, y written; backward dy and x read, dx written), the statistics
    update a norm ``sum`` of its 7 per-channel vectors (norm like the reduction it finishes: in the same call it
    is an ``op_part`` of it). An inference forward reduces nothing: a memory sweep of x read and y written."""
    index, pass_ = _BATCH_NORM[name]
    if index >= len(shapes):
        return None
    x, dtype = shapes[index], _entry_dtype(dtypes[index])
    if dtype is None or len(x) < 2 or not all(isinstance(d, numbers.Integral) for d in x) or min(x) <= 0:
        return None
    channels, numel = x[1], _numel(x)
    streams = 1 if pass_ == "fwd" else 2        # what the reduction reads; the elementwise pass writes one more
    training = pass_ == "bwd" or (name not in _BATCH_NORM_EVAL and str(_arg(args, 5, True)).lower() != "false")
    if not training:
        return _memory_sweep_row(dtype, 2 * numel)
    if kernel_name and _BN_UPDATE_KERNEL.search(kernel_name):
        stats = _entry_dtype(dtypes[3]) if len(dtypes) > 3 else None
        return {"family": "norm", "dtype": stats or "fp32", "op": "sum", "rows": 1,
                "cols": _BN_STAT_UPDATE_STREAMS * channels, "pass": "fwd"}
    if kernel_name and _BN_REDUCE_KERNEL.search(kernel_name):
        return {"family": "norm", "dtype": dtype, "op": "sum", "rows": channels,
                "cols": streams * numel // channels, "pass": "fwd"}
    if kernel_name and _BN_ELEMENTWISE_KERNEL.search(kernel_name):
        return _memory_sweep_row(dtype, (streams + 1) * numel)
    return {"family": "norm", "dtype": dtype, "op": "layer_norm", "rows": channels, "cols": numel // channels,
            "pass": pass_}


#: pooling ops -> (pass, kind, whether it reads or writes int64 indices); kind: "window" (kernel_size, stride,
#: padding[, dilation], ceil_mode args) or "adaptive" (an output_size arg)
_POOLS: dict[str, tuple[str, str, bool]] = {
    "max_pool2d_with_indices": ("fwd", "window", True), "max_pool3d_with_indices": ("fwd", "window", True),
    "max_pool2d_with_indices_backward": ("bwd", "window", True),
    "max_pool3d_with_indices_backward": ("bwd", "window", True),
    "avg_pool2d": ("fwd", "window", False), "avg_pool3d": ("fwd", "window", False),
    "avg_pool2d_backward": ("bwd", "window", False), "avg_pool3d_backward": ("bwd", "window", False),
    "adaptive_max_pool2d": ("fwd", "adaptive", True), "adaptive_max_pool3d": ("fwd", "adaptive", True),
    "adaptive_max_pool2d_backward": ("bwd", "adaptive", True),
    "adaptive_max_pool3d_backward": ("bwd", "adaptive", True),
    "_adaptive_avg_pool2d": ("fwd", "adaptive", False), "_adaptive_avg_pool3d": ("fwd", "adaptive", False),
    "_adaptive_avg_pool2d_backward": ("bwd", "adaptive", False),
    "_adaptive_avg_pool3d_backward": ("bwd", "adaptive", False),
}
_INDEX_BYTES = dtype_bytes("int64")


def _pool_out(size: Shape, kernel: Shape, pad: Shape, stride: Shape, dil: Shape, ceil: bool) -> Shape:
    """Spatial output of a max / average pool (torch's pooling_output_shape: with ceil_mode the last window may
    start in the padding only if it starts inside the input)."""
    out = []
    for i, k, p, s, d in zip(size, kernel, pad, stride, dil):
        span = i + 2 * p - d * (k - 1) - 1
        o = (span + (s - 1 if ceil else 0)) // s + 1
        if ceil and (o - 1) * s >= i + p:
            o -= 1
        out.append(o)
    return tuple(out)


def _pool_forward_out(name: str, kind: str, x: Shape, args: tuple | None) -> Shape | None:
    """The output shape of a pooling forward from its arguments; None when they are absent."""
    nd = 3 if "3d" in name else 2
    if len(x) < nd + 1:
        return None
    spatial = x[-nd:]
    if kind == "adaptive":
        size = _ints(_arg(args, 1), nd)
        return x[:-nd] + size if size else None
    kernel = _ints(_arg(args, 1), nd)
    if kernel is None:
        return None
    stride = _ints(_arg(args, 2), nd) or kernel  # an empty stride means the kernel size
    pad = _ints(_arg(args, 3), nd) or (0,) * nd
    is_max = name.startswith("max_pool")
    dil = (_ints(_arg(args, 4), nd) if is_max else None) or (1,) * nd
    ceil = _as_bool(_arg(args, 5 if is_max else 4, False))
    out = _pool_out(spatial, kernel, pad, stride, dil, ceil)
    return x[:-nd] + out if min(out) > 0 else None


def _pool(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """A pooling kernel does a few comparisons or adds per element it moves: a memory sweep of its tensors, each
    once (the window's overlapping reads hit the caches). Forward: x read, y written (+ the int64 indices of a max
    pool); backward: dy (+ indices) read, dx written. A forward's output comes from its arguments (kernel, stride,
    padding, dilation, ceil_mode; output_size): None without them."""
    pass_, kind, indices = _POOLS[name]
    t = _tensors(shapes, dtypes)
    if not t:
        return None
    dtype = t[0][1]
    if pass_ == "fwd":
        x = t[0][0]
        y = _pool_forward_out(name, kind, x, args)
        if y is None:
            return None
        big, small = x, y
    else:
        if len(t) < 2:
            return None
        (dy, _), (x, _) = t[0], t[1]
        big, small = x, dy
    index_elements = _numel(small) * _INDEX_BYTES / dtype_bytes(dtype) if indices else 0
    return _memory_sweep_row(dtype, _numel(big) + _numel(small) + index_elements)


#: random-number ops (the in-place fills torch.randn / rand / randint / dropout masks become, and their
#: functional forms)
_RANDOM_OPS = frozenset({"normal", "uniform", "random", "bernoulli", "exponential", "geometric", "log_normal",
                         "cauchy"})


def _random(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """A random-number fill (Philox plus a transform per element) is memory bound: a sweep of what it writes (its
    largest tensor) plus its further tensor arguments read (a bernoulli's probabilities, a normal's mean / std)."""
    t = _tensors(shapes, dtypes)
    if not t:
        return None
    written, dtype = max(t, key=lambda item: _numel(item[0]))
    elements = _numel(written) + sum(_numel(s) for s, _ in t[1:])
    return _memory_sweep_row(dtype, elements) if _numel(written) > 0 else None


#: torch's group norm runs as kernels of three kinds (aten/src/ATen/native/cuda/group_norm_kernel.cu): per-group
#: (forward) or per-channel (backward) reductions, a small per-channel parameter pass, and an elementwise pass
_GN_REDUCE_KERNEL = re.compile(r"Moments|ComputeInternalGradients|GammaBeta|reduce", re.IGNORECASE)
_GN_PARAMS_KERNEL = re.compile(r"FusedParams", re.IGNORECASE)
#: native_group_norm(input, weight, bias, N, C, HxW, group, eps); its backward(dY, X, mean, rstd, gamma, N, C, HxW,
#: group, output_mask)
_GROUP_NORM = {"native_group_norm": ("fwd", 0, 6), "native_group_norm_backward": ("bwd", 1, 8)}


def _group_norm(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """A group norm: statistics per (sample, group), then normalise. Each of torch's kernels is timed as what it
    streams, as a batch norm's two phases are: a reduction is a norm ``sum`` (forward: x over rows = N x groups;
    backward: dy and x over rows = N x C), the parameter pass a memory sweep of its per-channel vectors, the
    elementwise pass a memory sweep (forward x read, y written; backward dy and x read, dx written). Without a kernel
    name (a profiler's op call) the op is the norm family's ``layer_norm`` with rows = N x groups. Before, none of
    its kernels had a row and each took the launch floor (a 16 x 64 x 256 x 256 forward: 6 us for 3.9 ms on a T4)."""
    pass_, index, group_index = _GROUP_NORM[name]
    if index >= len(shapes):
        return None
    x, dtype = shapes[index], _entry_dtype(dtypes[index])
    if dtype is None or len(x) < 2 or not all(isinstance(d, numbers.Integral) for d in x) or min(x) <= 0:
        return None
    n, channels, numel = x[0], x[1], _numel(x)
    groups = _arg(args, group_index)
    groups = int(groups) if isinstance(groups, numbers.Integral) and 0 < groups <= channels else 1
    streams = 1 if pass_ == "fwd" else 2
    if kernel_name and _GN_PARAMS_KERNEL.search(kernel_name):
        return _memory_sweep_row("fp32", 4 * n * channels)
    if kernel_name and _GN_REDUCE_KERNEL.search(kernel_name):
        rows = n * groups if pass_ == "fwd" else n * channels
        return {"family": "norm", "dtype": dtype, "op": "sum", "rows": rows, "cols": streams * numel // rows,
                "pass": "fwd"}
    if kernel_name:
        return _memory_sweep_row(dtype, (streams + 1) * numel)
    return {"family": "norm", "dtype": dtype, "op": "layer_norm", "rows": n * groups, "cols": numel // (n * groups),
            "pass": pass_}


#: ops whose kernel reads its input once and writes an output of the same size: scans (one pass with a carry) and
#: reorderings
_SWEEP_OPS = frozenset({"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "_cummax_helper", "_cummin_helper",
                        "flip", "roll"})


def _sweep(name: str, shapes: tuple, dtypes: tuple, args: tuple | None, kernel_name: str | None) -> Row | None:
    """A scan or a reordering is memory bound: its input read, its output written (cummax / cummin also write int64
    indices). Before, their kernels had no row and took the launch floor."""
    t = _tensors(shapes, dtypes)
    if not t or _numel(t[0][0]) <= 0:
        return None
    x, dtype = t[0]
    indices = 2 if name in ("cummax", "cummin", "_cummax_helper", "_cummin_helper") else 0
    return _memory_sweep_row(dtype, (2 + indices) * _numel(x))


_Handler = Callable[[str, tuple, tuple, "tuple | None", "str | None"], "Row | None"]
_HANDLERS: dict[str, _Handler] = {}
for _names, _handler in (
        (("mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_scaled_mm"), _gemm),
        (tuple(GROUPED_OFFSETS), _grouped_gemm),
        (_ATTENTION, _attention), (_NORM, _norm), (_ELEMENTWISE_ALIASES, _elementwise),
        (_FUSED_OPTIMIZERS, _optimizer),
        ((*_CONV_FORWARD_ARGS, "_conv_depthwise2d", "conv_depthwise3d", "convolution_backward",
          "cudnn_convolution_backward_input", "cudnn_convolution_backward_weight"), _conv),
        (_BATCH_NORM, _batch_norm), (_POOLS, _pool), (_RANDOM_OPS, _random), (_GROUP_NORM, _group_norm),
        (_SWEEP_OPS, _sweep)):
    _HANDLERS.update(dict.fromkeys(_names, _handler))


# ---- public API ---------------------------------------------------------------------------------------------------

def classify_op(op: str, shapes: Sequence, dtypes: Sequence, kernel_name: str | None = None, *,
                args: Sequence | None = None, ranks: int | None = None,
                ranks_per_node: int | None = None) -> dict | None:
    """Kernel row (family, dtype, key columns; no hardware) for one op call, or None when no family fits.

    ``op``: ``aten::addmm`` or ``aten.addmm.default``; ``shapes``: one per positional argument (``[]`` for a
    non-tensor, a list of shapes for a tensor list); ``dtypes``: aligned names (``c10::Half``, ``torch.float16``,
    ``""`` for non-tensors; a list of names for a tensor list). ``args``: optional argument values aligned with
    ``shapes`` (dims, is_causal). ``ranks``/``ranks_per_node``: the process group's size and its GPUs per node,
    for collectives.
    """
    if not _may_classify(op):  # views, indexing, ...: no need to build a cache key
        return None
    frozen_args = _freeze_args(args) if args is not None else None
    try:  # the common case, flat int shapes and str dtypes, is hashable after one level of tuple()
        row = _classify_cached(op, tuple(map(tuple, shapes)), tuple(dtypes), kernel_name, frozen_args, ranks,
                               ranks_per_node)
    except TypeError:  # unhashable after one level: tensor lists (nested shapes, dtype lists); freeze recursively
        row = _classify_cached(op, _freeze(shapes), _freeze(dtypes), kernel_name, frozen_args, ranks,
                               ranks_per_node)
    return dict(row) if row is not None else None


def is_convolution_op(op: str) -> bool:
    """Whether ``op`` (``aten::cudnn_convolution``, ``aten.convolution_backward.default``) is a convolution, which
    is timed as its implicit GEMM: its measured time is cuDNN's, so it is no GEMM training row."""
    namespace, name = op_base_name(op)
    return namespace in ("aten", "") and _HANDLERS.get(name) is _conv


def is_stand_in_op(op: str) -> bool:
    """Whether ``op``'s row stands in for a kernel of another kind: a convolution timed as its implicit GEMM, a batch
    or group norm as a layer norm, a pool, a random fill, a scan or a reordering as a copy of its bytes. Its measured
    time is then no training
    sample of that row (a max-pool backward runs at a third of a copy's bandwidth), so importers of measured op
    times should skip it, as they skip convolutions (:func:`is_convolution_op`)."""
    namespace, name = op_base_name(op)
    return namespace in ("aten", "") and _HANDLERS.get(name) in (_conv, _batch_norm, _pool, _random, _group_norm,
                                                                 _sweep)


@functools.lru_cache(maxsize=4096)
def _may_classify(op: str) -> bool:
    namespace, name = op_base_name(op)
    if namespace in _COLLECTIVE_NAMESPACES and name in _COLLECTIVES:
        return True
    return namespace in ("aten", "", "prims") and (name in _HANDLERS or name.startswith("_foreach_"))


@functools.lru_cache(maxsize=65536)
def _classify_cached(op: str, shapes: tuple, dtypes: tuple, kernel_name: str | None, args: tuple | None,
                     ranks: int | None, ranks_per_node: int | None) -> Row | None:
    namespace, name = op_base_name(op)
    if len(dtypes) < len(shapes):
        dtypes = dtypes + (None,) * (len(shapes) - len(dtypes))
    if namespace in _COLLECTIVE_NAMESPACES and name in _COLLECTIVES:
        return _plain(_collective(name, shapes, dtypes, args, ranks, ranks_per_node))
    if name.startswith("_foreach_"):
        return _plain(_optimizer(name, shapes, dtypes, args, kernel_name))
    handler = _HANDLERS.get(name)
    if handler is None or namespace not in ("aten", "", "prims"):
        return None
    return _plain(handler(name, shapes, dtypes, args, kernel_name))


def _plain(row: Row | None) -> Row | None:
    """Python ints in the row (shapes may carry numpy or other integral types)."""
    if row is None:
        return None
    return {k: int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v for k, v in row.items()}


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if hasattr(value, "__index__"):  # numpy ints, torch.SymInt-like ints
        return int(value)
    return value


def _freeze_args(args: Sequence | None) -> tuple | None:
    if args is None:
        return None
    frozen = []
    for value in args:
        value = _freeze(value)
        try:
            hash(value)
        except TypeError:
            value = None  # tensors and other unhashable values carry nothing the classifier reads
        frozen.append(value)
    return tuple(frozen)


# ---- Inductor (Triton) kernels --------------------------------------------------------------------------------------

#: Inductor's pointwise configs give a block 256 elements per warp (torch/_inductor/runtime/triton_heuristics.py,
#: triton_config: num_elements_per_warp=256), so a launch covers about grid x threads x 8 elements
INDUCTOR_ELEMENTS_PER_THREAD = 8
_TRITON_KERNEL = re.compile(r"^triton_(poi|per|red)_(?:fused_?)?(.*?)(?:_\d+)?$")
# Fused aten ops that only move data (no arithmetic): a pointwise kernel fusing nothing else is a copy.
_LAYOUT_OPS = ("_unsafe_view", "_to_copy", "view", "clone", "expand", "transpose", "permute", "unsqueeze", "squeeze",
               "select", "slice", "unbind", "stack", "cat", "t", "copy", "split", "alias", "reshape", "lift_fresh")


def classify_triton_kernel(name: str, grid: Sequence[int] | None, block: Sequence[int] | None,
                           shapes: Sequence = (), dtypes: Sequence = (), backward: bool = False,
                           bytes_moved: int | None = None) -> Row | None:
    """Estimator row of an Inductor-generated Triton kernel, which no aten op describes: its launch shows how much
    it covers, its name which aten ops it fused, its op context (the compiled graph's inputs) the dtype and width.

    With ``bytes_moved`` (what the launch read plus wrote, as its launcher told the capture: the trace's
    ``bytes_read`` + ``bytes_written``), every Triton kernel, pointwise or reduction, is a memory-bound op of that
    many bytes: an elementwise ``copy`` (one stream read, one written) of ``bytes_moved / 2`` bytes a stream, in
    the dtype of the op context, so the elementwise estimator's learned efficiency at that size times it. Fused
    kernels do a few FLOPs per byte at most; the bytes decide. Without them (traces captured before launches
    carried them), the launch's grid:

    ``triton_poi_*`` (pointwise) -> elementwise ``mul`` (a fused kernel reads its operands and writes one result;
    ``copy`` when it fuses only layout ops) over grid x threads x :data:`INDUCTOR_ELEMENTS_PER_THREAD` elements.
    ``triton_per_*`` / ``triton_red_*`` (reductions) -> norm (``rms_norm`` when it fuses ``rsqrt``, ``softmax``
    with ``exp`` and ``amax``, else ``sum``) with one program per row (rows = the grid) and, as columns, the last dim
    of the first graph input whose leading dims make that many rows (at least one column per thread); without one,
    threads x 8 columns (a split reduction's partial rows). None for other kernels (templates, foreach) and
    launches without a grid. The grid does not show how many tensors a kernel reads (Inductor fuses 1 to 12), so
    pointwise kernels are timed as three streams.
    """
    if not grid or not block or _TRITON_KERNEL.match(name) is None:
        return None
    if bytes_moved:
        return classify_launch_bytes(shapes, dtypes, bytes_moved)
    try:
        row = _triton_cached(name, _freeze(grid), _freeze(block), _freeze(shapes), _freeze(dtypes), bool(backward))
    except TypeError:  # an unhashable entry: nothing the classifier reads
        return None
    return dict(row) if row is not None else None


def _context_dtype(shapes: tuple, dtypes: tuple) -> str:
    """The dtype of the op context's largest floating-point tensor (a compiled graph's activations), else fp32."""
    t = [(s, d) for s, d in _tensors(shapes, dtypes) if d not in ("int64", "bool")]
    return max(t, key=lambda item: _numel(item[0]))[1] if t else "fp32"


def classify_launch_bytes(shapes: Sequence = (), dtypes: Sequence = (), bytes_moved: int = 0) -> Row | None:
    """Estimator row of a kernel whose launcher told the bytes it moves (``emulate/triton_bytes.py``: a plain Triton
    kernel's tensor footprint) and that nothing else describes: the memory-bound ``copy`` of those bytes in the
    dtype of its op context (torchao's Float8 cast and scale kernels, a user's Triton kernel). None without bytes."""
    if not bytes_moved or bytes_moved <= 0:
        return None
    try:
        return dict(_triton_bytes_row(_freeze(shapes), _freeze(dtypes), int(bytes_moved)))
    except TypeError:  # an unhashable entry: nothing the classifier reads
        return None


@functools.lru_cache(maxsize=16384)
def _triton_bytes_row(shapes: tuple, dtypes: tuple, bytes_moved: int) -> Row:
    dtype = _context_dtype(shapes, dtypes)
    return _memory_sweep_row(dtype, bytes_moved / dtype_bytes(dtype))


@functools.lru_cache(maxsize=16384)
def _triton_cached(name: str, grid: tuple, block: tuple, shapes: tuple, dtypes: tuple, backward: bool) -> Row | None:
    match = _TRITON_KERNEL.match(name)
    blocks, threads = math.prod(int(g) for g in grid), math.prod(int(b) for b in block)
    if blocks <= 0 or threads <= 0:
        return None
    t = [(s, d) for s, d in _tensors(shapes, dtypes) if d not in ("int64", "bool")]
    dtype = _context_dtype(shapes, dtypes)
    fused = [op for op in match.group(2).split("_") if op]
    if match.group(1) == "poi":
        layout_only = all(any(op in layout.split("_") for layout in _LAYOUT_OPS) for op in fused)
        return {"family": "elementwise", "dtype": dtype, "op": "copy" if layout_only else "mul",
                "numel": blocks * threads * INDUCTOR_ELEMENTS_PER_THREAD}
    rows, cols = blocks, threads * INDUCTOR_ELEMENTS_PER_THREAD
    cols = next((s[-1] for s, _ in t if len(s) >= 2 and _numel(s[:-1]) == rows and s[-1] >= threads), cols)
    op = _triton_reduction_op(fused)
    return {"family": "norm", "dtype": dtype, "op": op, "rows": rows, "cols": int(cols),
            "pass": "bwd" if backward or "backward" in fused else "fwd"}


def _triton_reduction_op(fused: Sequence[str]) -> str:
    """The norm op an Inductor reduction kernel is timed as, from the aten ops its name fuses: ``rms_norm`` when it
    fuses ``rsqrt``, ``softmax`` with ``exp`` and ``amax``, else ``sum``."""
    return "rms_norm" if "rsqrt" in fused else "softmax" if {"exp", "amax"} <= set(fused) else "sum"


#: Inductor's FlexAttention templates, whatever else the kernel fused around them: forward and backward
_FLEX_TEMPLATE = re.compile(r"^triton_tem_\w*?flex_attention(_backward)?(?:_|$)")
#: what a query, key or value can be (the block mask's tensors are integers)
_FLOAT_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
#: how the op context spells the block mask's int32 tensors
_INT32_NAMES = ("torch.int32", "int32", "int", "c10::Int")
#: the head dims an attention kernel runs: a computed one outside them means the shapes were misread
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 512


def flex_attention_pass(name: str) -> str | None:
    """"fwd" / "bwd" for an Inductor FlexAttention template kernel (``triton_tem_fused_flex_attention_0``,
    ``triton_tem_fused_..._flex_attention_backward_..._9``), None for any other kernel."""
    match = _FLEX_TEMPLATE.match(name)
    return None if match is None else ("bwd" if match.group(1) else "fwd")


def classify_flex_attention_kernel(name: str, grid: Sequence[int] | None, shapes: Sequence = (),
                                   dtypes: Sequence = (), bytes_written: int = 0) -> Row | None:
    """Attention row of an Inductor FlexAttention forward template: the attention it computes, not the bytes its
    launcher names (its Q, K and V are template arguments, which the launch's byte count does not see).

    Inductor launches the forward on a grid of (query blocks, batch, query heads)
    (torch/_inductor/kernel/flex/flex_attention.py, ``flex_attention_grid``), so the query is the op context's first
    4-d floating-point tensor of that batch and head count, (batch, heads, seq, head_dim), and the key the next of
    that batch and head dim whose heads divide the query's (grouped-query attention). In a compiled graph whose
    inputs are the layer's activations and weights (:func:`_flex_in_graph`), the shapes come from the block mask, the
    activations and the output the launch wrote. None for the backward template (its launch has no op context: the
    simulator takes its forward's row) and where neither gives the shapes.

    The block mask is computed on the device, whose values the emulation does not have, so the row is causal: the
    densest mask a language model trains with, and the one torchtitan's published runs used (SDPA, causal).
    torchtitan 0.3.0 masks per document (``block_causal``), which skips the blocks across documents: by how much
    depends on the data's document lengths, so its attention is timed too slow by up to that share. A dense mask
    runs twice the causal work."""
    if flex_attention_pass(name) != "fwd" or not grid or len(grid) < 3:
        return None
    batch, heads_q = int(grid[1]), int(grid[2])
    four_d = [(tuple(int(n) for n in s), canonical_dtype(d)) for s, d in zip(shapes, dtypes)
              if isinstance(d, str) and canonical_dtype(d) in _FLOAT_DTYPES and isinstance(s, (list, tuple))
              and len(s) == 4 and all(isinstance(n, numbers.Integral) for n in s)]
    q_at = next((i for i, (s, _) in enumerate(four_d) if s[0] == batch and s[1] == heads_q), None)
    if q_at is None:
        return _flex_in_graph(batch, heads_q, shapes, dtypes, bytes_written)
    (_, _, seq_q, head_dim), dtype = four_d[q_at]
    key = next((s for s, _ in four_d[q_at + 1:]
                if s[0] == batch and s[3] == head_dim and s[1] > 0 and heads_q % s[1] == 0), None)
    if key is None:
        return None
    return {"family": "attention", "dtype": dtype, "batch": batch, "heads_q": heads_q, "heads_kv": int(key[1]),
            "seq_q": int(seq_q), "seq_kv": int(key[2]), "head_dim": int(head_dim), "causal": True, "pass": "fwd"}


def _flex_in_graph(batch: int, heads_q: int, shapes: Sequence, dtypes: Sequence, bytes_written: int) -> Row | None:
    """A FlexAttention forward fused into a compiled graph (torch.compile of a whole block), whose op context holds
    the block's activations, weights and the block mask's int32 tensors but not Q, K or V: the mask's KV-index
    tensor, (batch, mask heads, query blocks, key blocks), its first 4-d int32 tensor of the batch, gives the block
    counts; the sequence is the first (batch, seq, width) activation's whose length the query blocks divide into
    blocks of a power of two (self-attention: the keys are as long); the head dim is what the launch wrote (the
    output, batch x query heads x seq x head dim) per element. Key/value heads are not in the context: taken as
    the query's (the forward's time barely depends on them; the backward's launch names its own)."""
    mask = next((tuple(int(n) for n in s) for s, d in zip(shapes, dtypes)
                 if d in _INT32_NAMES and isinstance(s, (list, tuple)) and len(s) == 4 and int(s[0]) == batch), None)
    if mask is None or not bytes_written or min(mask[2:]) <= 0:
        return None
    q_blocks, kv_blocks = mask[2], mask[3]
    for shape, dtype in zip(shapes, dtypes):
        row_dtype = canonical_dtype(dtype) if isinstance(dtype, str) else None
        if row_dtype not in _FLOAT_DTYPES or not isinstance(shape, (list, tuple)) or len(shape) != 3 \
                or int(shape[0]) != batch:
            continue
        seq = int(shape[1])
        block = seq // q_blocks
        if block * q_blocks != seq or block & (block - 1) or seq % kv_blocks:
            continue
        head_dim, rest = divmod(int(bytes_written), batch * heads_q * seq * dtype_bytes(row_dtype))
        if rest or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
            return None
        return {"family": "attention", "dtype": row_dtype, "batch": batch, "heads_q": heads_q, "heads_kv": heads_q,
                "seq_q": seq, "seq_kv": seq, "head_dim": head_dim, "causal": True, "pass": "fwd"}
    return None


# ---- kernel names -------------------------------------------------------------------------------------------------

_NCCL_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
             "broadcast": "broadcast", "sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv",
             "alltoall": "all_to_all", "reduce": "all_reduce"}
_NCCL_DTYPES = {"f32": "fp32", "float": "fp32", "f16": "fp16", "half": "fp16", "bf16": "bf16",
                "__nv_bfloat16": "bf16", "f64": "fp64", "double": "fp64", "i8": "int8", "u8": "int8",
                "int8": "int8", "uint8": "int8", "i64": "int64", "int64": "int64", "f8e4m3": "fp8_e4m3",
                "f8e5m2": "fp8_e5m2"}

_KERNEL_RULES: list[tuple[re.Pattern[str], str, str | None]] = [
    (re.compile(p, re.IGNORECASE), family, op) for p, family, op in (
        (r"flash_bwd|FlashAttn\w*Bwd|FlashAttentionBackward|fmha.*(bwd|backward)|fmha_cutlassB|attention.*backward"
         r"|cudnn.*sdpa.*(bwd|bprop)", "attention", "bwd"),
        (r"flash_fwd|FlashAttn\w*Fwd|FlashAttentionForward|fmha|AttentionKernel|attention_kernel|cudnn.*sdpa",
         "attention", "fwd"),
        (r"multi_tensor_apply|fused_adam|FusedAdam|fused_sgd|FusedSgd|_fused_adamw", "optimizer", None),
        (r"gemm|gemv|cutlass.*(tensorop|simt)|cublas|nvjet|xmma_|sm\d+_xmma|splitKreduce|dot_kernel", "gemm", None),
        (r"layer_?norm|LayerNorm|GammaBetaBackward|RowwiseMoments", "norm", "layer_norm"),
        (r"rms_?norm|RMSNorm", "norm", "rms_norm"),
        (r"log_?softmax|LogSoftMax", "norm", "log_softmax"),
        (r"softmax|SoftMax", "norm", "softmax"),
        (r"nll_loss|cross_entropy", "norm", "cross_entropy"),
        (r"reduce_kernel|reduce_1Block|ReduceOp", "norm", "sum"),
        (r"dropout", "elementwise", "dropout"),
        (r"CatArrayBatchedCopy|copy_kernel|direct_copy", "elementwise", "copy"),
        (r"FillFunctor|fill_kernel", "elementwise", "fill"),
        (r"elementwise_kernel|elementwise|vectorized_|unrolled_|pointwise|triton_poi", "elementwise", None),
    )
]

_FUNCTOR_OPS = [(re.compile(p, re.IGNORECASE), op) for p, op in (
    (r"AddFunctor|CUDAFunctor_add", "add"), (r"MulFunctor|MulScalarFunctor", "mul"), (r"DivFunctor", "div"),
    (r"sub", "sub"), (r"gelu_backward|GeluBackward", "gelu_backward"), (r"gelu", "gelu"),
    (r"silu_backward", "silu_backward"), (r"silu", "silu"), (r"threshold", "relu_backward"), (r"relu", "relu"),
    (r"sigmoid", "sigmoid"), (r"tanh", "tanh"), (r"where", "where"), (r"neg", "neg"), (r"exp", "exp"),
    (r"rsqrt", "rsqrt"), (r"sqrt", "sqrt"), (r"pow", "pow"), (r"copy|cast", "copy"),
)]


#: a convolution's own kernels (:func:`is_convolution_kernel`): cuDNN's implicit GEMMs (``sm80_xmma_fprop_implicit_
#: gemm_*``, CUTLASS 3's ``*implicit_gemm*``), CUTLASS 2's (``cutlass_tensorop_s1688fprop_optimized_*``), its SIMT and
#: Winograd engines (``implicit_convolve_sgemm``, ``volta_scudnn_*``, ``winograd*``), FFT's complex GEMM
#: (``gcgemm``), ``dgrad_engine`` / ``wgrad_alg0_engine``, torch's native and depthwise convolutions; "convert"
#: (Inductor's ``convert_element_type``, FlashAttention's ``convert_dq``) is no convolution
_CONV_KERNEL = re.compile(r"conv(?!ert)|winograd|implicit_gemm|scudnn|gcgemm|dgrad_engine|wgrad_alg\d|"
                          r"cutlass\w*?(?:fprop|dgrad|wgrad)|xmma_(?:fprop|dgrad|wgrad)", re.IGNORECASE)
#: kernels outside every family whose names the rules below would misread: batch norm (timed through its op),
#: im2col / col2im (the native convolution path's)
_NO_FAMILY_KERNEL = re.compile(r"cudnn::bn_|batch_norm|batchnorm|im2col|col2im", re.IGNORECASE)
_NORM_NAME = re.compile(r"layer_?norm|rms", re.IGNORECASE)
#: Inductor's generated kernels: pointwise, persistent and looped reductions, templates (matmul, flex attention,
#: convolution), and a template's autotuning candidates, named after the template (``triton_mm``, ``triton_bmm``,
#: ``triton_flex_attention``, ``triton_convolution2d``): kind (None for a candidate) and the fused ops
_INDUCTOR_KERNEL = re.compile(r"^triton_(?:(poi|per|red|tem)_(?:fused_?)?"
                              r"|(?=(?:(?:b|add|scaled_|int_)?mm|flex_attention|flex_decoding|convolution\dd)(?:_|$)))"
                              r"(.*?)(?:_\d+)?$")
_INDUCTOR_GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})


def is_convolution_kernel(name: str) -> bool:
    """Whether a kernel name is one of a convolution's own kernels (:data:`_CONV_KERNEL`), in any library's spelling.
    :func:`classify_kernel_name` gives such names no family: a convolution is timed through its op as the implicit
    GEMM of its pass (``conv_parts``), and the kernel-configuration features read its tile as a GEMM's
    (``estimator.kernel_config``). Layout transforms opening a cuDNN call (``nchwToNhwcKernel``) are no convolution
    kernel: they are part of the call."""
    text = name.strip()
    if match := _INDUCTOR_KERNEL.match(text):  # a pointwise kernel fusing a convolution's bias is no convolution
        return match.group(1) in ("tem", None) and "conv" in match.group(2)
    return bool(_CONV_KERNEL.search(text))


def _inductor_kernel_family(match: re.Match[str]) -> dict | None:
    """classify_kernel_name of an Inductor kernel: pointwise ones are elementwise, reductions norms (the op as
    ``classify_triton_kernel`` times them, unless the name shows a norm), templates the GEMM or attention they
    compute; a convolution template has no family (:func:`is_convolution_kernel`)."""
    name, kind, fused = match.string, match.group(1), [op for op in match.group(2).split("_") if op]
    if kind == "poi":
        return _without_none({"family": "elementwise", "op": _functor_op(name)})
    if kind in ("per", "red"):
        op = next((detail for pattern, family, detail in _KERNEL_RULES if family == "norm" and pattern.search(name)),
                  None) or _triton_reduction_op(fused)
        return {"family": "norm", "op": op, "pass": "bwd" if re.search(r"backward|_bw|grad", name) else "fwd"}
    if "flex" in fused and ("attention" in fused or "decoding" in fused):
        return {"family": "attention", "pass": "bwd" if "backward" in fused else "fwd"}
    if "conv" in match.group(2):
        return None
    if _INDUCTOR_GEMM_OPS & set(fused):
        return {"family": "gemm"}
    return None


def _without_none(row: dict) -> dict:
    return {k: v for k, v in row.items() if v is not None}


@functools.lru_cache(maxsize=16384)
def classify_kernel_name(name: str) -> dict | None:
    """What a kernel name alone tells: at least ``family``; ``op``, ``pass`` and ``dtype`` where the name shows them.

    For kernels without op context (no record_shapes, unknown launcher). Every library version's spelling of a kind
    of kernel gives the same family (tests/profiling/test_classify.py has a case per naming scheme): cuBLAS's nvjet
    (``nvjet_sm90_tst_*``, CUDA 12.8's ``nvjet_tst_*``), xmma, CUTLASS 2 and 3, prebuilt and gemv kernels are
    ``gemm``; cuDNN's SDPA engines, FlashAttention 2 and 3 (``flash_fwd_kernel``, ``FlashAttnFwdSm90``) and the
    memory-efficient kernels (``fmha_cutlassF_*``) ``attention``; Inductor's kernels as
    :func:`_inductor_kernel_family` says. None for kernels outside every family (convolutions, see
    :func:`is_convolution_kernel`; indexing, memcpy...).
    """
    text = name.strip()
    if text.startswith("nccl:"):
        op = _NCCL_OPS.get(text[5:].replace("_", "").lower())
        return {"family": "collective", "op": op} if op else {"family": "collective"}
    match = re.match(r"ncclDevKernel_(\w+?)_|ncclKernel_(\w+?)_", text)
    if match or text.startswith("nccl"):
        row: dict[str, Any] = {"family": "collective"}
        if match:
            op = _NCCL_OPS.get((match.group(1) or match.group(2)).lower())
            if op:
                row["op"] = op
        for token in re.split(r"[_()<>,\s*]+", text):
            if token.lower() in _NCCL_DTYPES:
                row["dtype"] = _NCCL_DTYPES[token.lower()]
                break
        return row
    if inductor := _INDUCTOR_KERNEL.match(text):  # a hand-written Triton kernel (triton_rms_norm_kernel) is not one
        return _inductor_kernel_family(inductor)
    if (is_convolution_kernel(text) or _NO_FAMILY_KERNEL.search(text)) and not _NORM_NAME.search(text):
        return None
    for pattern, family, detail in _KERNEL_RULES:
        if not pattern.search(text):
            continue
        row = {"family": family}
        if family == "attention":
            row["pass"] = detail
        elif family == "gemm":
            dtype = _gemm_kernel_dtype(text)
            if dtype:
                row["dtype"] = dtype
        elif family == "norm":
            row["op"] = detail
            row["pass"] = "bwd" if re.search(r"backward|_bw|grad", text, re.IGNORECASE) else "fwd"
        elif family == "elementwise":
            row["op"] = detail or _functor_op(text)
        if family in ("elementwise", "norm", "optimizer"):
            dtype = _template_dtype(text)
            if dtype:
                row["dtype"] = dtype
        return _without_none(row)
    return None


#: GEMM kernel-name fragments -> dtype, tried in order (after the TF32 check): the first match wins
_GEMM_KERNEL_DTYPES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p), d) for p, d in (
    (r"bf16|bfloat16", "bf16"), (r"e4m3", "fp8_e4m3"), (r"e5m2", "fp8_e5m2"),
    (r"hgemm|h1688|h16816|h884|f16|fp16|half|_h\d", "fp16"), (r"dgemm|f64|double", "fp64"),
    (r"i8|int8|igemm", "int8"), (r"sgemm|f32|float", "fp32"),
))


#: nvjet's operand-type tag, by its first letter (A's type): ``tst`` bf16, ``hsh`` / ``hss`` fp16, ``qqtst`` fp8
#: e4m3; ``s`` (fp32 data) may run as fp32 or TF32, which the name does not say
_NVJET_DTYPES = {"t": "bf16", "h": "fp16", "q": "fp8_e4m3"}
_NARROW_DTYPES = ("bf16", "fp8_e4m3", "fp8_e5m2", "fp16")


def _gemm_kernel_dtype(text: str) -> str | None:
    """The dtype a GEMM kernel's name shows: a named 16- or 8-bit type first (``ampere_bf16_s16816gemm_bf16`` is
    bf16 although its instruction shape is also TF32's), then TF32, then the rest (:data:`_GEMM_KERNEL_DTYPES`)."""
    if nvjet := re.match(r"nvjet_(?:sm\d+_)?([a-z])[a-z]*_\d", text):
        return _NVJET_DTYPES.get(nvjet.group(1))
    lowered = text.lower()
    named = next((dtype for pattern, dtype in _GEMM_KERNEL_DTYPES if pattern.search(lowered)), None)
    if named in _NARROW_DTYPES:
        return named
    return "tf32" if _TF32_KERNEL.search(text) else named


def _template_dtype(text: str) -> str | None:
    match = re.search(r"<(?:\d+,\s*)?[^<>]*?\b(float|double|c10::Half|c10::BFloat16|__half|__nv_bfloat16|long)\b",
                      text)
    if not match:
        return None
    return {"float": "fp32", "double": "fp64", "c10::Half": "fp16", "__half": "fp16", "c10::BFloat16": "bf16",
            "__nv_bfloat16": "bf16", "long": "int64"}[match.group(1)]


def _functor_op(text: str) -> str | None:
    head = text.split("(", 1)[0] if not text.startswith("void ") else text[:400]
    for pattern, op in _FUNCTOR_OPS:
        if pattern.search(head):
            return op
    return None
