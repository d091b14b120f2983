"""The virtual device as the emulated driver reports it, from the hardware catalog (conf/hardware/<id>.yaml).

The driver (csrc/device.c) reads ``STEPCAST_DRIVER_ATTRS`` (``<CUdevice_attribute id>=<value>,...``, ids taken
from cuda.h's enum, so no number is copied by hand), ``STEPCAST_GPU_NAME``, ``STEPCAST_GPU_MEM_BYTES`` and
``STEPCAST_DEVICE_COUNT`` (:func:`driver_environment`). Figures the catalog does not hold are the documented
per-compute-capability limits of the CUDA C Programming Guide ("Technical Specifications per Compute Capability"):
threads and blocks per SM, shared memory per block.

Modelled, not measured: ``STEPCAST_DRIVER_GPCS`` (how many GPCs the SMs are split over), which decides the answers
of ``cuOccupancyMaxActiveClusters`` and so cuBLAS's cluster choices on sm_90+. A table captured on a real GPU of
each model should replace it (see /work/shared/design/driver-emulation.md).
"""
from __future__ import annotations

from functools import cache

from dataclasses import dataclass

from stepcast.emulate.driver.build import header_constants
from stepcast.profiling.hardware import SM_LIMITS, HardwareSpec
from stepcast.errors import InputError

#: GPCs of the full die (sm_90: GH100 has 8; sm_100: two dies of 8). Modelled: see the module docstring.
_GPCS_BY_MAJOR = {9: 8, 10: 16}


@dataclass(frozen=True)
class DeviceFigures:
    """What the driver reports of a catalog GPU beside its per-capability limits."""
    name: str                 # what torch reports: the vendor alias the catalog lists first, as nvidia-smi shows it
    memory_bytes: int
    l2_bytes: int
    smem_per_sm: int
    clock_khz: int
    mem_clock_khz: int        # the memory clock that, with the bus width, gives the catalog's bandwidth
    mem_bus_width: int


def figures(spec: HardwareSpec) -> DeviceFigures:
    """The device's figures from its catalog entry; a non-GPU entry is a one-line ValueError."""
    if spec.kind != "gpu" or spec.compute_capability is None:
        raise InputError(f"hardware '{spec.id}' is a {spec.kind}, not a GPU: choose a GPU id from conf/hardware/")
    bus_width = 5120 if "hbm" in spec.name.lower() or spec.memory_bandwidth_gbps > 1000 else 384
    return DeviceFigures(
        name=next((a for a in spec.aliases if a.upper().startswith("NVIDIA")), spec.name),
        memory_bytes=spec.memory_bytes, l2_bytes=int(spec.l2_cache_mib * 2**20),
        smem_per_sm=int((spec.shared_memory_per_sm_kib or 100) * 1024), clock_khz=int(spec.max_clock_mhz * 1000),
        mem_clock_khz=int(spec.memory_bandwidth_gbps * 1e9 / (2 * bus_width / 8) / 1e3), mem_bus_width=bus_width)


@cache
def attribute_ids() -> dict[str, int]:
    """CU_DEVICE_ATTRIBUTE_<NAME> -> id, parsed from the wheel's cuda.h."""
    prefix = "CU_DEVICE_ATTRIBUTE_"
    return {name[len(prefix):]: value for name, value in header_constants("cuda.h", prefix).items()
            if name != prefix + "MAX"}


def attributes(spec: HardwareSpec) -> dict[str, int]:
    """The values of the device attributes that libraries read, by CU_DEVICE_ATTRIBUTE_ name."""
    fig = figures(spec)
    cc = tuple(spec.compute_capability)
    if cc not in SM_LIMITS:
        raise InputError(f"hardware '{spec.id}': compute capability {cc[0]}.{cc[1]} has no limits table in "
                         f"profiling/hardware.py SM_LIMITS (known: {sorted(SM_LIMITS)})")
    threads_sm, blocks_sm, optin_kib = SM_LIMITS[cc]
    smem_sm = fig.smem_per_sm
    optin = optin_kib * 1024 if optin_kib else smem_sm - 1024
    l2 = fig.l2_bytes
    ampere = cc >= (8, 0)
    hopper = cc >= (9, 0)
    fp64 = spec.peak_tflops.get("fp64") or spec.peak_tflops["fp32"]
    return {
        "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
        "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
        "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024, "TOTAL_CONSTANT_MEMORY": 64 * 1024, "WARP_SIZE": 32,
        "MAX_PITCH": 2**31 - 1, "MAX_REGISTERS_PER_BLOCK": 65536, "CLOCK_RATE": fig.clock_khz,
        "TEXTURE_ALIGNMENT": 512, "GPU_OVERLAP": 1, "MULTIPROCESSOR_COUNT": spec.sm_count,
        "KERNEL_EXEC_TIMEOUT": 0, "INTEGRATED": 0, "CAN_MAP_HOST_MEMORY": 1, "COMPUTE_MODE": 0,
        "SURFACE_ALIGNMENT": 512, "CONCURRENT_KERNELS": 1, "ECC_ENABLED": 1, "PCI_BUS_ID": 1, "PCI_DEVICE_ID": 0,
        "TCC_DRIVER": 0, "MEMORY_CLOCK_RATE": fig.mem_clock_khz,
        "GLOBAL_MEMORY_BUS_WIDTH": fig.mem_bus_width, "L2_CACHE_SIZE": l2,
        "MAX_THREADS_PER_MULTIPROCESSOR": threads_sm, "MAX_BLOCKS_PER_MULTIPROCESSOR": blocks_sm,
        "ASYNC_ENGINE_COUNT": 2, "UNIFIED_ADDRESSING": 1,
        "PCI_DOMAIN_ID": 0, "TEXTURE_PITCH_ALIGNMENT": 32, "COMPUTE_CAPABILITY_MAJOR": cc[0],
        "COMPUTE_CAPABILITY_MINOR": cc[1], "STREAM_PRIORITIES_SUPPORTED": 1, "GLOBAL_L1_CACHE_SUPPORTED": 1,
        "LOCAL_L1_CACHE_SUPPORTED": 1, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": smem_sm,
        "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536, "MANAGED_MEMORY": 1, "MULTI_GPU_BOARD": 0,
        "MULTI_GPU_BOARD_GROUP_ID": 0, "HOST_NATIVE_ATOMIC_SUPPORTED": 0,
        "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO": max(1, round(spec.peak_tflops["fp32"] / fp64)),
        "PAGEABLE_MEMORY_ACCESS": 0, "CONCURRENT_MANAGED_ACCESS": 1, "COMPUTE_PREEMPTION_SUPPORTED": 1,
        "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 0, "COOPERATIVE_LAUNCH": 1,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": optin, "CAN_FLUSH_REMOTE_WRITES": 0, "HOST_REGISTER_SUPPORTED": 1,
        "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": 0, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": 1,
        "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 1, "GENERIC_COMPRESSION_SUPPORTED": int(ampere),
        "MAX_PERSISTING_L2_CACHE_SIZE": (l2 * 3 // 4) if ampere else 0,
        "MAX_ACCESS_POLICY_WINDOW_SIZE": 134213632 if ampere else 0, "GPU_DIRECT_RDMA_SUPPORTED": 1,
        "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS": 1, "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024 if ampere else 0,
        "SPARSE_CUDA_ARRAY_SUPPORTED": 1, "READ_ONLY_HOST_REGISTER_SUPPORTED": 1,
        "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED": 1, "MEMORY_POOLS_SUPPORTED": 1, "MEMPOOL_SUPPORTED_HANDLE_TYPES": 1,
        "CLUSTER_LAUNCH": int(hopper), "DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED": 1,
        "CAN_USE_64_BIT_STREAM_MEM_OPS": 1, "CAN_USE_STREAM_WAIT_VALUE_NOR": 1, "DMA_BUF_SUPPORTED": 1,
        "IPC_EVENT_SUPPORTED": 1, "MEM_SYNC_DOMAIN_COUNT": 4 if hopper else 1,
        "TENSOR_MAP_ACCESS_SUPPORTED": int(hopper), "UNIFIED_FUNCTION_POINTERS": 1, "NUMA_ID": -1,
        "HOST_NUMA_ID": 0,
    }


def driver_environment(spec: HardwareSpec, device_count: int = 1) -> dict[str, str]:
    """Variables that make the emulated driver report ``device_count`` devices of model ``spec``."""
    ids = attribute_ids()
    values = attributes(spec)
    unknown = sorted(set(values) - set(ids))
    if unknown:
        raise ValueError(f"cuda.h has no CU_DEVICE_ATTRIBUTE_ {unknown}: emulate/driver/device.py is out of date")
    fig = figures(spec)
    env = {"STEPCAST_GPU_NAME": fig.name, "STEPCAST_GPU_MEM_BYTES": str(fig.memory_bytes),
           "STEPCAST_DEVICE_COUNT": str(device_count)}
    env["STEPCAST_DRIVER_ATTRS"] = ",".join(f"{ids[name]}={value}" for name, value in sorted(values.items()))
    env["STEPCAST_DRIVER_GPCS"] = str(_GPCS_BY_MAJOR.get(spec.compute_capability[0], 1))
    return env
