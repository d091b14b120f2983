"""The convolution check (benchmarks/emulate/conv.py): the family columns it holds out, how it reads stride and
padding off a Kineto trace without argument values, and what it refuses; no emulation is run."""
from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.emulate.conv import (
    backward_sequence,
    forward_geometry,
    held_out_families,
    kineto_args,
    main,
)


def test_the_held_out_family_columns_never_fit_on_the_row_they_predict():
    """Five problems, each twice as slow as predicted on the A10G and as predicted on the T4: held out by GPU,
    the T4 gets the A10G's factor and the A10G the T4's (1); held out by problem, each gets a factor between."""
    call = [{"family": "scudnn", "ms": 1.0, "corrected": True}]
    rows = [{"problem": f"{p}_conv", "gpus": {
        "a10g": {"measured_ms": 2.0, "model_ms": 1.0, "calls": call},
        "t4": {"measured_ms": 1.0, "model_ms": 1.0, "calls": call}}} for p in range(5)]
    held_out_families(rows)
    for row in rows:
        assert row["gpus"]["a10g"]["family_gpu_ms"] == pytest.approx(1.0)
        assert row["gpus"]["t4"]["family_gpu_ms"] > 1.2
        assert 1.0 < row["gpus"]["t4"]["family_problem_ms"] == row["gpus"]["a10g"]["family_problem_ms"] < 2.0


def kineto_ops() -> pd.DataFrame:
    """Two forwards with the same weight and output but strides 1 and 2, each followed by its batch norm, and the
    backward of the strided one inside its autograd node."""
    rows = [
        ("aten::cudnn_convolution", 0, 10, [[8, 64, 28, 28], [64, 64, 3, 3]], 7),
        ("aten::cudnn_batch_norm", 20, 5, [[8, 64, 28, 28]], None),
        ("aten::cudnn_convolution", 30, 10, [[8, 64, 56, 56], [64, 64, 3, 3]], 9),
        ("aten::cudnn_batch_norm", 50, 5, [[8, 64, 28, 28]], None),
        ("CudnnConvolutionBackward", 100, 50, [], 9),
        ("aten::cudnn_convolution_backward_input", 110, 10, [[], [8, 64, 28, 28], [64, 64, 3, 3]], None),
    ]
    return pd.DataFrame([{"name": n, "ts": ts, "dur": d, "input_dims": dims, "sequence_number": seq, "tid": 1,
                          "pid": 1} for n, ts, d, dims, seq in rows])


def test_kineto_geometry_comes_from_the_next_batch_norm_and_the_autograd_sequence():
    ops = kineto_ops()
    geometry = forward_geometry(ops)
    assert [(g["stride"], g["padding"]) for g in geometry.values()] == [([1, 1], [1, 1]), ([2, 2], [1, 1])]
    seq = backward_sequence(ops)
    assert seq[5] == 9
    args = kineto_args("cudnn_convolution_backward_input", ops.loc[5, "input_dims"], list(geometry.values()), seq[5])
    assert args[0] == [8, 64, 56, 56] and args[4] == [2, 2]  # the strided forward, not the first with these shapes


def test_missing_timings_exit_2(tmp_path, capsys):
    assert main(["--root", str(tmp_path), "--no-kineto"]) == 2
    assert "stepcast:" in capsys.readouterr().err
