"""Start the emulated ranks: check that torch can be emulated, describe the target GPU to the shim, and run one
child process per rank the way torchrun does (rendezvous on loopback, RANK/LOCAL_RANK/WORLD_SIZE set)."""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from profiling.hardware import HardwareSpec
from profiling.paths import REPO_ROOT

SUPPORTED_CUDA_MAJOR = 13


class EmulationUnavailable(RuntimeError):
    """The GPU runtime cannot be emulated here; the message (one line) says why and how to fix it."""


def torch_cuda_version() -> str | None:
    """torch's CUDA version string (``'13.0'``) or None for a CPU-only build, read without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise EmulationUnavailable("torch is not installed: pip install torch (a CUDA 13 build)")
    version_py = Path(spec.origin).parent / "version.py"
    match = re.search(r"^cuda(?:: [^=]+)? = (?:'([^']*)'|None)", version_py.read_text(), re.MULTILINE)
    return match.group(1) if match and match.group(1) else None


def check_torch_build(cuda_version: str | None = None, *, probe: bool = True) -> str:
    """Raise EmulationUnavailable unless torch is a CUDA build of the supported major version."""
    version = torch_cuda_version() if probe and cuda_version is None else cuda_version
    if not version:
        raise EmulationUnavailable(
            "torch is a CPU-only build, so there is no CUDA runtime to emulate: install a CUDA 13 build "
            "(pip install torch --index-url https://download.pytorch.org/whl/cu130)")
    major = int(version.split(".")[0])
    if major != SUPPORTED_CUDA_MAJOR:
        raise EmulationUnavailable(
            f"torch is built for CUDA {version}, the emulator supports CUDA {SUPPORTED_CUDA_MAJOR} "
            f"(libcudart.so.{SUPPORTED_CUDA_MAJOR}): install a CUDA 13 build "
            "(pip install torch --index-url https://download.pytorch.org/whl/cu130)")
    return version


def gpu_environment(spec: HardwareSpec, device_count: int) -> dict[str, str]:
    """STEPCAST_GPU_* variables the shim reads (emulate/csrc/core.c) for the target device."""
    if spec.kind != "gpu" or spec.compute_capability is None:
        raise EmulationUnavailable(f"hardware '{spec.id}' is a {spec.kind}, not a GPU: choose a GPU id from "
                                   "conf/hardware/")
    bus_width = 5120 if "hbm" in spec.name.lower() or spec.memory_bandwidth_gbps > 1000 else 384
    mem_clock_khz = int(spec.memory_bandwidth_gbps * 1e9 / (2 * bus_width / 8) / 1e3)
    # the name torch reports: the vendor alias the catalog lists first, as nvidia-smi would show it
    name = next((a for a in spec.aliases if a.upper().startswith("NVIDIA")), spec.name)
    return {
        "STEPCAST_GPU_NAME": name,
        "STEPCAST_GPU_CC_MAJOR": str(spec.compute_capability[0]),
        "STEPCAST_GPU_CC_MINOR": str(spec.compute_capability[1]),
        "STEPCAST_GPU_SMS": str(spec.sm_count),
        "STEPCAST_GPU_MEM_BYTES": str(spec.memory_bytes),
        "STEPCAST_GPU_L2_BYTES": str(int(spec.l2_cache_mib * 2**20)),
        "STEPCAST_GPU_SMEM_PER_SM": str(int((spec.shared_memory_per_sm_kib or 100) * 1024)),
        "STEPCAST_GPU_CLOCK_KHZ": str(int(spec.max_clock_mhz * 1000)),
        "STEPCAST_GPU_MEM_CLOCK_KHZ": str(mem_clock_khz),
        "STEPCAST_GPU_MEM_BUS_WIDTH": str(bus_width),
        "STEPCAST_DEVICE_COUNT": str(device_count),
    }


def run_id(trace_dir: Path) -> str:
    """Names this run's shared-memory areas (small collectives, emulate/csrc/datapath.c)."""
    return f"{os.getpid()}-{abs(hash(str(trace_dir))) % 10**8}"


def remove_shared_memory(trace_dir: Path) -> None:
    for area in Path("/dev/shm").glob(f"stepcast-{run_id(trace_dir)}-*"):  # small collectives, dedup
        area.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankProcess:
    rank: int
    log: Path
    proc: subprocess.Popen


def launch(script: Path, script_args: list[str], *, shim: Path, spec: HardwareSpec, nproc: int, nodes: int,
           trace_dir: Path, distributed: bool, opctx: Path | None = None, dedup: bool = True) -> list[RankProcess]:
    """Start world_size = nproc * nodes ranks on this machine (each node's ranks see nproc virtual devices)."""
    world = nproc * nodes
    base = dict(os.environ)
    base.update(gpu_environment(spec, nproc))
    preload = " ".join(p for p in (str(shim), base.get("LD_PRELOAD", "")) if p)
    base.update({
        "LD_PRELOAD": preload,
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(shim.parent), base.get("LD_LIBRARY_PATH", "")) if p),
        "STEPCAST_SHIM": str(shim),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), base.get("PYTHONPATH", "")) if p),
        "CUDA_MODULE_LOADING": "LAZY",
        "STEPCAST_RUN_ID": run_id(trace_dir),
        "STEPCAST_OPCTX": str(opctx) if opctx else "",
        "STEPCAST_DEDUP": "1" if dedup else "0",
    })
    if "expandable_segments:True" in base.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        base.pop("PYTORCH_CUDA_ALLOC_CONF")  # the driver's virtual-memory API is not emulated
    if distributed:
        base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world),
                     "LOCAL_WORLD_SIZE": str(nproc), "GROUP_WORLD_SIZE": str(nodes),
                     "TORCHELASTIC_RUN_ID": "stepcast"})
    trace_dir.mkdir(parents=True, exist_ok=True)
    ranks = []
    for rank in range(world):
        env = dict(base)
        log = trace_dir / f"rank{rank}.log"
        env["STEPCAST_LOG"] = str(log)
        if distributed:
            env.update({"RANK": str(rank), "LOCAL_RANK": str(rank % nproc), "GROUP_RANK": str(rank // nproc),
                        "ROLE_RANK": str(rank), "NODE_RANK": str(rank // nproc)})
        cmd = [sys.executable, "-m", "emulate.capture", str(script), *script_args]
        ranks.append(RankProcess(rank, log, subprocess.Popen(cmd, env=env)))
    return ranks


def wait(ranks: list[RankProcess]) -> dict[int, int]:
    """Exit code per rank; when one rank fails, the others are stopped (they would wait on it forever)."""
    codes: dict[int, int] = {}
    try:
        pending = {r.rank: r for r in ranks}
        while pending:
            for rank, rp in list(pending.items()):
                try:
                    code = rp.proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    continue
                codes[rank] = code
                del pending[rank]
                if code != 0:
                    for other in pending.values():
                        other.proc.send_signal(signal.SIGTERM)
    except KeyboardInterrupt:
        for rp in ranks:
            if rp.proc.poll() is None:
                rp.proc.send_signal(signal.SIGTERM)
        raise
    return codes
