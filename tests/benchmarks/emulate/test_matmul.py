"""The matmul check (benchmarks/emulate/matmul.py): which problems it compares and how a forward is timed; no
emulation is run."""
from __future__ import annotations

from benchmarks.emulate.matmul import evaluate, main, matmul_problems
from stepcast.estimator.kernelbench import EAGER, eager_ms

#: eager forward times (ms) per GPU folder
TIMINGS_MS = {"T4_modal": {"19_ReLU.py": 0.03, "1_Square_matrix_multiplication_.py": 4.46,
                           "5_Matrix_scalar_multiplication.py": 2.2, "16_Matmul_with_transposed_A.py": 4.0,
                           "63_conv_standard_2D.py": 2.35}}


def test_matmul_problems_leave_out_the_scalar_product_and_the_convolutions(kernelbench_timings):
    measured = eager_ms(kernelbench_timings(EAGER, TIMINGS_MS))
    assert matmul_problems(measured) == ["1_Square_matrix_multiplication_", "16_Matmul_with_transposed_A"]
    assert matmul_problems(measured, ["16_"]) == ["16_Matmul_with_transposed_A"]


def test_a_forward_is_timed_by_every_kernel_of_its_last_call_and_host_bound_ones_are_left_out(step_trace):
    kernel = {"kind": "kernel", "stream": 0, "grid": [1, 1, 1], "block": [128, 1, 1], "shmem": 0, "lib": None,
              "op": "aten.mm.default", "name": "volta_sgemm_128x64_nn"}
    spec = {"family": "gemm", "dtype": "fp32", "m": 4096, "n": 4096, "k": 4096, "batch": 1}
    trace = step_trace("t4", [{**kernel, "spec": spec}, {**kernel, "spec": spec}])
    from stepcast import estimator

    est = estimator.load()
    row, = evaluate(["1_sq"], {"t4": [(trace, ["1_sq"])]}, {"1_sq": {"t4": 30.0}}, {"t4": 0.1}, est)
    assert row["kernels"] == 1 and row["gemm_kernels"] == ["volta_sgemm_128x64_nn"]
    flops_at_peak_ms = 2 * 4096 ** 3 / 8.1e12 * 1e3  # the T4's fp32 peak: a prediction can only be slower
    assert flops_at_peak_ms < row["predicted_ms"] < 4 * flops_at_peak_ms
    assert evaluate(["1_sq"], {"t4": [(trace, ["1_sq"])]}, {"1_sq": {"t4": 0.05}}, {"t4": 0.1}, est) == []


def test_missing_timings_exit_2(tmp_path, capsys):
    assert main(["--root", str(tmp_path)]) == 2
    assert "stepcast:" in capsys.readouterr().err
