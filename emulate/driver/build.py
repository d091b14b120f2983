"""Build the emulated CUDA driver and its companions from emulate/driver/csrc with the system C compiler, once per
source / compiler / header combination, into ``<cache>/driver-<hash>/`` (cache: :func:`profiling.paths.cache_root`):

* ``libcuda.so.1``: the driver (found by the CUDA runtime through ``LD_LIBRARY_PATH``; ``libcuda.so`` links to it
  for ``-lcuda``), with the capture API the capture layer calls (capture.c), the small data path (datapath.c),
  host-work counters (hostwork.c) and rank dedup (dedup.c) built in;
* ``libnvidia-ml.so.1``: the NVML stand-in (nvml.c: torch's expandable segments call NVML);
* ``libstepcast_nccl.so``: NCCL (nccl.c) and the runtime-entry marks (runtime_marks.c), preloaded
  (:func:`nccl_path`);
* ``libstepcast_opctx.so`` (its own folder, keyed by torch's version): the RecordFunction hook (opctx.cpp).

It is compiled against the headers of the NVIDIA wheels installed beside torch (CUDA 12 and 13 lay them out
differently: :func:`include_dirs` looks for each header). Four C files are generated into the build folder:

* ``procaddr.c``: the table ``cuGetProcAddress`` answers from. The runtime asks for one name at several versions
  with different signatures (``cuStreamGetCaptureInfo`` at 10010, 11030, 12030), so every
  ``PFN_<name>_v<version>`` typedef of ``cudaTypedefs.h`` becomes one row; a name's versions, in order, map to the
  exported symbols ``<name>``, ``<name>_v2``, ``<name>_v3`` ... (the driver's own naming).
* ``stubs.c``: one weak definition per driver entry point the headers declare, answering
  ``CUDA_ERROR_NOT_SUPPORTED`` and logging its name once; the hand-written (strong) ones in csrc/ win at link time.
* ``nccl_stubs.c``: the same for every NCCL entry point nccl.h (and nccl_device/) declares, answering
  ``ncclInvalidUsage``.
* ``export_layout.c``: the runtime's private tables, as long as the installed CUDA runtime's version calls them
  (:mod:`emulate.driver.runtime_versions`; an unknown version is refused in one line, :func:`runtime_version`).

Concurrent builders (ranks, test workers) serialise on a lock file, and a build appears atomically (compiled to a
temporary name in a temporary folder, then ``os.replace``): a build stopped half-way leaves nothing behind.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from stepcast.emulate.driver import runtime_versions
from stepcast.profiling.paths import cache_root
from stepcast import settings
from stepcast.errors import UnavailableError

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("init.c", "device.c", "memory.c", "module.c", "launch.c", "stream.c", "graph.c", "export.c", "legacy.c",
           "capture.c", "datapath.c", "hostwork.c", "dedup.c", "ranks.c")
HEADERS = ("fakecuda.h", "compat/fp_types.h", "compat/crt/host_defines.h")
SONAME = "libcuda.so.1"
#: the link name a linker finds with ``-lcuda`` (Triton 3.5's launcher, torch 2.9, links its helper against the
#: driver in the folders of LD_LIBRARY_PATH), as the real driver's package installs it
LINK_NAME = "libcuda.so"
NVML_SONAME = "libnvidia-ml.so.1"
NVML_SOURCE = "nvml.c"
#: NCCL and the runtime marks, preloaded by the launcher (never named libnccl: torch finds that by its RPATH)
NCCL_NAME = "libstepcast_nccl.so"
NCCL_SOURCES = ("nccl.c", "runtime_marks.c")
OPCTX_NAME = "libstepcast_opctx.so"
CUDA_ERROR_NOT_SUPPORTED = 801
NCCL_INVALID_USAGE = 5
#: the PFN_ typedefs: the driver API, then the profiler and graphics-interop ones (which stay NOT_SUPPORTED)
TYPEDEF_HEADERS = ("cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h", "cudaEGLTypedefs.h",
                   "cudaVDPAUTypedefs.h")
#: the headers a build needs, each found in whichever of the wheels' include folders holds it
WANTED_HEADERS = ("cuda.h", "cudaTypedefs.h", "cuda_runtime_api.h", "nccl.h")

_PFN = re.compile(r"typedef\s+CUresult\s*\(CUDAAPI\s+\*PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)")
_DECL = re.compile(r"CUresult\s+CUDAAPI\s+(cu\w+)\s*\(")
_NCCL_DECL = re.compile(r"^\s*(?:NCCL_EXTERN_C\s+)?ncclResult_t\s+(nccl\w+)\s*\(", re.MULTILINE)


class BuildError(UnavailableError):
    """The emulated driver cannot be built here; the message says why and how to fix it (one line)."""


def nvidia_root() -> Path:
    """site-packages/nvidia of the environment torch is installed in (found without importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise BuildError("torch is not installed: install a CUDA build of torch (pip install torch)")
    return Path(spec.origin).resolve().parent.parent / "nvidia"


def include_dirs(root: Path | None = None) -> list[Path]:
    """The NVIDIA wheels' include folders that hold the headers a build needs (CUDA 13: ``nvidia/cu13/include``;
    CUDA 12: ``nvidia/cuda_runtime/include``, ``nvidia/nccl/include`` ...), plus csrc/compat where the runtime wheel
    ships no ``crt/host_defines.h``."""
    root = root or nvidia_root()
    folders = sorted(p for p in root.glob("*/include") if p.is_dir()) if root.is_dir() else []
    found: dict[str, Path] = {}
    for header in WANTED_HEADERS:
        folder = next((f for f in folders if (f / header).is_file()), None)
        if folder is None:
            raise BuildError(f"{header} not found in {root}/*/include: the CUDA headers come with torch's NVIDIA "
                             "wheels (pip install a CUDA build of torch, which installs them)")
        found[header] = folder
    dirs = sorted(set(found.values()))
    if not any((d / "crt" / "host_defines.h").is_file() for d in dirs):
        dirs.append(CSRC / "compat")  # the runtime wheel ships no crt/ headers: use our minimal stand-in
    return dirs


def header_path(header: str, incs: list[Path] | None = None) -> Path:
    """Where ``header`` is among the include folders."""
    for inc in incs if incs is not None else include_dirs():
        if (inc / header).is_file():
            return inc / header
    raise BuildError(f"{header} not found in the NVIDIA wheels' include folders (pip install a CUDA build of torch)")


def cuda_include(incs: list[Path]) -> Path:
    """The folder holding cuda.h and cudaTypedefs.h."""
    return header_path("cudaTypedefs.h", incs).parent


def header_constants(header: str, prefix: str) -> dict[str, int]:
    """``<prefix>X = <integer>`` enumerators of a header in the NVIDIA wheels' include folders, by full name."""
    text = header_path(header).read_text()
    pattern = re.compile(rf"\b({re.escape(prefix)}\w*)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))\b")
    return {m.group(1): int(m.group(2), 0) for m in pattern.finditer(text)}


def runtime_version(incs: list[Path] | None = None) -> int:
    """``CUDART_VERSION`` of the installed CUDA runtime (its wheel's ``cuda_runtime_api.h``), checked against the
    versions whose private tables are known; BuildError (one line) for any other."""
    try:
        version = runtime_versions.cudart_version(header_path("cuda_runtime_api.h", incs))
        runtime_versions.runtime(version)
    except runtime_versions.UnknownRuntime as exc:
        raise BuildError(str(exc)) from None
    return version


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise BuildError("no C compiler found: install one (apt-get install gcc) or set CC")
    return cc


def generate_stubs(names: list[str], *, answer: int, log: str, banner: str) -> str:
    """C source of one weak definition per name, returning ``answer`` and reporting its name once through ``log``;
    a hand-written (strong) definition wins at link time."""
    out = [f"/* {banner} */", f"void {log}(const char *name);"]
    for name in names:
        out.append(f'__attribute__((weak, visibility("default"))) int {name}(void) {{ static int seen; '
                   f'if (!seen) {{ seen = 1; {log}("{name}"); }} return {answer}; }}')
    return "\n".join(out) + "\n"


def proc_versions(typedefs: str) -> dict[str, list[int]]:
    """name -> sorted versions of its ABIs, from cudaTypedefs.h (per-thread-stream variants share the default's)."""
    versions: dict[str, set[int]] = {}
    for m in _PFN.finditer(typedefs):
        if not m.group(3):
            versions.setdefault(m.group(1), set()).add(int(m.group(2)))
    return {name: sorted(v) for name, v in versions.items()}


def exported_symbol(name: str, index: int) -> str:
    """The driver's symbol for a name's ``index``-th ABI (0-based): cuX, cuX_v2, cuX_v3 ..."""
    return name if index == 0 else f"{name}_v{index + 1}"


def generate_procaddr(versions: dict[str, list[int]]) -> str:
    rows, externs = [], set()
    for name in sorted(versions):
        for i, version in enumerate(versions[name]):
            symbol = exported_symbol(name, i)
            externs.add(symbol)
            rows.append(f'    {{"{name}", {version}, (void *){symbol}}},')
    out = ["/* generated by emulate/driver/build.py from cudaTypedefs.h: (name, version) -> exported symbol */",
           "typedef struct { const char *name; int version; void *fn; } fk_proc_t;"]
    out += [f"extern int {s}(void);" for s in sorted(externs)]
    out += ["const fk_proc_t fk_proc_table[] = {", *rows, "};",
            f"const int fk_proc_count = {len(rows)};"]
    return "\n".join(out) + "\n"


def entry_points(cuda_h: str, versions: dict[str, list[int]]) -> list[str]:
    """Every driver symbol: those cuda.h declares and those the proc-address table names."""
    names = set(_DECL.findall(cuda_h))
    for name, vs in versions.items():
        names.update(exported_symbol(name, i) for i in range(len(vs)))
    return sorted(names)


def nccl_entry_points(headers: str) -> list[str]:
    """Every NCCL entry point the headers declare (the profiling ``pnccl`` twins excluded)."""
    return sorted(set(_NCCL_DECL.findall(headers)))


def nccl_headers(incs: list[Path]) -> str:
    """nccl.h and, where the wheel has them (NCCL 2.28 on), the device API's host declarations (nccl_device/)."""
    nccl_h = header_path("nccl.h", incs)
    return "\n".join(p.read_text() for p in (nccl_h, *sorted(nccl_h.parent.glob("nccl_device/*.h"))))


def _cached_build(out_dir: Path, name: str, cmd_for: Callable[[Path, Path], list[str]], what: str,
                  rebuild: bool) -> Path:
    """Build ``out_dir/name`` once (lock file + temporary folder + os.replace); ``cmd_for(tmp_dir, out)``. The
    compiler runs in its own process group: SIGINT/SIGTERM while it runs stop it too (then the temporary folder
    goes), so an interrupted first run leaves neither a compiler nor a half-written build."""
    target = out_dir / name
    if target.is_file() and not rebuild:
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and not rebuild:
            return target
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
            tmp_out = Path(tmp) / name
            cmd = cmd_for(Path(tmp), tmp_out)
            proc = None
            try:
                with _stop_signals_held():
                    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                            start_new_session=True, preexec_fn=_die_with_parent)
                _, stderr = proc.communicate()
            except BaseException:  # stopped (the caller's signal handler raised): stop the compiler, then clean up
                if proc is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                raise
            if proc.returncode != 0:
                first = next((ln for ln in stderr.splitlines() if "error" in ln), stderr.strip()[:300])
                raise BuildError(f"compiling {what} failed ({cmd[0]}): {first}")
            os.replace(tmp_out, target)
    return target


@contextlib.contextmanager
def _stop_signals_held():
    """SIGINT and SIGTERM held back while the compiler is started: a fork runs Python's at-fork callbacks, in
    which an exception a signal handler raises is printed and dropped (the stop would be lost); held, the signal
    arrives once Popen has returned, where it stops the build."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _die_with_parent() -> None:
    """In the compiler's process, before exec: the kernel kills it when the process that started it dies (even by
    SIGKILL), so no compiler outlives an interrupted build."""
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG


def _build_key(cc: str, incs: list[Path]) -> str:
    h = hashlib.sha256()
    for name in sorted({*SOURCES, *HEADERS, NVML_SOURCE, *NCCL_SOURCES}):
        h.update(name.encode())
        h.update((CSRC / name).read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(Path(runtime_versions.__file__).read_bytes())
    h.update(subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.encode())
    cuda_inc = cuda_include(incs)
    for header in ("cuda.h", *TYPEDEF_HEADERS):
        if (cuda_inc / header).is_file():
            h.update((cuda_inc / header).read_bytes())
    for header in ("cuda_runtime_api.h", "driver_types.h"):
        h.update(header_path(header, incs).read_bytes())
    h.update(nccl_headers(incs).encode())
    return h.hexdigest()[:16]


@functools.cache
def driver_key() -> str:
    """The hash that names the driver build (its sources, the compiler, the CUDA headers): what answers a library's
    device queries, so anything cached from those answers (kernel labels) is keyed by it too."""
    return _build_key(compiler(), include_dirs())


def _flags(cc: str, incs: list[Path], soname: str | None = None) -> list[str]:
    return [cc, "-O2", "-g0", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter",
            "-Wno-deprecated-declarations", *([f"-Wl,-soname,{soname}"] if soname else []),
            *(f"-I{i}" for i in incs), f"-I{CSRC}"]


def driver_path(*, rebuild: bool = False) -> Path:
    """Path of the built driver (``<cache>/driver-<hash>/libcuda.so.1``), building it first when needed; the
    folder also holds ``libnvidia-ml.so.1`` (csrc/nvml.c), found through the same ``LD_LIBRARY_PATH``."""
    cc = compiler()
    incs = include_dirs()
    cuda_inc = cuda_include(incs)
    cudart = runtime_version(incs)

    def command(tmp: Path, out: Path) -> list[str]:
        versions = proc_versions("\n".join((cuda_inc / h).read_text() for h in TYPEDEF_HEADERS
                                           if (cuda_inc / h).is_file()))
        (tmp / "procaddr.c").write_text(generate_procaddr(versions))
        names = entry_points((cuda_inc / "cuda.h").read_text(), versions)
        (tmp / "stubs.c").write_text(generate_stubs(
            names, answer=CUDA_ERROR_NOT_SUPPORTED, log="fk_log_unsupported",
            banner="generated by emulate/driver/build.py: driver entry points not emulated answer NOT_SUPPORTED"))
        (tmp / "export_layout.c").write_text(runtime_versions.generate_export_layout(cudart))
        return [*_flags(cc, incs, SONAME), *(str(CSRC / s) for s in SOURCES), str(tmp / "procaddr.c"),
                str(tmp / "stubs.c"), str(tmp / "export_layout.c"), "-o", str(out), "-ldl", "-lpthread", "-lrt"]

    def nvml_command(tmp: Path, out: Path) -> list[str]:
        return [*_flags(cc, [cuda_inc], NVML_SONAME), str(CSRC / NVML_SOURCE), "-o", str(out)]

    out_dir = cache_root() / f"driver-{_build_key(cc, incs)}"
    _cached_build(out_dir, NVML_SONAME, nvml_command, "the NVML stand-in", rebuild)
    driver = _cached_build(out_dir, SONAME, command, "the driver", rebuild)
    _link_name(out_dir / LINK_NAME, SONAME)
    return driver


def _link_name(link: Path, target: str) -> None:
    """``link`` -> ``target`` (same folder), made under a temporary name then renamed, so it appears whole."""
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}")  # one per builder thread too
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def nccl_path(*, rebuild: bool = False) -> Path:
    """Path of the preloaded NCCL (``libstepcast_nccl.so`` beside the driver): csrc/nccl.c, stubs answering
    ``ncclInvalidUsage`` for the other entry points nccl.h declares, and the runtime-entry marks of
    csrc/runtime_marks.c (host gaps end where the script entered the real runtime)."""
    cc = compiler()
    incs = include_dirs()
    driver = driver_path(rebuild=rebuild)

    def command(tmp: Path, out: Path) -> list[str]:
        names = nccl_entry_points(nccl_headers(incs))
        (tmp / "nccl_stubs.c").write_text(generate_stubs(
            names, answer=NCCL_INVALID_USAGE, log="stepcast_nccl_unsupported",
            banner="generated by emulate/driver/build.py: NCCL entry points not emulated answer ncclInvalidUsage"))
        return [*_flags(cc, incs), *(str(CSRC / s) for s in NCCL_SOURCES), str(tmp / "nccl_stubs.c"), "-o", str(out),
                "-ldl", "-lpthread"]

    return _cached_build(driver.parent, NCCL_NAME, command, "the preloaded NCCL", rebuild)


def cxx11_abi(libc10: Path) -> str:
    """The ``_GLIBCXX_USE_CXX11_ABI`` torch was built with: "0" for torch 2.6.0's wheels, "1" for 2.9.1's and later,
    read from how libc10 spells the ``std::string`` of one of its own functions (the old ABI mangles it ``Ss``, the
    new one ``NSt7__cxx1112basic_string...``), since importing torch would cost seconds."""
    return "0" if b"torchInternalAssertFailEPKcS2_jS2_RKSs" in libc10.read_bytes() else "1"


def opctx_path(*, rebuild: bool = False) -> Path:
    """The op-context hook (csrc/opctx.cpp: a torch RecordFunction callback), built against torch's headers.
    Raises BuildError when no C++ compiler is found or the build fails; callers fall back to Python."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise BuildError("no C++ compiler found (apt-get install g++ or set CXX)")
    torch_dir = nvidia_root().parent / "torch"
    version_py = (torch_dir / "version.py").read_bytes()
    h = hashlib.sha256((CSRC / "opctx.cpp").read_bytes() + version_py + Path(__file__).read_bytes())
    h.update(subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.encode())
    abi = settings.get("STEPCAST_CXX11_ABI") or cxx11_abi(torch_dir / "lib" / "libc10.so")
    h.update(abi.encode())

    def command(tmp: Path, out: Path) -> list[str]:
        return [cxx, "-O2", "-g0", "-DNDEBUG", "-std=c++20", "-fPIC", "-shared", "-fvisibility=hidden",
                f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{torch_dir / 'include'}",
                f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}", str(CSRC / "opctx.cpp"),
                f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", str(out)]

    return _cached_build(cache_root() / f"opctx-{h.hexdigest()[:16]}", OPCTX_NAME, command, "the op-context hook",
                         rebuild)


if __name__ == "__main__":
    print(driver_path(rebuild=True))
    print(nccl_path(rebuild=True))
    print(opctx_path(rebuild=True))
