"""Write ``conf/hardware/<cpu-id>.yaml`` for this machine's CPU from /proc/cpuinfo, /proc/meminfo and /sys.

CPU vendors publish no per-dtype peak table the way GPU spec sheets do, so the peak FLOP/s figures are *estimates*:
cores x clock x FLOPs per cycle of the widest vector / matrix unit the CPU flags advertise (AVX-512 with two FMA
ports, AMX tiles for bf16). The memory bandwidth is measured here with a large tensor copy, so it is what this
machine (or VM) actually delivers, not a DIMM spec figure. The yaml's header comment says both.

    python -m stepcast.profiling.describe_cpu [--output-dir conf/hardware] [--force]
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import yaml

from stepcast.profiling.atomic import atomic_path
from stepcast.profiling.hardware import HardwareSpec, cpu_hardware_id, cpu_model_name
from stepcast.profiling.paths import user_hardware_dir
from stepcast.errors import InputError, cli_main

# FLOPs per cycle per core (an FMA counts as 2), by the widest unit a flag advertises; first match wins.
_FP32_FLOPS_PER_CYCLE = (("avx512f", 64), ("avx2", 32), ("avx", 16), ("sse2", 8))
_BF16_FLOPS_PER_CYCLE = (("amx_bf16", 1024), ("avx512_bf16", 128))
_FP16_FLOPS_PER_CYCLE = (("amx_fp16", 1024), ("avx512_fp16", 128))


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo as a dict (empty off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            info[key.strip()] = value.strip()
    return info


def _physical_cores(info: dict[str, str]) -> int:
    """Cores usable by this process (cgroup/affinity aware), capped by the physical cores cpuinfo reports."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = int(info.get("cpu cores", usable))
    siblings = int(info.get("siblings", cores))
    threads_per_core = max(1, siblings // max(cores, 1))
    return max(1, usable // threads_per_core)


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return 1.0


def _cache_mib(level: int) -> float | None:
    """Size of the unified cache at ``level`` for cpu0, from /sys."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) != level or (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", size)
        if match:
            return int(match.group(1)) * {"": 2**-20, "K": 2**-10, "M": 1.0, "G": 1024.0}[match.group(2)]
    return None


def _flops_per_cycle(flags: set[str], table: tuple[tuple[str, int], ...], fallback: int) -> int:
    return next((rate for flag, rate in table if flag in flags), fallback)


def estimate_peak_tflops(flags: set[str], cores: int, clock_mhz: float) -> dict[str, float]:
    """Dense peak TFLOP/s per dtype from the vector/matrix units the CPU flags advertise (an estimate)."""
    fp32 = _flops_per_cycle(flags, _FP32_FLOPS_PER_CYCLE, 4)
    per_cycle = {
        "fp64": fp32 // 2,
        "fp32": fp32,
        "bf16": _flops_per_cycle(flags, _BF16_FLOPS_PER_CYCLE, fp32),
        "fp16": _flops_per_cycle(flags, _FP16_FLOPS_PER_CYCLE, fp32),
    }
    return {dtype: round(rate * cores * clock_mhz * 1e6 / 1e12, 3) for dtype, rate in per_cycle.items()}


def measure_memory_bandwidth_gbps(mib: int = 256, seconds: float = 0.5) -> float:
    """Copy bandwidth (read + write bytes per second, GB/s) of a tensor far larger than the caches; best of a few."""
    import torch

    src = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter_ns()
        dst.copy_(src)
        best = min(best, time.perf_counter_ns() - start)
    return round(2 * src.numel() * 4 / best, 1)  # bytes per ns == GB/s


def cpu_spec(measure_bandwidth: bool = True) -> HardwareSpec:
    """A catalog entry for this machine's CPU (peak FLOP/s estimated, bandwidth measured when asked)."""
    info = _cpuinfo()
    model = cpu_model_name()
    flags = set(info.get("flags", "").split())
    cores = _physical_cores(info)
    clock_mhz = float(info.get("cpu MHz", 2000.0))
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(info.get("vendor_id", ""), "unknown")
    l2 = _cache_mib(2) or 1.0
    return HardwareSpec(
        id=cpu_hardware_id(model, cores),
        name=f"{model} ({cores} cores)",
        kind="cpu",
        vendor=vendor,
        aliases=[model],
        architecture=f"x86 family {info.get('cpu family', '?')} model {info.get('model', '?')}",
        sm_count=cores,
        max_clock_mhz=clock_mhz,
        memory_gib=_memory_gib(),
        memory_bandwidth_gbps=measure_memory_bandwidth_gbps() if measure_bandwidth else 10.0 * cores,
        l2_cache_mib=round(l2, 3),
        peak_tflops=estimate_peak_tflops(flags, cores, clock_mhz),
        gpus_per_node=1,
    )


def write_spec(spec: HardwareSpec, directory: Path | None = None, force: bool = False) -> Path:
    """Write ``<directory>/<id>.yaml`` (default the user hardware folder) atomically; refuse to overwrite unless
    ``force``."""
    path = Path(directory or user_hardware_dir()) / f"{spec.id}.yaml"
    if path.exists() and not force:
        raise InputError(f"{path} exists: pass --force to overwrite it")
    header = (
        "# CPU entry written by `python -m stepcast.profiling.describe_cpu` from /proc/cpuinfo and /sys.\n"
        "# ESTIMATES: peak_tflops = cores x clock x FLOPs/cycle of the widest unit in the CPU flags (AVX-512 FMA,\n"
        "# AMX for bf16); memory_bandwidth_gbps = measured copy bandwidth on this machine. sm_count = physical cores.\n"
    )
    data = spec.model_dump(exclude_none=True)
    with atomic_path(path) as tmp:
        tmp.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return path


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="where the entry goes (default: the user hardware folder, read beside the catalog)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing entry")
    args = parser.parse_args(argv)
    path = write_spec(cpu_spec(), args.output_dir, args.force)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
