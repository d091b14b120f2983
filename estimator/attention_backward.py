"""An attention backward kernel's time from its forward's: the forward's rate per FLOP, less the share the backward
loses.

Every attention row a GPU estimator learns from times a forward pass (aiconfigurator's and Vidur's context and
prefill kernels: inference engines run no backward), so a learned model given a backward row (``pass`` "bwd") can only
carry the forward's rate per FLOP over to it. Measured, a backward kernel runs at a lower rate than its forward:
FlashAttention-3's paper (Shah et al., 2024, Figs. 5-6: H100 SXM5, bf16, 16k tokens a batch, head dims 64 and 128, no
mask) times FlashAttention-2, cuDNN and FlashAttention-3 both ways, and the backward's TFLOP/s over the forward's is
0.61-0.82 at 512 tokens, rising to 0.86-0.95 from 8k on, the same for the three implementations within a few points
(cuDNN at head dim 64 the one outlier, above 1 from 2k on). :data:`RATIO` is the median over the six
(implementation, head dim) pairs at each sequence length (:data:`MEASURED`).

So a GPU's backward row is predicted as its forward twin (the same row with ``pass`` "fwd"), scaled by the FLOPs the
backward does over the forward's (:data:`estimator.workload.ATTENTION_BACKWARD_FLOPS`, 2.5: five matrix products
against two) and divided by the ratio at its key/value length (the loop a query block runs; the figures hold the
tokens of a batch fixed, so the length is what changes the kernel's pipeline)::

    time(bwd) = time(fwd twin) x 2.5 / RATIO(seq_kv)

A CPU's rows include measured backwards (this project's profiler), so its model keeps them. The rule is for GPUs
whose training rows hold no backward; ``tests/estimator/test_attention_backward.py`` checks that the shipped
bundles' GPU attention rows are all forwards, so that data with GPU backwards retires the rule rather than being
overridden by it.
"""
from __future__ import annotations

import numpy as np

from stepcast.estimator.frames import KernelColumns, Kernels, by_code, factorize, num, text
from stepcast.estimator.routing import is_gpu
from stepcast.estimator.workload import ATTENTION_BACKWARD_FLOPS

#: FlashAttention-3's paper, Figs. 5-6 (H100 SXM5, bf16, no mask): sequence length -> (backward, forward) TFLOP/s of
#: FlashAttention-2, cuDNN and FlashAttention-3 at head dim 128, then the same at head dim 64
MEASURED: dict[int, tuple[tuple[float, float], ...]] = {
    512: ((214, 309), (305, 497), (316, 467), (198, 282), (266, 335), (272, 333)),
    1024: ((260, 350), (408, 574), (424, 565), (238, 306), (348, 373), (363, 392)),
    2048: ((291, 362), (465, 617), (501, 625), (264, 318), (395, 395), (422, 460)),
    4096: ((310, 368), (499, 609), (542, 638), (279, 321), (417, 408), (453, 476)),
    8192: ((318, 370), (518, 600), (559, 646), (287, 322), (432, 412), (472, 496)),
    16384: ((322, 370), (516, 595), (561, 648), (291, 324), (433, 413), (474, 497)),
}
#: sequence length -> the median over :data:`MEASURED`'s six of backward TFLOP/s over forward TFLOP/s
RATIO: tuple[tuple[int, float], ...] = tuple(
    (tokens, float(np.median([bwd / fwd for bwd, fwd in pairs]))) for tokens, pairs in sorted(MEASURED.items()))
#: the label suffix of a prediction made so
LABEL = "+bwd_from_fwd"


def backward_ratio(seq_kv: np.ndarray) -> np.ndarray:
    """Per row, the backward's rate per FLOP over its forward's at key/value length ``seq_kv`` (:data:`RATIO`,
    interpolated in log2 of the length; held at the ends)."""
    lengths = np.log2([s for s, _ in RATIO])
    ratios = np.array([r for _, r in RATIO])
    return np.interp(np.log2(np.maximum(np.asarray(seq_kv, dtype=np.float64), 1.0)), lengths, ratios)


def gpu_backward_rows(frame: Kernels) -> np.ndarray:
    """Positions of the backward passes on a GPU among an attention family's rows (``estimator.routing.is_gpu``, once
    per distinct device)."""
    if not len(frame) or "pass" not in frame:
        return np.zeros(0, dtype=np.int64)
    codes, devices = factorize(frame["hardware"])
    on_gpu = by_code(np.array([is_gpu(str(d)) for d in devices] + [False]), codes)
    return np.flatnonzero(on_gpu & (text(frame, "pass") == "bwd"))


def with_forward_twins(frame: Kernels, positions: np.ndarray) -> Kernels:
    """``frame`` with the rows at ``positions`` made forward passes (a copy; the frame itself when there are none)."""
    if not len(positions):
        return frame
    passes = text(frame, "pass").copy()
    passes[positions] = "fwd"
    if isinstance(frame, KernelColumns):
        return KernelColumns({**frame.data, "pass": passes})
    return frame.assign(**{"pass": passes})


def backward_from_forward(forward_us: np.ndarray, frame: Kernels, positions: np.ndarray) -> np.ndarray:
    """The times of the backward rows at ``positions`` from their forward twins' predicted times ``forward_us``
    (module docstring)."""
    seq_kv = num(frame, "seq_kv")[positions]
    return np.asarray(forward_us, dtype=np.float64) * ATTENTION_BACKWARD_FLOPS / backward_ratio(seq_kv)
