"""Features: vectorised, wave quantisation steps at multiples of the SM count, unseen GPUs described by their yaml."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stepcast.estimator.features import features
from stepcast.profiling.hardware import lookup


def gemm(hardware: str, m, n) -> pd.DataFrame:
    m, n = np.broadcast_arrays(np.atleast_1d(m), np.atleast_1d(n))
    return pd.DataFrame({"family": "gemm", "hardware": hardware, "dtype": "bf16", "m": m, "n": n, "k": 4096,
                         "batch": 1})


def test_quantisation_overhead_steps_when_tiles_cross_the_sm_count():
    sms = lookup("h100-sxm").sm_count  # 132: 128x128 tiles of a (128*132) x 128 output fill exactly one wave
    f = features("gemm", gemm("h100-sxm", [128 * sms, 128 * (sms + 1)], 128))
    assert abs(f.column("log2_overhead_128x128")[0]) < 1e-5  # no padding, last wave full
    # one tile more opens a second wave of 132 slots for 133 tiles: overhead 264/133, just under 2x
    assert abs(2 ** f.column("log2_overhead_128x128")[1] - 2 * sms / (sms + 1)) < 1e-4
    assert np.all(f.column("log2_overhead_min") <= f.column("log2_overhead_128x128"))


def test_quantisation_overhead_counts_padding_of_a_partial_tile():
    f = features("gemm", gemm("h100-sxm", 64, 128))  # a 64-row output in a 128-row tile: half the slots wasted
    tiles = 1  # one 128x128 tile, one wave of 132 slots of which 1 is used
    assert abs(2 ** f.column("log2_overhead_128x128")[0] - 132 * 128 * 128 / (64 * 128) / tiles) < 1e-2


def test_one_row_per_kernel_and_finite_for_an_unmeasured_gpu():
    f = features("gemm", gemm("b200", np.arange(1, 1001), 512))
    assert f.matrix.shape[0] == 1000 and f.matrix.dtype == np.float32
    spec = f.column("hw_sm_count")
    assert np.all(spec == lookup("b200").sm_count)
    assert np.isfinite(f.matrix).all()


def test_baseline_is_faster_on_faster_hardware():
    h100 = features("gemm", gemm("h100-sxm", 8192, 8192)).baseline_us
    a100 = features("gemm", gemm("a100-sxm-80gb", 8192, 8192)).baseline_us
    assert h100[0] < a100[0]


def test_collective_features_separate_intra_and_inter_node():
    frame = pd.DataFrame({"family": "collective", "hardware": "h100-sxm", "dtype": "bf16", "op": "all_reduce",
                          "bytes": 2**26, "ranks": [8, 16], "ranks_per_node": 8})
    f = features("collective", frame)
    assert f.column("inter_node").tolist() == [0.0, 1.0]
    assert f.column("log2_link_gbps")[0] > f.column("log2_link_gbps")[1]  # NVLink beats the network
