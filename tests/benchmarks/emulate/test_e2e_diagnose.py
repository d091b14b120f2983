"""The diagnosis tables: in-step vs predicted per label and family, GEMM rows, and the sweep's throughput by kernel
duration (the throttling signature)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.emulate.e2e import diagnose


def in_step_rows() -> pd.DataFrame:
    return pd.DataFrame([
        # 2 GFLOP GEMM x 10 layers, 1 ms each in the trace, pass scale 1.1
        {"family": "gemm", "hardware": "p4", "m": 1000, "n": 1000, "k": 1000, "batch": 1, "runtime_us": 1000.0,
         "repeat": 10, "pass_scale": 1.1, "model": "a", "sample": "P4/a", "aten_op": "addmm"},
        {"family": "norm", "hardware": "p4", "op": "layer_norm", "rows": 8, "cols": 8, "pass": "fwd",
         "runtime_us": 50.0, "repeat": 10, "pass_scale": 1.1, "model": "a", "sample": "P4/a", "aten_op": "LayerNorm"},
    ])


def test_label_family_table_sets_in_step_time_beside_the_prediction():
    rows = in_step_rows()
    table = diagnose.label_family_table(rows, np.array([2000.0, 50.0])).set_index("family")
    assert table.loc["gemm", "trace_ms"] == pytest.approx(10.0)
    assert table.loc["gemm", "in_step_ms"] == pytest.approx(11.0)
    assert table.loc["gemm", "predicted_ms"] == pytest.approx(20.0)
    assert table.loc["gemm", "ratio"] == pytest.approx(0.55)
    assert table.loc["gemm", "tflops"] == pytest.approx(20.0 / 11.0)  # 20 GFLOP in 11 ms
    assert np.isnan(table.loc["norm", "tflops"])


def test_gemm_table_lists_only_gemms_with_their_throughput():
    table = diagnose.gemm_table(in_step_rows(), np.array([2000.0, 50.0]))
    assert len(table) == 1 and table.loc[0, "op"] == "addmm"
    assert table.loc[0, "ratio"] == pytest.approx(1100.0 / 2000.0)
    assert table.loc[0, "tflops"] == pytest.approx(2.0 / 1.1)


def test_sweep_by_duration_shows_throughput_falling_as_kernels_run_longer():
    # the same 10 GFLOP GEMM timed short (1 ms: 10 TFLOPS) and long-running ones throttled (100 ms: 1 TFLOPS);
    # a 0.1 GFLOP GEMM is below the size the table looks at
    sweep = pd.DataFrame({"family": "gemm", "gemm_op": ["linear"] * 3, "m": [1000, 10000, 100], "n": [1000] * 3,
                          "k": [5000, 500, 500], "batch": 1, "runtime_us": [1000.0, 100000.0, 10.0]})
    table = diagnose.sweep_by_duration(sweep)
    assert table["rows"].tolist() == [1, 1]
    assert table["median_tflops"].tolist() == pytest.approx([10.0, 0.1])
    assert [c.left for c in table["duration_ms"]] == [0.0, 50.0]


def test_an_unknown_gpu_is_one_line_and_status_2(monkeypatch, capsys):
    monkeypatch.setattr(diagnose.instep, "in_step_rows", lambda root=None: in_step_rows())
    assert diagnose.main(["h100-sxm"]) == 2
    assert capsys.readouterr().err.startswith("stepcast: ")


def test_labels_that_disagree_on_gemm_speed_bound_any_shared_factor():
    # one label's GEMMs ran at half the predicted time, another's at the predicted time: the best shared factor
    # (2/3) is off by a third on both
    labels = pd.DataFrame({"family": ["gemm", "gemm", "norm"], "ratio": [0.5, 1.0, 3.0]})
    lo, hi, floor = diagnose.shared_factor_floor(labels)
    assert (lo, hi) == (0.5, 1.0)
    assert floor == pytest.approx(1.0 / 3.0)
    assert np.isnan(diagnose.shared_factor_floor(labels[labels["family"] == "norm"])[2])
