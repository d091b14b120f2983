"""The cluster-occupancy table of a device: what ``cuOccupancyMaxActiveClusters`` answers for each cluster size.

cuBLASLt on Hopper and Blackwell asks the driver how many clusters of each size fit before it picks a kernel, and
those answers move its choice more than any other device fact (``shared/design/driver-emulation.md``: two
plausible tables changed 49 and 53 of 80 H100 choices; cuBLAS 12.1 refuses to start on the emulated H100 because of
its answer for 18-block clusters). The emulated driver models the answer from the GPC layout; the real table
should be captured on each GPU model. This module asks whatever ``libcuda.so.1`` the process loads, so the same
code captures the real table (``python -m stepcast.emulate.driver.real_gpu capture``, on a GPU) and the emulated one
(``compare``, here, in a child process on the emulated device)::

    python -m stepcast.emulate.driver.cluster_probe     # one JSON document: this process's libcuda's table

The probe kernel is an empty PTX entry: the answer depends on the block size, the shared memory per block, the
non-portable-size flag and the device, not on the kernel's code (its registers are what the JIT gives an empty
kernel). Devices without cluster launch (before compute capability 9.0) give an empty table and a reason.
"""
from __future__ import annotations

import ctypes
import json
import struct
import sys
from typing import Any

from stepcast.emulate.driver.build import header_constants

#: cluster sizes asked (blocks per cluster, along x); the portable limit is 8, H100's non-portable limit 16
CLUSTER_SIZES = tuple(range(1, 33))
#: block sizes asked (threads): a small block, and cuBLAS's 384-thread warp-specialised GEMMs
BLOCK_THREADS = (128, 384)
#: dynamic shared memory per block asked (KiB): none, a GEMM's few stages, and most of an SM's 228 KiB
DYNAMIC_SMEM_KIB = (0, 96, 200)
#: the kernel's non-portable-cluster-size flag, unset and set: which error or count a size past 8 (and past the
#: non-portable limit) gets in each case is what a library's probe reads
NON_PORTABLE = (0, 1)
PROBE_NAME = b"stepcast_cluster_probe"
PROBE_PTX = (b".version 7.8\n.target sm_90\n.address_size 64\n"
             b".visible .entry stepcast_cluster_probe()\n{\n\tret;\n}\n\0")


class _LaunchAttribute(ctypes.Structure):
    """cuda.h ``CUlaunchAttribute``: an id, padding to 8 bytes, a 64-byte value union."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_ubyte * 64)]


class _LaunchConfig(ctypes.Structure):
    """cuda.h ``CUlaunchConfig``."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def _constant(name: str) -> int:
    return header_constants("cuda.h", name)[name]


def cluster_table(cuda: ctypes.CDLL | None = None, ordinal: int = 0) -> dict[str, Any]:
    """``{"rows": [{"non_portable", "threads", "smem_kib", "size", "result", "clusters"}...]}`` for every asked
    combination, or
    ``{"rows": [], "skipped": reason}`` where the device has no cluster launch. ``result`` is the CUresult (0 is
    success); ``clusters`` the answer where it succeeded."""
    cuda = cuda or ctypes.CDLL("libcuda.so.1")
    if cuda.cuInit(0) != 0:
        raise RuntimeError("cuInit failed: no usable CUDA device")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        raise RuntimeError(f"cuDeviceGet({ordinal}) failed")
    supported = ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(supported), _constant("CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH"), device)
    if not supported.value:
        return {"rows": [], "skipped": "the device has no cluster launch (compute capability below 9.0)"}
    if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) != 0 or cuda.cuCtxSetCurrent(context) != 0:
        raise RuntimeError("could not make the device's primary context current")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    if cuda.cuModuleLoadData(ctypes.byref(module), PROBE_PTX) != 0:
        raise RuntimeError("cuModuleLoadData could not load the probe's PTX")
    if cuda.cuModuleGetFunction(ctypes.byref(func), module, PROBE_NAME) != 0:
        raise RuntimeError("cuModuleGetFunction found no probe kernel")
    flag = _constant("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED")
    max_smem = _constant("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")
    cluster_id = _constant("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION")
    occupancy = cuda.cuOccupancyMaxActiveClusters
    occupancy.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_LaunchConfig)]
    rows = []
    for non_portable in NON_PORTABLE:
        flag_result = cuda.cuFuncSetAttribute(func, flag, non_portable)
        rows += _sizes(cuda, func, occupancy, max_smem, cluster_id, non_portable, flag_result)
    return {"rows": rows}


def _sizes(cuda: ctypes.CDLL, func: ctypes.c_void_p, occupancy: Any, max_smem: int, cluster_id: int,
           non_portable: int, flag_result: int) -> list[dict[str, Any]]:
    rows = []
    for threads in BLOCK_THREADS:
        for smem_kib in DYNAMIC_SMEM_KIB:
            smem_result = cuda.cuFuncSetAttribute(func, max_smem, smem_kib * 1024)
            for size in CLUSTER_SIZES:
                attr = _LaunchAttribute(id=cluster_id)
                struct.pack_into("III", attr.value, 0, size, 1, 1)
                config = _LaunchConfig(gridDimX=size, gridDimY=1, gridDimZ=1, blockDimX=threads, blockDimY=1,
                                       blockDimZ=1, sharedMemBytes=smem_kib * 1024, hStream=None,
                                       attrs=ctypes.pointer(attr), numAttrs=1)
                clusters = ctypes.c_int(-1)
                result = occupancy(ctypes.byref(clusters), func, ctypes.byref(config))
                set_up = flag_result or smem_result  # a refused attribute is the row's answer
                rows.append({"non_portable": non_portable, "threads": threads, "smem_kib": smem_kib, "size": size,
                             "result": int(set_up or result),
                             "clusters": clusters.value if result == 0 and not set_up else None})
    return rows


def table_differences(real: dict[str, Any], emulated: dict[str, Any]) -> list[dict[str, Any]]:
    """The (threads, smem, size) entries whose result or count differ between two tables (``real`` first)."""
    key = ("non_portable", "threads", "smem_kib", "size")
    theirs = {tuple(r[k] for k in key): r for r in emulated.get("rows", [])}
    out = []
    for row in real.get("rows", []):
        other = theirs.get(tuple(row[k] for k in key))
        if other is None or (other["result"], other["clusters"]) != (row["result"], row["clusters"]):
            out.append({**{k: row[k] for k in key}, "real": [row["result"], row["clusters"]],
                        "emulated": None if other is None else [other["result"], other["clusters"]]})
    return out


if __name__ == "__main__":
    json.dump(cluster_table(), sys.stdout)
