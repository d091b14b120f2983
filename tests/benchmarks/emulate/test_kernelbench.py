"""The KernelBench check of Triton-kernel timing (benchmarks/emulate/kernelbench.py): which problems and GPUs it
compares, which forward it times, and what it refuses; no emulation is run here."""
from __future__ import annotations

from benchmarks.emulate.kernelbench import (
    candidates,
    compared_gpus,
    evaluate,
    main,
    steady_forward,
)
from stepcast.emulate.trace import write_trace
from stepcast.estimator.kernelbench import COMPILED, device_bound, measured_ms

#: compiled forward times (ms) per GPU folder
TIMINGS_MS = {"T4_modal": {"19_ReLU.py": 0.1, "36_RMSNorm_.py": 3.3, "23_Softmax.py": 0.17,
                           "1_Square_matrix_multiplication_.py": 9.0},
              "B200_together": {"19_ReLU.py": 0.12, "36_RMSNorm_.py": 0.2}}


def test_only_device_bound_non_gemm_problems_on_catalogued_gpus_are_compared(kernelbench_timings):
    measured = measured_ms(kernelbench_timings(COMPILED, TIMINGS_MS))
    assert measured["36_RMSNorm_"] == {"t4": 3.3, "b200": 0.2}
    least = device_bound(measured)
    assert least["t4"] == 0.1 * 3 and abs(least["b200"] - 0.36) < 1e-9
    # the softmax is host bound (under 3 ReLU floors), the matmul is cuBLAS, not Triton
    assert candidates(measured) == ["36_RMSNorm_"]


def test_the_timed_forward_is_the_last_full_one():
    kinds = ["iteration", "kernel", "iteration", "kernel", "kernel", "iteration", "kernel", "iteration"]
    events = [{"kind": k} for k in kinds]
    assert steady_forward(events) == (5, 7)
    assert steady_forward(events[:3]) is None


def test_a_forward_with_other_kernels_than_tritons_is_left_out(tmp_path):
    events = [{"kind": "iteration", "step": s} for s in range(3)]
    kernel = {"kind": "kernel", "stream": 0, "grid": [1, 1, 1], "block": [128, 1, 1], "shmem": 0, "lib": None,
              "op": None, "spec": None}
    events[2:2] = [{**kernel, "name": "triton_poi_fused_add_0"}, {**kernel, "name": "void at::native::pool_kernel"}]
    trace = tmp_path / "rank0.trace.json"
    write_trace(trace, rank=0, world_size=1, hardware="t4",
                events=[{**ev, "seq": i, "t_ns": i, "gap_ns": 0} for i, ev in enumerate(events)])
    row = evaluate("46_Average_Pooling_3D", {"t4": trace}, {"t4": 4.0})
    assert row["skipped"].startswith("not only Triton kernels (void at::native::pool_kernel")
    assert evaluate("46_Average_Pooling_3D", {"t4": "emulation failed: X"}, {"t4": 4.0})["skipped"] == \
        "t4: emulation failed: X"


def test_each_gpu_the_problem_is_device_bound_on_gets_its_own_capture():
    """What a looped reduction rereads from DRAM depends on the target's L2, so each compared GPU is captured."""
    assert compared_gpus({"t4": 3.3, "b200": 0.2, "l40s": 1.2}, {"t4": 0.3, "b200": 0.36, "l40s": 0.3}) == \
        ["t4", "l40s"]


def test_missing_timings_or_an_unknown_problem_exit_2(tmp_path, capsys, kernelbench_timings):
    assert main(["--root", str(tmp_path)]) == 2
    kernelbench_timings(COMPILED, TIMINGS_MS)
    assert main(["--root", str(tmp_path), "--problems", "23_Softmax"]) == 2
    assert "stepcast:" in capsys.readouterr().err


def test_the_medians_per_gpu_are_over_the_problems_compared_there():
    from benchmarks.emulate.kernelbench import medians

    rows = [{"problem": "a", "gpus": {"t4": {"measured_ms": 1.0, "bytes_ms": 0.5, "grid_ms": 2.0}}},
            {"problem": "b", "gpus": {"t4": {"measured_ms": 2.0, "bytes_ms": 2.2, "grid_ms": 2.0},
                                      "l40s": {"measured_ms": 1.0, "bytes_ms": 0.9, "grid_ms": 1.0}}},
            {"problem": "c", "skipped": "not only Triton kernels"}]
    m = medians(rows)
    assert m["t4"]["bytes"]["n"] == 2 and abs(m["t4"]["bytes"]["median_abs_error_pct"] - 30.0) < 1e-9
    assert abs(m["t4"]["grid"]["median_abs_error_pct"] - 50.0) < 1e-9
    assert m["l40s"]["bytes"]["n"] == 1 and abs(m["l40s"]["bytes"]["median_abs_error_pct"] - 10.0) < 1e-9


def test_a_kept_capture_is_reused_while_the_code_that_made_it_is_the_same(tmp_path, monkeypatch):
    """A capture made by other capture code (a classification or byte count changed since) is made again, without
    --fresh; one made by the same code is reused, whatever else changed."""
    import stepcast.emulate.emulation as emulation
    from benchmarks.emulate import kernelbench

    runs = []

    def emulate_script(script, args, hardware, trace_dir, **_):
        runs.append(hardware)
        (trace_dir / "rank0.trace.json").parent.mkdir(parents=True, exist_ok=True)
        (trace_dir / "rank0.trace.json").write_text("{}")
        return {"ok": True}

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(emulation, "emulate_script", emulate_script)
    code = {"digest": "a"}
    monkeypatch.setattr(kernelbench, "tree_digest", lambda *_, **__: code["digest"])
    problem = tmp_path / "36_RMSNorm_.py"
    first = kernelbench.capture(problem, hardware="t4")
    assert kernelbench.capture(problem, hardware="t4") == first and runs == ["t4"]
    code["digest"] = "b"
    assert kernelbench.capture(problem, hardware="t4") == first and runs == ["t4", "t4"]
    assert kernelbench.capture(problem, hardware="t4", fresh=True) == first and len(runs) == 3
    stamp = tmp_path / "kernelbench" / problem.stem / kernelbench.CAPTURE_STAMP
    for damaged in ("{not json", "[]", '{"code": 7}', "\udcff"):   # a stopped write or an edit: made again
        stamp.write_text(damaged, errors="surrogateescape")
        runs.clear()
        assert kernelbench.capture(problem, hardware="t4") == first and runs == ["t4"]
        assert kernelbench.capture(problem, hardware="t4") == first and runs == ["t4"]   # and stamped anew


def test_the_capture_code_is_the_capture_layer_not_the_simulator():
    from benchmarks.emulate.e2e.cache import tree_digest
    from benchmarks.emulate.kernelbench import CAPTURE_CODE

    paths, left_out = CAPTURE_CODE
    assert {"emulate", "profiling"} <= set(paths) and {"emulate/sim", "emulate/host_call_costs.json"} <= set(left_out)
    assert tree_digest(*CAPTURE_CODE) != tree_digest(("emulate",))
    # a file left out by name: the digest is the folder's without it
    assert tree_digest(("emulate",), ("emulate/host_call_costs.json",)) != tree_digest(("emulate",))
