"""benchmarks/emulate/torch_matrix.py on faked environments and runs (no environment is made here): its arguments, the
result table, resuming from the cache, install failures, how a failed run is classed, and the GEMM kernels read from a
trace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.emulate import torch_matrix
from benchmarks.emulate.compat import Row
from benchmarks.emulate.torch_venv import Venv, VenvError
from stepcast.emulate.trace import write_trace


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))


def test_versions_are_releases_written_in_full_and_deduplicated():
    assert torch_matrix.parse_versions("2.6.0, 2.15.0,2.6.0") == ["2.6.0", "2.15.0"]
    for bad in ("2.6", "", "2.6.0,latest"):
        with pytest.raises(ValueError, match="--versions: expected torch releases written X.Y.Z"):
            torch_matrix.parse_versions(bad)


def test_workloads_default_to_the_readme_example_and_the_compat_subset():
    names = [r.name for r in torch_matrix.parse_workloads(None)]
    assert names == ["readme_gpt", "hf_llama_eager", "compile_default", "ddp", "resnet50_bf16_cl"]
    assert torch_matrix.WORKLOADS["ddp"].nproc == 2
    with pytest.raises(ValueError, match="unknown workload.*nope; expected some of readme_gpt"):
        torch_matrix.parse_workloads("readme_gpt,nope")


def fake_venv(version: str, tmp_path: Path, torchvision: str = "0.21.0") -> Venv:
    return Venv(version=version, path=tmp_path / f"torch-{version}", torch=f"{version}+cu124", cuda="12.4",
                packages={"transformers": "4.57.0", "torchvision": torchvision},
                notes={} if torchvision else {"torchvision": "no torchvision release installs with torch 9.9.9"})


class FakeRuns:
    """Stands in for run_workload: a result per (torch, workload), counting calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, venv: Venv, row: Row, hardware: str, timeout_s: float) -> dict:
        self.calls.append((venv.version, row.name))
        if row.name == "ddp":
            return {"status": torch_matrix.FAILS, "why": "RuntimeError: boom", "wall_s": 1.0}
        return {"status": torch_matrix.WORKS, "why": "", "iteration_time_ms": 6.5, "peak_memory_bytes": 3 * 2**29,
                "fallback_kernels": 156, "fallback_kernels_steady": 104,
                "gemm_kernels": [["nvjet_tst_256x128_64x4_2x4_v_bz_coopA_TNT", 48]], "wall_s": 9.0}


def prepare_for(tmp_path: Path):
    def prepare(version: str) -> Venv:
        if version == "2.5.0":
            raise VenvError("torch 2.5.0: installing torch==2.5.0 failed: ERROR: No matching distribution")
        return fake_venv(version, tmp_path)
    return prepare


def test_matrix_prints_a_row_per_release_and_workload_and_writes_json(tmp_path, capsys):
    runs, out = FakeRuns(), tmp_path / "matrix.json"
    code = torch_matrix.main(["--versions", "2.6.0,2.5.0", "--workloads", "readme_gpt,ddp", "--json", str(out),
                              "--markdown"], prepare=prepare_for(tmp_path), run=runs)
    assert code == 0 and runs.calls == [("2.6.0", "readme_gpt"), ("2.6.0", "ddp")]
    doc = json.loads(out.read_text())
    rows = {(r["version"], r["workload"]): r for r in doc["rows"]}
    assert doc["hardware"] == "h100-sxm" and len(rows) == 4
    assert rows[("2.6.0", "readme_gpt")]["status"] == "works" and rows[("2.6.0", "readme_gpt")]["cuda"] == "12.4"
    assert rows[("2.6.0", "ddp")]["why"] == "RuntimeError: boom"
    assert rows[("2.5.0", "ddp")]["status"] == "fails" and rows[("2.5.0", "ddp")]["why"].startswith("install: ")
    printed = capsys.readouterr()
    assert "| 2.6.0+cu124 | 12.4 | readme_gpt | works | 6.500 | 1.50 | 156 | " \
           "nvjet_tst_256x128_64x4_2x4_v_bz_coopA_TNT (48) |  |" in printed.out
    assert "[1/4] torch 2.6.0 readme_gpt: running" in printed.err


def test_a_second_matrix_at_the_same_commit_runs_nothing_again(tmp_path):
    first, again = FakeRuns(), FakeRuns()
    args = ["--versions", "2.6.0", "--workloads", "readme_gpt"]
    torch_matrix.main(args, prepare=prepare_for(tmp_path), run=first)
    torch_matrix.main(args, prepare=prepare_for(tmp_path), run=again)
    torch_matrix.main([*args, "--fresh"], prepare=prepare_for(tmp_path), run=again)
    assert len(first.calls) == 1 and len(again.calls) == 1  # the cached result, then --fresh


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    assert torch_matrix.main(["--versions", "2.6"], prepare=prepare_for(tmp_path), run=FakeRuns()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stepcast: --versions:")


def test_a_workload_whose_package_has_no_release_for_the_torch_says_so(tmp_path):
    venv = fake_venv("9.9.9", tmp_path, torchvision="")
    result = torch_matrix.run_workload(venv, torch_matrix.WORKLOADS["resnet50_bf16_cl"], "h100-sxm", 1.0)
    assert result == {"status": "not installed", "why": "no torchvision release installs with torch 9.9.9"}


@pytest.mark.parametrize(("done", "status", "start"), [
    ({"error": "stepcast: CUDA runtime 12.6 is not known", "returncode": 2, "output": ""}, "refused", "stepcast:"),
    ({"error": "RuntimeError: CUDA error", "returncode": 3, "output": ""}, "fails", "RuntimeError"),
    ({"error": "stepcast: the script failed on rank(s) [0] (exit -11)", "returncode": 3,
      "output": "stepcast: the script failed on rank(s) [0] (exit -11)"}, "fails", "crashed (SIGSEGV)")])
def test_failed_runs_are_classed_refused_failed_or_crashed(done, status, start):
    got_status, why = torch_matrix.outcome(done)
    assert got_status == status and why.startswith(start)


def test_gemm_kernels_are_read_from_rank_0s_trace_most_launched_first(tmp_path):
    def kernel(seq: int, name: str, family: str | None) -> dict:
        return {"seq": seq, "kind": "kernel", "t_ns": seq, "stream": 0, "name": name, "grid": [1, 1, 1],
                "block": [1, 1, 1], "shmem": 0, "spec": {"family": family} if family else None}
    events = [kernel(1, "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNN", "gemm"),
              kernel(2, "void at::native::vectorized_elementwise_kernel<4>(int)", None),
              kernel(3, "nvjet_sm90_tst_128x64_64x8_2x1_v_bz_NNT", None),  # gemm by its name
              kernel(4, "nvjet_sm90_tst_128x64_64x8_2x1_v_bz_NNT", None)]
    write_trace(tmp_path / "rank0.trace.json", rank=0, world_size=1, hardware="h100-sxm", events=events)
    assert torch_matrix.gemm_kernels(tmp_path) == [["nvjet_sm90_tst_128x64_64x8_2x1_v_bz_NNT", 2],
                                                   ["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNN", 1]]
    assert torch_matrix.gemm_kernels(tmp_path / "none") == []


def test_table_names_cutlass_kernels_by_the_kernel_they_wrap():
    inner = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8"
    assert torch_matrix.short_name(f"void cutlass::Kernel2<{inner}>(Params)", 80) == inner
    nvjet = "nvjet_sm90_tst_64x32_64x16_2x4_h_bz_NTT"
    assert torch_matrix.short_name(nvjet) == nvjet
    assert torch_matrix.short_name("void scal_kernel<float, float, 1, true>(cublasScalParamsF)", 20) \
        == "scal_kernel<float..."


def test_the_committed_page_is_what_the_committed_results_give():
    """docs/torch_matrix.md is generated (python -m benchmarks.emulate.torch_matrix --page ... --from ...): never edited
    by hand, never stale against docs/results/torch_matrix.json."""
    import json

    from benchmarks.emulate.torch_matrix import page
    from stepcast.profiling.paths import REPO_ROOT

    results = json.loads((REPO_ROOT / "docs" / "results" / "torch_matrix.json").read_text())
    assert (REPO_ROOT / "docs" / "torch_matrix.md").read_text() == page(results)
    assert {r["status"] for r in results["rows"]} == {"works"}  # the acceptance: every release runs every workload
