"""The emulated CUDA driver (emulate/driver): its generated proc-address table, its default answer, the integrity
hash the CUDA runtime checks, and the device it reports from the catalog."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

from emulate.driver.build import cuda_include, driver_path, exported_symbol, proc_versions
from emulate.driver.device import attributes, driver_environment
from emulate.shim_build import include_dirs
from profiling.hardware import lookup

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
