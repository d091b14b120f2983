"""What a kernel has to do, independent of any device: FLOPs, bytes moved, and for collectives bytes on the wire.

Vectorised over whole columns of a single-family frame (numpy, no per-row Python). These figures feed both the
analytical roofline estimator and the learned models' features, so they are defined once, here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stepcast.estimator.frames import Kernels, factorize, flag, num, text
from stepcast.profiling.families import dtype_bytes

# Elementwise op -> (input tensors read, FLOPs per output element). Unknown ops: one input, one FLOP.
ELEMENTWISE_OPS: dict[str, tuple[float, float]] = {
    "add": (2, 1), "sub": (2, 1), "mul": (2, 1), "div": (2, 1), "maximum": (2, 1), "minimum": (2, 1),
    "where": (3, 1), "pow": (2, 4), "addcmul": (3, 2), "lerp": (3, 3),
    "relu": (1, 1), "neg": (1, 1), "abs": (1, 1), "copy": (1, 0), "cast": (1, 0), "fill": (0, 0),
    "gelu": (1, 8), "gelu_tanh": (1, 10), "silu": (1, 5), "sigmoid": (1, 4), "tanh": (1, 6), "exp": (1, 4),
    "sqrt": (1, 2), "rsqrt": (1, 2), "dropout": (1.25, 3),  # dropout also writes a 1-byte mask per element
    "gelu_backward": (2, 10), "silu_backward": (2, 7), "relu_backward": (2, 1), "threshold_backward": (2, 1),
    "swiglu": (2, 6), "rope": (2, 3),
    "add_scalar": (1, 1), "sub_scalar": (1, 1), "mul_scalar": (1, 1), "div_scalar": (1, 1), "pow_scalar": (1, 4),
    "clamp": (1, 2), "log": (1, 4), "nan_to_num": (1, 2), "compare": (1.625, 1), "logical": (1.625, 1),
    "sigmoid_backward": (2, 3), "tanh_backward": (2, 3),  # compare/logical: two inputs, a 1-byte output
}

# Norm op -> (fwd reads, fwd writes, bwd reads, bwd writes) in units of rows*cols elements, FLOPs per element fwd/bwd.
NORM_OPS: dict[str, tuple[float, float, float, float, float, float]] = {
    "layer_norm": (1, 1, 2, 1, 8, 12),
    "rms_norm": (1, 1, 2, 1, 5, 9),
    "softmax": (1, 1, 2, 1, 5, 4),
    "log_softmax": (1, 1, 2, 1, 5, 4),
    "cross_entropy": (1, 0, 1, 1, 6, 5),
    "sum": (1, 0, 0, 1, 1, 0),
    "mean": (1, 0, 0, 1, 1, 0),
}

# Optimizer op -> (fp32 state bytes read+written per parameter, FLOPs per parameter). The parameter itself is read
# and written and its gradient read in the row's dtype; optimizer states are kept in fp32.
OPTIMIZER_OPS: dict[str, tuple[float, float]] = {
    "adamw": (16, 12), "adam": (16, 12), "sgd": (8, 3), "adagrad": (8, 5), "rmsprop": (8, 6), "lion": (8, 5),
}

# A single torch._foreach_* op (what the unfused "foreach" optimizers and grad clipping launch, one op per update
# term; profiling.classify names them foreach_<op>) -> (tensor lists read + written per element, FLOPs per element),
# in the row's dtype, for the forms optimizers call (in place, Scalar / ScalarList / one other list). An AdamW step is
# seven of these; timing each as a whole optimizer step over-predicted it 2-3 times. Unknown foreach ops: 3 lists.
FOREACH_OPS: dict[str, tuple[float, float]] = {
    **{op: (2, 1) for op in ("add", "sub", "mul", "div", "sqrt", "neg", "reciprocal", "abs", "sign", "exp", "pow",
                             "clamp_min", "clamp_max", "copy")},
    "lerp": (3, 2), "maximum": (3, 1), "minimum": (3, 1), "addcmul": (4, 2), "addcdiv": (4, 2), "norm": (1, 2),
    "zero": (1, 0),
}
FOREACH_DEFAULT = (3.0, 1.0)

# Collective op -> (algorithm bandwidth factor, latency steps per rank as a function of ranks n). The factor is
# nccl-tests' bus-bandwidth factor: bytes each rank moves over its link = size * factor(n), where size is the larger
# of the send and receive buffers per rank.
COLLECTIVE_BUS_FACTOR: dict[str, str] = {
    "all_reduce": "2*(n-1)/n",
    "all_gather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_to_all": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "send_recv": "1",
}


@dataclass(frozen=True)
class Work:
    """Device-independent work of every row (arrays of the frame's length)."""

    flops: np.ndarray
    bytes: np.ndarray  # bytes read + written in device memory
    wire_bytes: np.ndarray  # bytes each rank sends over its link (collectives; 0 otherwise)
    latency_steps: np.ndarray  # sequential communication steps (collectives; 0 otherwise)


def _col(frame: Kernels, name: str) -> np.ndarray:
    return num(frame, name)


def _op_table(ops: pd.Series, table: dict, default: tuple) -> np.ndarray:
    """Rows of ``table`` for each op, matching by the op's base name ("adamw_fused" -> "adamw")."""
    codes, uniques = factorize(ops)
    uniques = [str(u) for u in uniques]
    rows = []
    for op in uniques:
        base = op if op in table else op.rsplit("_", 1)[0] if op.rsplit("_", 1)[0] in table else None
        rows.append(table[base] if base else default)
    return np.asarray(rows, dtype=np.float64).reshape(len(uniques), len(default))[codes]


def element_bytes(frame: Kernels) -> np.ndarray:
    codes, uniques = factorize(frame["dtype"])
    return np.array([dtype_bytes(str(d)) for d in uniques], dtype=np.float64)[codes]


def gemm(frame: Kernels) -> Work:
    m, n, k, b = (_col(frame, c) for c in ("m", "n", "k", "batch"))
    eb = element_bytes(frame)
    zeros = np.zeros(len(frame))
    return Work(2.0 * m * n * k * b, b * (m * k + k * n + m * n) * eb, zeros, zeros)


def causal_fraction(seq_q: np.ndarray, seq_kv: np.ndarray, causal: np.ndarray) -> np.ndarray:
    """Share of the seq_q x seq_kv score matrix a causal mask keeps, the mask bottom-right aligned as in FlashAttention
    and attention over a KV cache: query i (from 0) sees seq_kv - seq_q + i + 1 keys, none while that is not positive.
    That is 1 - (seq_q - 1) / (2 seq_kv) for seq_q <= seq_kv (about one half when equal, close to 1 for a short query
    over a long cache) and (seq_kv + 1) / (2 seq_q) for seq_q > seq_kv (the first seq_q - seq_kv queries see
    nothing). (torch's ``is_causal=True`` is top-left aligned when seq_q != seq_kv: not what these rows describe.)"""
    sq, skv = np.maximum(seq_q, 1.0), np.maximum(seq_kv, 1.0)
    kept = np.where(sq <= skv, 1.0 - (sq - 1.0) / (2.0 * skv), (skv + 1.0) / (2.0 * sq))
    return np.where(causal, np.clip(kept, 0.0, 1.0), 1.0)


#: FLOPs of an attention backward over its forward's: five matrix products (recomputed scores, dV, dP, dQ, dK)
#: against two, FlashAttention's count
ATTENTION_BACKWARD_FLOPS = 2.5


def attention(frame: Kernels) -> Work:
    b, hq, hkv, sq, skv, d = (_col(frame, c) for c in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"))
    causal = flag(frame, "causal")
    bwd = text(frame, "pass") == "bwd"
    eb = element_bytes(frame)
    fwd_flops = 4.0 * b * hq * sq * skv * d * causal_fraction(sq, skv, causal)
    flops = np.where(bwd, ATTENTION_BACKWARD_FLOPS * fwd_flops, fwd_flops)
    q_side, kv_side = b * hq * sq * d * eb, b * hkv * skv * d * eb
    moved = np.where(bwd, 4.0, 2.0) * (q_side + kv_side)  # fwd: Q,O + K,V; bwd: Q,O,dO,dQ + K,V,dK,dV
    zeros = np.zeros(len(frame))
    return Work(flops, moved, zeros, zeros)


def elementwise(frame: Kernels) -> Work:
    numel = _col(frame, "numel")
    table = _op_table(frame["op"], ELEMENTWISE_OPS, (1.0, 1.0))
    eb = element_bytes(frame)
    zeros = np.zeros(len(frame))
    return Work(numel * table[:, 1], numel * eb * (table[:, 0] + 1.0), zeros, zeros)


def norm(frame: Kernels) -> Work:
    rows, cols = _col(frame, "rows"), _col(frame, "cols")
    table = _op_table(frame["op"], NORM_OPS, NORM_OPS["layer_norm"])
    bwd = text(frame, "pass") == "bwd"
    eb = element_bytes(frame)
    elems = rows * cols
    reads = np.where(bwd, table[:, 2], table[:, 0])
    writes = np.where(bwd, table[:, 3], table[:, 1])
    flops = elems * np.where(bwd, table[:, 5], table[:, 4])
    moved = (elems * (reads + writes) + 2.0 * rows) * eb  # + per-row statistics
    zeros = np.zeros(len(frame))
    return Work(flops, moved, zeros, zeros)


def _optimizer_rates(op: str) -> tuple[float, float, float]:
    """(tensors moved in the row's dtype, fp32 state bytes, FLOPs) per parameter of one optimizer op."""
    if op.startswith("foreach_"):
        lists, flops = FOREACH_OPS.get(op[len("foreach_"):], FOREACH_DEFAULT)
        return lists, 0.0, flops
    base = op if op in OPTIMIZER_OPS else op.rsplit("_", 1)[0]  # "adamw_fused" -> "adamw"
    state, flops = OPTIMIZER_OPS.get(base, OPTIMIZER_OPS["adamw"])
    return 3.0, state, flops  # the parameter read and written, its gradient read


def optimizer(frame: Kernels) -> Work:
    """Whole optimizer steps (``adamw_fused``, ``sgd_foreach``...: the parameter and its gradient in the row's dtype,
    plus the fp32 states), or one ``foreach_<op>`` over the parameters (FOREACH_OPS)."""
    params = _col(frame, "params")
    codes, uniques = factorize(frame["op"])
    rates = np.array([_optimizer_rates(str(u)) for u in uniques], dtype=np.float64).reshape(len(uniques), 3)[codes]
    zeros = np.zeros(len(frame))
    return Work(params * rates[:, 2], params * (rates[:, 0] * element_bytes(frame) + rates[:, 1]), zeros, zeros)


def bus_factor(names: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    n = np.maximum(ranks, 1.0)
    ring = (n - 1.0) / n
    factor = np.ones(len(n))
    factor = np.where(names == "all_reduce", 2.0 * ring, factor)
    factor = np.where(np.isin(names, ["all_gather", "reduce_scatter", "all_to_all"]), ring, factor)
    return np.where(n <= 1.0, 0.0, factor)


#: collectives whose traffic across nodes is each GPU's own (a send, an all-to-all's pairs): one NIC carries it
POINT_TO_POINT = ("all_to_all", "send_recv")


def network_rails(names: np.ndarray, ranks: np.ndarray, ranks_per_node: np.ndarray,
                  nics_per_node: np.ndarray) -> np.ndarray:
    """NICs whose bandwidth a collective's traffic across nodes adds up (a node here is an NVLink domain, the ranks
    ``ranks_per_node`` counts; its NICs the catalog's ``network_nics_per_node`` of each host it joins):
    a ring or tree runs one channel per NIC that its node's ranks reach, min(ranks per node, NICs); a send or an
    all-to-all goes over its GPU's one NIC (nccl-tests#267: all-to-all does not aggregate NICs). 1 within a node."""
    n = np.maximum(ranks, 1.0)
    on_node = np.minimum(np.maximum(ranks_per_node, 1.0), n)
    rails = np.minimum(on_node, np.maximum(nics_per_node, 1.0))  # both at least 1
    return np.where(np.isin(names, POINT_TO_POINT) | (n <= on_node), 1.0, rails)


def latency_steps(names: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Sequential steps: the fewer of a ring's and a tree's (2 log2 n, up and down), as NCCL's tuner picks the
    faster algorithm, within an NVLink domain as across domains (its tree, or NVLS on NVSwitch; an NVL72 rack is one
    domain, where a ring over 72 GPUs would count 142 steps of an all-reduce and time it above one over two racks).
    Up to 4 ranks the ring has the fewer; at 8, 6 against 7. Where the ranks lie changes the link each step takes
    (:func:`estimator.analytical.link_bandwidth`), not the count."""
    n = np.maximum(ranks, 1.0)
    ring = n - 1.0
    tree = np.ceil(np.log2(n))
    steps = np.minimum(ring, 2.0 * tree)
    steps = np.where(names == "all_reduce", 2.0 * steps, steps)
    steps = np.where(np.isin(names, ["send_recv", "broadcast", "reduce"]), np.minimum(steps, 1.0 + tree), steps)
    return np.where(n <= 1.0, 0.0, steps)


def collective(frame: Kernels) -> Work:
    size, ranks = (_col(frame, c) for c in ("bytes", "ranks"))
    names = text(frame, "op")
    wire = size * bus_factor(names, ranks)
    flops = np.where(np.isin(names, ["all_reduce", "reduce_scatter", "reduce"]), size, 0.0)
    return Work(flops / 2.0, 2.0 * size, wire, latency_steps(names, ranks))


WORK = {
    "gemm": gemm,
    "attention": attention,
    "elementwise": elementwise,
    "norm": norm,
    "collective": collective,
    "optimizer": optimizer,
}


def work(family: str, frame: Kernels) -> Work:
    """Work of every row of a frame holding only ``family``'s rows."""
    return WORK[family](frame)
