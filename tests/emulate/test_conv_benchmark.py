"""The convolution check (emulate/conv_benchmark.py): which problems and forwards it compares, what "today"
strips, and how it reads stride and padding off a Kineto trace without argument values; no emulation is run."""
from __future__ import annotations

import pandas as pd
import pytest

from emulate import conv_benchmark
from emulate.conv_benchmark import (EAGER, backward_sequence, capture_all, conv_calls, conv_problems, eager_ms,
                                    evaluate_problems, forward_geometry, held_out_families, kineto_args, main,
                                    problem_windows, without_conv_rows)
from emulate.trace import write_trace
from estimator.checksums import BundleIntegrityError


#: eager forward times (ms) per GPU folder; the L40S's second provider (Babel) is not one of the benchmark's GPUs
TIMINGS_MS = {"T4_modal": {"19_ReLU.py": 0.03, "63_conv_standard_2D.py": 2.35, "64_conv_tr_1D.py": 0.05,
                           "88_MinGPTNewGelu.py": 1.0},
              "L40S_babel": {"63_conv_standard_2D.py": 1.0}}


def test_only_convolution_problems_on_catalogued_gpus_are_read(kernelbench_timings):
    measured = eager_ms(kernelbench_timings(EAGER, TIMINGS_MS))
    assert measured["63_conv_standard_2D"] == {"t4": 2.35}  # one folder per GPU: L40S_babel is not read
    assert conv_problems(measured) == ["63_conv_standard_2D", "64_conv_tr_1D"]
    assert conv_problems(measured, ["64_"]) == ["64_conv_tr_1D"]


def test_each_problem_is_timed_on_its_last_call():
    # two problems, two calls each: markers close each call
    kinds = ["iteration", "kernel", "iteration", "kernel", "iteration", "kernel", "iteration", "kernel", "iteration"]
    events = [{"kind": k} for k in kinds]
    assert problem_windows(events, 2) == [(2, 4), (6, 8)]
    assert problem_windows(events, 3) is None


def test_today_strips_only_the_convolutions_rows():
    conv = {"kind": "kernel", "op": "aten.convolution_backward.default", "spec": None, "op_part": True}
    gemm = {"kind": "kernel", "op": "aten.mm.default", "spec": {"family": "gemm"}, "op_part": False}
    first = {**conv, "spec": {"family": "gemm"}, "op_part": False}
    out = without_conv_rows([first, conv, gemm])
    assert [(e["spec"], e["op_part"]) for e in out] == [(None, False), (None, False), (gemm["spec"], False)]


def test_a_convolution_call_is_its_first_kernel_and_the_op_part_kernels_after_it():
    conv = {"kind": "kernel", "op": "aten.cudnn_convolution.default"}
    events = [{**conv, "name": "nchwToNhwcKernel", "spec": {"family": "gemm"}},
              {**conv, "name": "sm80_xmma_fprop_implicit_gemm", "spec": None, "op_part": True},
              {"kind": "iteration"},
              {**conv, "name": "conv_depthwise2d_forward_kernel", "spec": {"family": "elementwise"}},
              {"kind": "kernel", "op": "aten.add.Tensor", "name": "add", "spec": {"family": "elementwise"}}]
    calls = conv_calls(events, [3000.0, 0.0, 0.0, 500.0, 100.0], (0, len(events)))
    assert calls == [{"ms": 3.0, "corrected": True, "family": "tc_fprop", "kernels": 2},
                     {"ms": 0.5, "corrected": False, "family": None, "kernels": 1}]


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


def test_a_problem_the_emulation_fails_in_is_left_out_and_the_others_run_again(tmp_path, monkeypatch):
    """The run over a, b, c, d crashes in b (a's two calls completed, but a crashed run has no op table); the
    rerun over a, c, d succeeds; a run budget gives up on the rest."""
    runs = []

    def fake_capture(todo, root, gpu, fresh=False):
        runs.append(list(todo))
        trace = tmp_path / f"{len(runs)}.trace.json"
        crash = "b" in todo or gpu == "t4"
        complete = todo.index("b") if "b" in todo else 0 if crash else len(todo)
        events = [{"kind": "iteration", "step": s} for s in range(complete * 2 + 1)]
        write_trace(trace, rank=0, world_size=1, hardware=gpu,
                    events=[{**ev, "seq": i, "t_ns": i, "gap_ns": 0} for i, ev in enumerate(events)])
        return trace, ("emulation failed: exit -11" if crash else None)

    monkeypatch.setattr(conv_benchmark, "capture", fake_capture)
    done, failed = capture_all(["a", "b", "c", "d"], tmp_path, "b200")
    assert runs == [["a", "b", "c", "d"], ["a", "c", "d"]]
    assert [held for _, held in done] == [["a", "c", "d"]] and failed == {"b": "emulation failed: exit -11"}
    monkeypatch.setattr(conv_benchmark, "MAX_RUNS", 2)
    done, failed = capture_all(["x", "y", "z"], tmp_path, "t4")  # every run fails at its first problem
    assert done == [] and failed["x"] == failed["y"] == "emulation failed: exit -11"
    assert failed["z"].startswith("not captured: 2 runs")


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


@pytest.mark.slow
def test_a_convolution_row_replaces_the_launch_floor(step_trace):
    kernel = {"kind": "kernel", "stream": 0, "grid": [1, 1, 1], "block": [128, 1, 1], "shmem": 0, "lib": None,
              "op": "aten.cudnn_convolution.default", "name": "sm75_xmma_fprop"}
    spec = {"family": "gemm", "dtype": "fp32", "m": 16 * 254 * 254, "n": 64, "k": 27, "batch": 1}
    trace = step_trace("t4", [{**kernel, "spec": None}, {**kernel, "spec": spec}])
    row, = evaluate_problems(["63_conv"], {"t4": [(trace, ["63_conv"])]}, {"63_conv": {"t4": 2.35}}, {"t4": 0.1})
    g = row["gpus"]["t4"]
    assert g["floor_ms"] == pytest.approx(0.002)
    assert g["model_ms"] > 50 * g["floor_ms"]


def test_missing_timings_exit_2(tmp_path, capsys):
    assert main(["--root", str(tmp_path), "--no-kineto"]) == 2
    assert "stepcast:" in capsys.readouterr().err


def test_a_bundle_that_does_not_load_fails_before_any_capture(kernelbench_timings, tmp_path, monkeypatch):
    """A broken bundle would fail every capture's simulation, after its capture, and each failure is cached."""
    root = kernelbench_timings(EAGER, TIMINGS_MS)
    captured = []
    monkeypatch.setattr(conv_benchmark, "capture_all", lambda *a, **k: captured.append(a) or ([], {}))
    broken = tmp_path / "bundle"
    broken.mkdir()
    (broken / "manifest.json").write_text("{}")
    with pytest.raises(BundleIntegrityError):
        conv_benchmark.kernelbench_rows(root, str(broken))
    assert captured == []
