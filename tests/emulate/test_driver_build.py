"""The emulated CUDA driver (emulate/driver): its build (once per source version, into the cache, from a clean
checkout with the system C compiler), its generated proc-address table and stubs, its default answer, the integrity
hash the CUDA runtime checks, the device it reports from the catalog, and every CUDA / NCCL / NVML entry point
torch imports."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stepcast.emulate.driver import build
from stepcast.emulate.driver.build import cuda_include, driver_path, exported_symbol, include_dirs, proc_versions
from stepcast.emulate.driver.device import attributes, driver_environment
from stepcast.profiling.hardware import load_catalog, lookup

CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_SUPPORTED = 0, 500, 801


@pytest.fixture(scope="module")
def driver() -> ctypes.CDLL:
    return ctypes.CDLL(str(driver_path()), mode=ctypes.RTLD_LOCAL)


def _address(lib: ctypes.CDLL, symbol: str) -> int:
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


def test_proc_table_lists_each_abi_of_a_name_in_version_order():
    typedefs = (cuda_include(include_dirs()) / "cudaTypedefs.h").read_text()
    versions = proc_versions(typedefs)
    assert versions["cuStreamGetCaptureInfo"] == [10010, 11030, 12030]
    assert [exported_symbol("cuStreamGetCaptureInfo", i) for i in range(3)] == [
        "cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v3"]
    assert "cuGreenCtxCreate" in versions  # typedefs written "CUresult(CUDAAPI *" count too


@pytest.mark.parametrize(("version", "symbol"), [(10010, "cuStreamGetCaptureInfo"),
                                                 (11030, "cuStreamGetCaptureInfo_v2"),
                                                 (12030, "cuStreamGetCaptureInfo_v3"),
                                                 (13000, "cuStreamGetCaptureInfo_v3")])
def test_get_proc_address_answers_the_abi_of_the_requested_version(driver, version, symbol):
    pfn = ctypes.c_void_p()
    status = ctypes.c_int(-1)
    rc = driver.cuGetProcAddress_v2(b"cuStreamGetCaptureInfo", ctypes.byref(pfn), version, ctypes.c_uint64(0),
                                    ctypes.byref(status))
    assert (rc, status.value) == (CUDA_SUCCESS, 0)
    assert pfn.value == _address(driver, symbol)


def test_get_proc_address_refuses_a_version_older_than_the_name(driver):
    pfn = ctypes.c_void_p()
    assert driver.cuGetProcAddress_v2(b"cuStreamGetCaptureInfo", ctypes.byref(pfn), 9000, ctypes.c_uint64(0),
                                      None) == CUDA_ERROR_NOT_FOUND
    assert driver.cuGetProcAddress_v2(b"cuNoSuchEntryPoint", ctypes.byref(pfn), 13000, ctypes.c_uint64(0),
                                      None) == CUDA_ERROR_NOT_FOUND


def test_entry_points_not_emulated_answer_not_supported(driver):
    array, descriptor = ctypes.c_void_p(), ctypes.create_string_buffer(64)
    assert driver.cuArrayCreate_v2(ctypes.byref(array), descriptor) == CUDA_ERROR_NOT_SUPPORTED


def test_integrity_hash_reproduces_the_published_sample(driver):
    """HMAC-MD2 over ZLUDA's documented sample input (dark_api: anti_zluda_hash_impl_sample) gives its answer."""
    import struct

    head = struct.pack("<4I3QQ", 12020, 0x2B4A, 0x4D08, 0x2B78, 0x00007FF8C80717F0, 0x00007FF8C825E4B0,
                       0x00007FF8C7DD0AD0, 0x64A365EE)
    guid = bytes([0x67, 0x22, 0xCB, 0xCF, 0xC6, 0x61, 0xF2, 0x92, 0x74, 0xD6, 0xED, 0x23, 0x2A, 0x32, 0x13, 0x1C])
    message = head + guid + struct.pack("<3I", 0, 4, 0)
    out = ctypes.create_string_buffer(16)
    driver.stepcast_integrity_hmac(message, ctypes.c_size_t(len(message)), out)
    assert int.from_bytes(out.raw, "little") == 0xEAF1313342BFCD84A7C34628F214707A


_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
out = {"init": lib.cuInit(0)}
count = ctypes.c_int(); lib.cuDeviceGetCount(ctypes.byref(count)); out["count"] = count.value
name = ctypes.create_string_buffer(256); lib.cuDeviceGetName(name, 256, 0); out["name"] = name.value.decode()
for attr, key in ((16, "sms"), (75, "cc_major"), (120, "cluster_launch")):
    v = ctypes.c_int(); lib.cuDeviceGetAttribute(ctypes.byref(v), attr, 0); out[key] = v.value
free, total = ctypes.c_size_t(), ctypes.c_size_t()
lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)); out["free0"] = free.value
ptr = ctypes.c_uint64(); out["alloc"] = lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30))
lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)); out["free1"] = free.value; out["total"] = total.value
kind = ctypes.c_uint()
out["ptr_attr"] = lib.cuPointerGetAttribute(ctypes.byref(kind), 2, ptr); out["kind"] = kind.value
host = ctypes.create_string_buffer(64)
out["host_attr"] = lib.cuPointerGetAttribute(ctypes.byref(kind), 2, ctypes.c_uint64(ctypes.addressof(host)))
print(json.dumps(out))
"""


def _probe(env_update: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPCAST_GPU", "STEPCAST_DRIVER"))}
    env.update(env_update)
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(driver_path())], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_driver_reports_the_catalog_device_and_accounts_its_memory():
    spec = lookup("h100-sxm")
    out = _probe(driver_environment(spec))
    assert out["init"] == CUDA_SUCCESS and out["count"] == 1
    assert out["name"] == "NVIDIA H100 80GB HBM3"
    assert (out["sms"], out["cc_major"], out["cluster_launch"]) == (spec.sm_count, 9, 1)
    assert out["total"] == spec.memory_bytes and out["free0"] - out["free1"] == 1 << 30
    assert (out["ptr_attr"], out["kind"]) == (CUDA_SUCCESS, 2)  # CU_MEMORYTYPE_DEVICE
    assert out["host_attr"] != CUDA_SUCCESS  # an unregistered host pointer is not the driver's


def test_without_a_device_description_the_driver_reports_no_device():
    out = _probe({})
    assert out["init"] == 100 and out["count"] == 0  # CUDA_ERROR_NO_DEVICE


def test_device_attributes_follow_the_catalog_and_compute_capability():
    h100, l4 = attributes(lookup("h100-sxm")), attributes(lookup("l4"))
    assert h100["MULTIPROCESSOR_COUNT"] == 132 and l4["MULTIPROCESSOR_COUNT"] == 58
    assert h100["MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"] == 227 * 1024 and l4["MAX_BLOCKS_PER_MULTIPROCESSOR"] == 24
    assert (h100["CLUSTER_LAUNCH"], l4["CLUSTER_LAUNCH"]) == (1, 0)
    with pytest.raises(ValueError, match="not a GPU"):
        attributes(lookup("cpu-intel-xeon-2c"))


def test_every_catalog_gpu_has_the_limits_of_its_compute_capability():
    gpus = [spec for spec in load_catalog().values() if spec.kind == "gpu"]
    assert all(attributes(spec)["MULTIPROCESSOR_COUNT"] == spec.sm_count for spec in gpus)
    blackwell_ultra = attributes(lookup("gb300-nvl72"))  # sm_103: B300 and GB300
    assert (blackwell_ultra["COMPUTE_CAPABILITY_MAJOR"], blackwell_ultra["COMPUTE_CAPABILITY_MINOR"]) == (10, 3)


@pytest.fixture()
def clean_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    build.driver_key.cache_clear()
    return tmp_path / "cache"


@pytest.mark.slow
def test_builds_once_into_the_cache_and_reuses_it(clean_cache):
    first = build.driver_path()
    assert first.is_file() and first.name == "libcuda.so.1" and clean_cache in first.parents
    mtime = first.stat().st_mtime_ns
    assert build.driver_path() == first
    assert first.stat().st_mtime_ns == mtime  # not rebuilt


@pytest.mark.slow
def test_concurrent_builders_agree(clean_cache):
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(build.nccl_path())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3, "a builder thread raised"   # each thread returned a path
    assert len(set(results)) == 1 and results[0].is_file()
    assert not list(results[0].parent.glob(".build-*"))  # no half-written leftovers
    assert not list(results[0].parent.glob(".libcuda.so.*"))  # nor a temporary link name


def test_generated_stubs_are_weak_so_hand_written_definitions_win():
    src = build.generate_stubs(["cuFoo", "ncclBar"], answer=801, log="fk_log_unsupported", banner="test")
    assert src.count("__attribute__((weak") == 2 and 'fk_log_unsupported("ncclBar")' in src and "return 801" in src


def test_missing_headers_give_a_one_line_reason(tmp_path):
    with pytest.raises(build.BuildError) as info:
        build.include_dirs(tmp_path)
    assert "\n" not in str(info.value) and "cuda.h" in str(info.value)


def test_headers_are_found_in_either_wheel_layout(tmp_path):
    """CUDA 13 wheels put every header under nvidia/cu13/include; CUDA 12 wheels one folder per library."""
    for folder, headers in (("cuda_runtime/include", ("cuda.h", "cudaTypedefs.h", "cuda_runtime_api.h")),
                            ("nccl/include", ("nccl.h",))):
        (tmp_path / folder).mkdir(parents=True)
        for header in headers:
            (tmp_path / folder / header).write_text("")
    dirs = build.include_dirs(tmp_path)
    assert tmp_path / "cuda_runtime/include" in dirs and tmp_path / "nccl/include" in dirs
    assert build.CSRC / "compat" in dirs  # no crt/host_defines.h in the runtime wheel


def test_nccl_stubs_cover_every_entry_point_nccl_h_declares():
    names = build.nccl_entry_points(build.nccl_headers(build.include_dirs()))
    assert {"ncclAllReduce", "ncclCommInitRank", "ncclGroupStart", "ncclCommSplit"} <= set(names)
    assert not any(n.startswith("pnccl") for n in names)


def _undefined(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines()}


def _defined(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines()}


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_every_driver_and_nccl_entry_point_torch_imports_is_defined():
    """torch links the CUDA runtime, cuBLAS and cuDNN for real; what it imports from the driver (through the
    runtime) and from NCCL (the preload) must all be there."""
    torch_lib = build.nvidia_root().parent / "torch" / "lib"
    wanted = {n for lib in torch_lib.glob("*.so") for n in _undefined(lib) if n.startswith("nccl")}
    assert len(wanted) > 20
    assert sorted(wanted - _defined(build.nccl_path())) == []
    cudart = next((build.nvidia_root()).glob("*/lib/libcudart.so.1*"))
    driver_calls = {n for n in _undefined(cudart) if n.startswith("cu") and n[2:3].isupper()}
    assert sorted(driver_calls - _defined(build.driver_path())) == []


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("strings") is None, reason="needs binutils")
def test_an_nvml_stand_in_is_built_beside_the_driver():
    """torch's expandable segments call NVML through pointers it never checks: the launcher's LD_LIBRARY_PATH
    (the driver's folder) must find a libnvidia-ml.so.1 with every function libc10_cuda.so names."""
    nvml = build.driver_path().parent / build.NVML_SONAME
    c10_cuda = build.nvidia_root().parent / "torch" / "lib" / "libc10_cuda.so"
    names = subprocess.run(["strings", str(c10_cuda)], capture_output=True, text=True).stdout.splitlines()
    wanted = {s for s in names if s.startswith("nvml") and s.isidentifier()}
    assert len(wanted) == 7 and wanted <= _defined(nvml)


def test_builder_threads_naming_the_link_at_once_all_succeed(tmp_path):
    """Several threads of one process make the driver's link name at the same moment: each uses a temporary name of
    its own, so none loses its temporary link to another's cleanup (a FileNotFoundError in a builder thread)."""
    target = tmp_path / "libcuda.so.1"
    target.write_text("")
    link = tmp_path / "libcuda.so"
    errors: list[BaseException] = []
    for _ in range(40):
        link.unlink(missing_ok=True)
        start = threading.Barrier(8)

        def make() -> None:
            start.wait()
            try:
                build._link_name(link, target.name)
            except OSError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=make) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == [] and os.readlink(link) == target.name
    assert not list(tmp_path.glob(".libcuda.so.*"))
