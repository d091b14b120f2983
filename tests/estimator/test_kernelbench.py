"""KernelBench's convolution problems as the family table's training data (estimator/kernelbench.py): which
problems and forwards are read, what the launch floor strips, how a crashed capture is retried without its problem,
and that a broken bundle stops before any capture; no emulation is run."""
from __future__ import annotations

import pytest

from stepcast.emulate.trace import write_trace
from stepcast.estimator import kernelbench
from stepcast.estimator.checksums import BundleIntegrityError
from stepcast.estimator.kernelbench import (
    EAGER,
    capture_all,
    conv_calls,
    conv_problems,
    eager_ms,
    evaluate_problems,
    problem_windows,
    without_conv_rows,
)

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

    monkeypatch.setattr(kernelbench, "capture", fake_capture)
    done, failed = capture_all(["a", "b", "c", "d"], tmp_path, "b200")
    assert runs == [["a", "b", "c", "d"], ["a", "c", "d"]]
    assert [held for _, held in done] == [["a", "c", "d"]] and failed == {"b": "emulation failed: exit -11"}
    monkeypatch.setattr(kernelbench, "MAX_RUNS", 2)
    done, failed = capture_all(["x", "y", "z"], tmp_path, "t4")  # every run fails at its first problem
    assert done == [] and failed["x"] == failed["y"] == "emulation failed: exit -11"
    assert failed["z"].startswith("not captured: 2 runs")


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


def test_a_bundle_that_does_not_load_fails_before_any_capture(kernelbench_timings, tmp_path, monkeypatch):
    """A broken bundle would fail every capture's simulation, after its capture, and each failure is cached."""
    root = kernelbench_timings(EAGER, TIMINGS_MS)
    captured = []
    monkeypatch.setattr(kernelbench, "capture_all", lambda *a, **k: captured.append(a) or ([], {}))
    broken = tmp_path / "bundle"
    broken.mkdir()
    (broken / "manifest.json").write_text("{}")
    with pytest.raises(BundleIntegrityError):
        kernelbench.kernelbench_rows(root, str(broken))
    assert captured == []
