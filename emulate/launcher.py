"""Start the emulated ranks and own them: check that torch can be emulated, describe the target GPU to the driver,
run one child process per rank the way torchrun does (rendezvous on loopback, torchrun's variables set), and stop
them all when the run is stopped or one rank fails.

Ownership: each rank leads its own session and process group, as torchrun's workers do (so a terminal's Ctrl-C
reaches only ``emulate run``, which stops the ranks itself, and a rank's own children are stopped with it) and asks
the kernel for SIGTERM when its launcher dies (``PR_SET_PDEATHSIG`` in :mod:`emulate.capture`), so no rank outlives
``emulate run``, even one killed by SIGKILL. Stopping sends SIGTERM, on which a rank flushes its capture log and
writes its op table, waits ``STOP_GRACE_S`` and then kills what is left.

The launcher hosts the rendezvous store of a run of more than one rank (:func:`hosted_store`), as torchelastic's
agent does: the store then outlives every rank, where one hosted by rank 0 would leave with a rank 0 that finishes
first (its collectives are not exchanged for real, so nothing holds it back) while a slower rank still reads its
communicators' ids from it. A sparse run (``--run-ranks``) starts only some ranks of the job: being clients of that
store, no rank waits for absent ones to connect, and the ranks answer for the absent ones inside torch
(emulate/sparse_store.py).

Exit codes of ``emulate run``: 0 done; 2 bad input (arguments, traces the ranks disagree on, a deadlock: found by
a rank during the capture, which then exits with ``EXIT_DEADLOCK``, or by the simulation); ``EXIT_RANK_FAILED`` (3) a
rank failed, or its capture is incomplete, and the others were stopped, or the ranks still running stopped making
progress (:class:`StallWatch`: no CPU used for ``STEPCAST_STALL_LIMIT_S``) and were stopped as hung; 128 + N stopped
by signal N (130 for SIGINT, 143 for SIGTERM). The last two still write a report of what was captured, marked
``partial``."""
from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stepcast.emulate import config
from stepcast.profiling.hardware import HardwareSpec
from stepcast.errors import Interrupted, UnavailableError

#: the CUDA major versions of torch builds the emulated driver serves (each runtime release's private tables are
#: data: emulate/driver/runtime_versions.py), and the oldest torch it was checked with (python -m
#: benchmarks.emulate.torch_matrix)
SUPPORTED_CUDA_MAJORS = (12, 13)
OLDEST_TORCH = (2, 6)
INSTALL_HINT = "pip install 'torch>=2.6' (a CUDA 12 or 13 build)"
STOP_GRACE_S = 5.0       # how long a stopped rank may take to flush its capture before it is killed
EXIT_RANK_FAILED = 3
EXIT_DEADLOCK = 4        # a rank found the run deadlocked (emulate/capture.py, emulate/driver/csrc/fakecuda.h)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CAPTURE_SCRIPT = Path(__file__).resolve().with_name("capture.py")


class EmulationUnavailable(UnavailableError):
    """The GPU runtime cannot be emulated here; the message (one line) says why and how to fix it."""


def _torch_version_py() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise EmulationUnavailable(f"torch is not installed: {INSTALL_HINT}")
    return Path(spec.origin).parent / "version.py"


def torch_cuda_version() -> str | None:
    """torch's CUDA version string (``'13.0'``) or None for a CPU-only build, read without importing torch."""
    match = re.search(r"^cuda(?:: [^=]+)? = (?:'([^']*)'|None)", _torch_version_py().read_text(), re.MULTILINE)
    return match.group(1) if match and match.group(1) else None


def torch_version() -> str:
    """torch's version string (``'2.6.0+cu124'``), read without importing torch."""
    match = re.search(r"^__version__(?:: [^=]+)? = '([^']*)'", _torch_version_py().read_text(), re.MULTILINE)
    return match.group(1) if match else "unknown"


def check_torch_build(cuda_version: str | None = None, *, torch: str | None = None, probe: bool = True) -> str:
    """Raise EmulationUnavailable (one line) unless torch is a CUDA 12 or 13 build of torch 2.6 or later; returns
    the CUDA version. ``probe``: read what is not given from the installed torch (tests pass both)."""
    version = torch_cuda_version() if probe and cuda_version is None else cuda_version
    release = torch_version() if probe and torch is None else torch
    name = f"torch {release}" if release else "torch"
    numbers = re.match(r"(\d+)\.(\d+)", release or "")
    if numbers and (int(numbers.group(1)), int(numbers.group(2))) < OLDEST_TORCH:
        raise EmulationUnavailable(f"{name} is older than the emulator supports (torch "
                                   f"{OLDEST_TORCH[0]}.{OLDEST_TORCH[1]} or later): {INSTALL_HINT}")
    if not version:
        raise EmulationUnavailable(f"{name} is a CPU-only build, so there is no CUDA runtime to emulate: "
                                   f"{INSTALL_HINT}")
    major = version.split(".")[0]
    if not major.isdigit() or int(major) not in SUPPORTED_CUDA_MAJORS:
        supported = " or ".join(str(m) for m in SUPPORTED_CUDA_MAJORS)
        raise EmulationUnavailable(f"{name} is built for CUDA {version}, the emulator supports CUDA {supported}: "
                                   f"{INSTALL_HINT}")
    return version


def torch_arch_flags() -> list[str]:
    """The GPU architectures torch's CUDA build carries code for (``sm_75``, ``compute_90`` ...:
    ``torch._C._cuda_getArchFlags``), cached per torch build under the cache folder, since importing torch costs
    seconds and the answer changes only with torch."""
    import hashlib
    import json

    from stepcast.profiling.paths import cache_root

    version_py = _torch_version_py()
    if not version_py.is_file():
        raise EmulationUnavailable(f"torch is not installed: {INSTALL_HINT}")
    cache = cache_root() / f"torch-arch-{hashlib.sha256(version_py.read_bytes()).hexdigest()[:16]}.json"
    with contextlib.suppress(OSError, ValueError):
        return list(json.loads(cache.read_text()))
    import torch

    flags = str(torch._C._cuda_getArchFlags() or "").split()
    from stepcast.profiling.atomic import write_json_atomic

    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache, flags, indent=None)
    return flags


def runs_on(flags: list[str], capability: tuple[int, int]) -> bool:
    """Whether code built for ``flags`` runs on a GPU of ``capability``: machine code of the same major version and
    a minor at most the GPU's (``sm_86`` runs on 8.9), or PTX of an older architecture, compiled when loaded
    (``compute_90`` on 10.0). Architecture-specific code (``sm_90a``) runs only on its own."""
    major, minor = capability
    for flag in flags:
        found = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", flag)
        if not found:
            continue
        kind, fmajor, fminor, suffix = found.group(1), int(found.group(2)), int(found.group(3)), found.group(4)
        if suffix and (fmajor, fminor) != (major, minor):
            continue
        if kind == "sm" and fmajor == major and fminor <= minor:
            return True
        if kind == "compute" and (fmajor, fminor) <= (major, minor):
            return True
    return False


def check_target(spec: HardwareSpec, flags: list[str] | None = None) -> None:
    """Raise EmulationUnavailable when the installed torch cannot run on the target at all: its CUDA build carries
    no code for the target's architecture (CUDA 13 wheels start at sm_75, so a V100, P100 or P4 is refused; on such
    a GPU its cuBLAS fails with CUBLAS_STATUS_ARCH_MISMATCH), as a real run would fail. What the wheels carry
    (``torch._C._cuda_getArchFlags()``): torch 2.6.0's CUDA 12.4 build sm_50-sm_90, 2.9.1's CUDA 12.8 build
    sm_70-sm_120, 2.14.1's CUDA 13.0 and 2.15.0's CUDA 13.2 builds sm_75-sm_120."""
    if spec.kind != "gpu" or spec.compute_capability is None:
        raise EmulationUnavailable(f"hardware '{spec.id}' is a {spec.kind}, not a GPU: choose a GPU id from "
                                   "conf/hardware/")
    flags = torch_arch_flags() if flags is None else flags
    cc = tuple(spec.compute_capability)
    if flags and not runs_on(flags, cc):
        built = " ".join(flags)
        raise EmulationUnavailable(
            f"{spec.id} is compute capability {cc[0]}.{cc[1]}, and the installed torch (CUDA "
            f"{torch_cuda_version()}) carries code for {built} only, so it cannot run there: install a torch built "
            "for that GPU (CUDA 13 builds start at sm_75; torch 2.9.1's CUDA 12.8 build has sm_70, torch 2.6.0's "
            "CUDA 12.4 build sm_50 to sm_90)")


def new_run_id() -> str:
    """Names this run's shared-memory areas (/dev/shm/stepcast-<run id>-*: small collectives and dedup,
    emulate/driver/csrc/datapath.c and dedup.c); unique per run, so concurrent runs never share one."""
    return f"{os.getpid()}-{os.urandom(4).hex()}"


def remove_shared_memory(run_id: str) -> None:
    for area in Path("/dev/shm").glob(f"stepcast-{run_id}-*"):
        area.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_environment(rank: int, nproc: int, nodes: int, master_port: int) -> dict[str, str]:
    """What torchrun sets for one worker (also for a single rank: scripts read LOCAL_RANK unconditionally)."""
    world = nproc * nodes
    return {"RANK": str(rank), "LOCAL_RANK": str(rank % nproc), "GROUP_RANK": str(rank // nproc),
            "ROLE_RANK": str(rank), "NODE_RANK": str(rank // nproc), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(nproc), "GROUP_WORLD_SIZE": str(nodes), "ROLE_WORLD_SIZE": str(world),
            "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port),
            "TORCHELASTIC_RUN_ID": "stepcast", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0"}


@dataclass
class RankProcess:
    rank: int
    log: Path
    proc: subprocess.Popen
    stopped: bool = False  # the launcher stopped it (its exit code is then the stop's, not a failure)
    hung: bool = False     # ... because the run had stopped making progress (:class:`StallWatch`)
    run_id: str = ""       # the run's shared-memory areas (mark_rank_exited)


def rank_environment(driver: Path, spec: HardwareSpec, nproc: int, base: dict[str, str]) -> dict[str, str]:
    """What a rank needs to run on the emulated driver (emulate/driver): the driver's folder first on the library
    path (torch's own libcudart finds ``libcuda.so.1`` there, and ``libnvidia-ml.so.1`` beside it), so torch's real
    libcudart, cuBLAS, cuDNN and Triton run and launch their real kernels; the preloaded NCCL and runtime marks
    (emulate/driver/csrc/nccl.c, runtime_marks.c); the device description; and the driver's path for the capture
    layer, which loads its capture API (``STEPCAST_DRIVER``). Inductor's on-disk cache is the target's own
    (``<cache>/inductor/<target id>``, unless the caller set ``TORCHINDUCTOR_CACHE_DIR``): it keeps the
    configurations Inductor autotuned on the predicted times of one target, and a run for another must choose
    afresh (a shared cache served a second run's choices without a question asked)."""
    from stepcast.emulate.driver.build import nccl_path
    from stepcast.emulate.driver.device import driver_environment
    from stepcast.profiling.paths import cache_root

    env = driver_environment(spec, nproc)
    env["LD_PRELOAD"] = " ".join(p for p in (str(nccl_path()), base.get("LD_PRELOAD", "")) if p)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(driver.parent), base.get("LD_LIBRARY_PATH", "")) if p)
    env["STEPCAST_DRIVER"] = str(driver)
    if not base.get("TORCHINDUCTOR_CACHE_DIR"):
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor" / spec.id)
    return env


def inherited_environment(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """The caller's environment less the variables the launcher sets for its ranks (stepcast.settings: internal),
    so a run started from inside another (a search's trial, a nested run) does not inherit its parent's log, run id
    or device description."""
    from stepcast import settings

    internal = {s.name for s in settings.SETTINGS.values() if s.audience == settings.INTERNAL}
    return {k: v for k, v in environ.items() if k not in internal}


def rank_log(trace_dir: Path, rank: int, pid: int) -> Path:
    """The capture log of one rank's process: ``rank<k>.log.driver.<pid>.jsonl`` (its prefix is
    ``STEPCAST_DRIVER_LOG``; per process, since Inductor's compile workers load the driver too); the op table is
    ``rank<k>.log.ops.json``."""
    return trace_dir / f"rank{rank}.log.driver.{pid}.jsonl"


@contextlib.contextmanager
def hosted_store(world: int) -> Iterator[int]:
    """The job's rendezvous store, hosted here as torchelastic's agent hosts it (module docstring): every rank is a
    client (:func:`agent_store_environment`), so the store outlives each of them and, in a sparse run, no rank waits
    for absent ones to connect. Yields its port."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, world_size=world, is_master=True, wait_for_workers=False)
    try:
        yield store.port
    finally:
        del store


def agent_store_environment(store_port: int) -> dict[str, str]:
    """What makes every rank a client of the launcher's store (:func:`hosted_store`), as torchrun sets it."""
    return {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_PORT": str(store_port)}


def sparse_environment(run_ranks: list[int]) -> dict[str, str]:
    """What the ranks of a sparse run need beside the launcher's store: the list of running ranks (for
    emulate/sparse_store.py) and no dedup (it would wait for every rank of the job). NCCL's dump-on-timeout
    check is off: it polls the store with ``check``, which a store written in Python (the sparse store) cannot
    serve, and a timeout dump needs the absent ranks anyway."""
    return {"STEPCAST_RUN_RANKS": ",".join(map(str, run_ranks)), "STEPCAST_DEDUP": "0",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}


def launch(script: Path, script_args: list[str], *, driver: Path, spec: HardwareSpec, nproc: int, nodes: int,
           trace_dir: Path, run_id: str, ranks: list[RankProcess], opctx: Path | None = None,
           dedup: bool = True, run_ranks: list[int] | None = None,
           store_port: int | None = None, moe_routing: str | None = None) -> list[RankProcess]:
    """Start world_size = nproc * nodes ranks on this machine (each node's ranks see nproc virtual devices of the
    emulated driver ``driver``: :func:`rank_environment`), appending each to ``ranks`` as soon as it runs, so that a
    stop during the start still finds every rank.

    The capture layer is run by its file path with ``python -P``: nothing of this project is put on the script's
    ``sys.path`` (the repository's ``datasets/``, ``models/`` or ``conf/`` folders would shadow the user's
    packages of the same names).

    ``store_port``: the store the launcher hosts (:func:`hosted_store`; every run of more than one rank has one),
    of which every rank is then a client. ``run_ranks`` (a sparse run, which needs that store): start only these
    ranks of the job. ``moe_routing``: the routing MoE routers' top-k give (``--moe-routing``; None: the
    environment's ``STEPCAST_MOE_ROUTING``, if any)."""
    base = inherited_environment(os.environ)
    base.update(rank_environment(driver, spec, nproc, base))
    base.update({
        "CUDA_MODULE_LOADING": "LAZY",
        "STEPCAST_RUN_ID": run_id,
        "STEPCAST_LAUNCHER_PID": str(os.getpid()),
        "STEPCAST_OPCTX": str(opctx) if opctx else "",
        "STEPCAST_DEDUP": "1" if dedup else "0",
    })
    if moe_routing:
        base["STEPCAST_MOE_ROUTING"] = moe_routing
    port = free_port()
    trace_dir.mkdir(parents=True, exist_ok=True)
    if config.FIXED_LAYOUT:
        fixed_layout()
    for rank in (run_ranks if run_ranks is not None else range(nproc * nodes)):
        env = {**base, **torchrun_environment(rank, nproc, nodes, port)}
        if store_port is not None:
            env.update(agent_store_environment(store_port))
        if run_ranks is not None:
            if store_port is None:
                raise ValueError("a sparse run (run_ranks) needs the launcher's store (store_port)")
            env.update(sparse_environment(run_ranks))
        env["STEPCAST_LOG"] = str(trace_dir / f"rank{rank}.log")
        env["STEPCAST_DRIVER_LOG"] = f"{env['STEPCAST_LOG']}.driver"
        cmd = [sys.executable, "-P", str(CAPTURE_SCRIPT), str(script), *script_args]
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        ranks.append(RankProcess(rank, rank_log(trace_dir, rank, proc.pid), proc, run_id=run_id))
    return ranks


ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h


def fixed_layout() -> None:
    """Turn off address-space layout randomisation for the programs this process executes from now on
    (``personality(2)``: the flag is inherited and applied at exec; this process's own layout is already set), so
    that identical runs place their ranks' code and data alike (``emulate.config.FIXED_LAYOUT`` says why). Set in the
    launcher, not between fork and exec, which is unsafe while the launcher's store threads run. Where the call is
    refused (a seccomp filter), ranks keep a random layout."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current != -1:
        libc.personality(current | ADDR_NO_RANDOMIZE)


class RunInterrupted(Interrupted):
    """``emulate run`` received SIGTERM or SIGINT; ``exit_code`` is 128 + the signal number."""


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While the ranks run, SIGTERM and SIGINT raise :class:`RunInterrupted` in the main thread (no
    KeyboardInterrupt traceback); the first one wins and later ones are ignored until the ranks are stopped."""
    def handler(signum: int, _frame) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise RunInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop(ranks: list[RankProcess], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to every rank's process group (a rank flushes its capture and exits), SIGKILL to whatever is left
    after ``grace_s``; returns when every rank has exited."""
    for rp in ranks:
        if rp.proc.poll() is None:
            rp.stopped = True
            _signal_group(rp.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for rp in ranks:
        try:
            rp.proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            _signal_group(rp.proc.pid, signal.SIGKILL)
            rp.proc.wait()
        _signal_group(rp.proc.pid, signal.SIGKILL)  # the rank's own children (data loader workers), if any


#: emulate/driver/csrc/ranks.c's area: alive[MAX_WORLD], then exited[MAX_WORLD], uint64 each, by global rank
RANKS_AREA_MAX_WORLD = 4096
RANKS_AREA_EXITED_OFFSET = RANKS_AREA_MAX_WORLD * 8


def mark_rank_exited(run_id: str, rank: int) -> None:
    """Tell the run's other ranks that ``rank`` has left (emulate/driver/csrc/ranks.c), as its capture layer does when
    it ends cleanly: the small collectives waiting for it then end at once, as the deadlock they are."""
    import mmap

    path = Path("/dev/shm") / f"stepcast-{run_id}-ranks"
    if not run_id or not 0 <= rank < RANKS_AREA_MAX_WORLD or not path.is_file():
        return
    with contextlib.suppress(OSError, ValueError):
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as area:
            at = RANKS_AREA_EXITED_OFFSET + 8 * rank
            area[at:at + 8] = (1).to_bytes(8, "little")


def process_group_cpu(pgids: set[int]) -> dict[int, float]:
    """CPU seconds (user and system, with those of its reaped children) of each live process in the process groups
    ``pgids``, by process id, from ``/proc/<pid>/stat``."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat")) as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # from the state, field 3 of proc(5): the name may hold spaces
        if len(fields) >= 15 and int(fields[2]) in pgids:
            found[int(entry.name)] = sum(int(v) for v in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return found


class StallWatch:
    """Says when the ranks still running have stopped making progress: for ``limit_s`` seconds they together used
    under ``fraction`` of one core (config.STALL_LIMIT_S, STALL_CPU_FRACTION). Each rank leads its own process
    group, so its compile workers and data loaders count as its own. Each look counts what every process gained since
    the last (all of it for one not seen before), so a process that leaves takes nothing back."""

    def __init__(self, limit_s: float, fraction: float, every_s: float | None = None) -> None:
        self.limit_s, self.fraction = limit_s, fraction
        self.every_s = min(5.0, limit_s / 2) if every_s is None else every_s
        self.seen: dict[int, float] = {}
        self.last_look = self.quiet_since = time.monotonic()

    def stalled(self, running: list[RankProcess], now: float | None = None) -> bool:
        """Look again if ``every_s`` has passed since the last look; True once the quiet spell reaches the limit."""
        now = time.monotonic() if now is None else now
        if now - self.last_look < self.every_s:
            return False
        cpu = process_group_cpu({rp.proc.pid for rp in running})
        used = sum(max(seconds - self.seen.get(pid, 0.0), 0.0) for pid, seconds in cpu.items())
        if used >= self.fraction * (now - self.last_look):
            self.quiet_since = now
        self.seen, self.last_look = cpu, now
        return now - self.quiet_since >= self.limit_s


def wait(ranks: list[RankProcess], stall_limit_s: float | None = None) -> dict[int, int]:
    """Exit code per rank; when one rank fails, the others are stopped (they would wait on it forever), and so are
    the ranks left when the run stops making progress (:class:`StallWatch`; ``stall_limit_s``, default
    ``config.STALL_LIMIT_S``), each marked ``hung``. Each rank that ends cleanly is marked as left in the run's area
    (:func:`mark_rank_exited`), in case it could not say so."""
    pending = {r.rank: r for r in ranks}
    watch = StallWatch(config.STALL_LIMIT_S if stall_limit_s is None else stall_limit_s, config.STALL_CPU_FRACTION)
    while pending:
        if watch.stalled(list(pending.values())):
            for rp in pending.values():
                rp.hung = rp.proc.poll() is None
            stop(list(pending.values()))
            break
        for rank, rp in list(pending.items()):
            try:
                rp.proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            del pending[rank]
            if rp.proc.returncode == 0:  # a failure stops every rank below; a clean end leaves the others running
                mark_rank_exited(rp.run_id, rp.rank)
            if rp.proc.returncode != 0:
                stop(list(pending.values()))
                pending.clear()
                break
    return exit_codes(ranks)


def exit_codes(ranks: list[RankProcess]) -> dict[int, int]:
    """Exit code per rank (negative: killed by that signal; None: still running)."""
    return {rp.rank: rp.proc.returncode for rp in ranks}


def failed_ranks(ranks: list[RankProcess]) -> dict[int, int]:
    """Ranks that ended with an error of their own (not stopped by the launcher), with their exit codes."""
    return {rp.rank: rp.proc.returncode for rp in ranks if rp.proc.returncode not in (0, None) and not rp.stopped}
