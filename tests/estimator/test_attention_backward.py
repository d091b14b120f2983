"""estimator.attention_backward: a GPU's attention backward from its forward twin, and the data it relies on."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stepcast import estimator
from stepcast.estimator import attention_backward
from stepcast.estimator.attention_backward import LABEL, RATIO, backward_ratio
from stepcast.estimator.data import load_measurements
from stepcast.estimator.frames import KernelColumns
from stepcast.estimator.workload import ATTENTION_BACKWARD_FLOPS
from stepcast.profiling.hardware import load_catalog


def _rows(hardware: str, seq: int) -> pd.DataFrame:
    base = dict(family="attention", hardware=hardware, dtype="bf16", batch=1, heads_q=32, heads_kv=8, seq_q=seq,
                seq_kv=seq, head_dim=128, causal=True)
    return pd.DataFrame([{**base, "pass": "fwd"}, {**base, "pass": "bwd"}])


@pytest.fixture(scope="module")
def shipped():
    return estimator.load(None)


def test_the_backwards_share_rises_with_length_and_holds_beyond_the_measured_ends():
    ratios = backward_ratio(np.array([64, 512, 1024, 3000, 8192, 16384, 1 << 20]))
    assert np.all(np.diff(ratios) >= 0)
    assert ratios[0] == ratios[1] == RATIO[0][1] and ratios[-1] == ratios[-2] == RATIO[-1][1]
    assert RATIO[0][1] < ratios[3] < RATIO[-1][1]
    assert all(0.5 < r < 1.0 for _, r in RATIO)


@pytest.mark.parametrize("hardware,seq", [("h100-sxm", 512), ("h100-sxm", 16384), ("a100-sxm-80gb", 4096)])
def test_a_gpus_backward_is_its_forward_twin_times_the_flops_over_the_share(shipped, hardware, seq):
    out = shipped.predict_frame(_rows(hardware, seq))
    fwd, bwd = out["predicted_us"].to_numpy()
    assert bwd == pytest.approx(fwd * ATTENTION_BACKWARD_FLOPS / float(backward_ratio(np.array([seq]))[0]))
    assert out["estimator"].iloc[1].endswith(LABEL) and not out["estimator"].iloc[0].endswith(LABEL)


def test_a_cpus_backward_keeps_its_own_model(shipped):
    out = shipped.predict_frame(_rows("cpu-intel-xeon-2c", 256))
    assert not any(label.endswith(LABEL) for label in out["estimator"])


def test_light_columns_and_mixed_families_take_the_same_path(shipped):
    rows = _rows("h100-sxm", 2048)
    gemm = pd.DataFrame([dict(family="gemm", hardware="h100-sxm", dtype="bf16", m=4096, n=4096, k=4096, batch=1)])
    mixed = pd.concat([gemm, rows], ignore_index=True)
    together = shipped.predict_frame(mixed)["predicted_us"].to_numpy()
    alone = shipped.predict_frame(rows)["predicted_us"].to_numpy()
    light = shipped.predict(KernelColumns.from_frame(rows))
    np.testing.assert_allclose(together[1:], alone)
    np.testing.assert_allclose(light, alone)
    assert len(attention_backward.gpu_backward_rows(gemm)) == 0


def test_no_gpu_training_row_times_an_attention_backward(shared_data: Path):
    """The rule stands in for measurements nobody shipped: GPU rows with backwards would retire it."""
    rows = load_measurements(["attention"], root=shared_data)
    catalog = load_catalog()
    on_gpu = rows["hardware"].map(lambda h: h in catalog and catalog[h].kind == "gpu").to_numpy(dtype=bool)
    assert on_gpu.sum() > 1000
    assert set(rows.loc[on_gpu, "pass"]) == {"fwd"}
