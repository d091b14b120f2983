"""The shim builds from a clean checkout with the system C compiler, once per source version, and defines every
CUDA runtime / driver / cuBLAS / NCCL / cuDNN entry point torch imports."""
from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from emulate import shim_build


@pytest.fixture()
def clean_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_builds_once_into_the_cache_and_reuses_it(clean_cache):
    first = shim_build.shim_path()
    assert first.is_file() and first.name == "libcuda.so.1" and clean_cache in first.parents
    mtime = first.stat().st_mtime_ns
    assert shim_build.shim_path() == first
    assert first.stat().st_mtime_ns == mtime  # not rebuilt


def test_concurrent_builders_agree(clean_cache):
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(shim_build.shim_path())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and results[0].is_file()
    assert not list(results[0].parent.glob(".build-*"))  # no half-written leftovers


def test_generated_stubs_are_weak_so_hand_written_definitions_win():
    src = shim_build.generate_stubs(["cudaFoo", "ncclBar"])
    assert src.count("__attribute__((weak") == 2 and 'sc_unhandled("ncclBar")' in src


def test_missing_headers_give_a_one_line_reason(tmp_path):
    with pytest.raises(shim_build.ShimBuildError) as info:
        shim_build.include_dirs(tmp_path)
    assert "\n" not in str(info.value) and "cuda_runtime_api.h" in str(info.value)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_every_entry_point_torch_imports_is_defined(clean_cache):
    torch_lib = shim_build.nvidia_root().parent / "torch" / "lib"
    wanted: set[str] = set()
    for lib in torch_lib.glob("*.so"):
        out = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name = line.split()[-1].split("@")[0]
            if name.startswith(("cuda", "__cuda", "cublas", "nccl", "cudnn")) or (
                    name.startswith("cu") and name[2:3].isupper() and not name.startswith("cuFile")):
                wanted.add(name)
    out = subprocess.run(["nm", "-D", "--defined-only", str(shim_build.shim_path())], capture_output=True,
                         text=True).stdout
    defined = {line.split()[-1] for line in out.splitlines()}
    assert len(wanted) > 400
    assert sorted(wanted - defined) == []


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("strings") is None, reason="needs binutils")
def test_an_nvml_stand_in_is_built_beside_the_shim(clean_cache):
    """torch's expandable segments call NVML through pointers it never checks: the launcher's LD_LIBRARY_PATH
    (the shim's folder) must find a libnvidia-ml.so.1 with every function libc10_cuda.so names."""
    nvml = shim_build.shim_path().parent / shim_build.NVML_SONAME
    out = subprocess.run(["nm", "-D", "--defined-only", str(nvml)], capture_output=True, text=True).stdout
    defined = {line.split()[-1] for line in out.splitlines()}
    c10_cuda = shim_build.nvidia_root().parent / "torch" / "lib" / "libc10_cuda.so"
    names = subprocess.run(["strings", str(c10_cuda)], capture_output=True, text=True).stdout.splitlines()
    wanted = {s for s in names if s.startswith("nvml") and s.isidentifier()}
    assert len(wanted) == 7 and wanted <= defined
