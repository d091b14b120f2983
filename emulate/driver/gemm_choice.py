"""Which kernel(s) the real cuBLASLt of torch's wheel (or of another cuBLAS) launches for a GEMM on a virtual device.

A child process with the emulated driver on ``LD_LIBRARY_PATH`` (no preload, nothing executes) loads the wheel's
``libcublasLt`` with ctypes, asks ``cublasLtMatmulAlgoGetHeuristic`` for the top algorithm and runs
``cublasLtMatmul`` with it; the driver logs each launch (real kernel name, grid, block, cluster). Many shapes share
one child (the first query in a process costs ~0.1 s of lazy set-up, later ones microseconds), and each answer
carries the cuBLASLt version, since the choice belongs to the library version. ``library`` (``--cublaslt``) asks
another ``libcublasLt.so.*`` instead, e.g. the cuBLAS 12.1 a 2024 measurement ran (``estimator.kernel_labels``
fetches such wheels); it links nothing but libc, and finds the emulated libcuda the same way.

Shapes are cuBLAS's column-major problems: ``op(A)`` is m x k, ``op(B)`` k x n, C m x n, with ``transa`` /
``transb`` in {"N", "T"}. :func:`torch_mm_gemm` gives the problem torch's row-major ``A @ B`` becomes.

    python -m stepcast.emulate.driver.gemm_choice --hardware h100-sxm --m 4096 --n 4096 --k 4096 --dtype bf16
    python -m stepcast.emulate.driver.gemm_choice --hardware l4 --batch shapes.csv   # one JSON line per row
    python -m stepcast.emulate.driver.gemm_choice --m 4096 --n 520 --k 11008 --dtype fp16 --cublaslt
    PATH/libcublasLt.so.12

A batch file is CSV with a header naming ``m,n,k`` and optionally ``dtype`` (default bf16) and ``layout``
(cuBLAS transa+transb, default TN); ``--torch`` reads each row as torch's ``(m,k) @ (k,n)`` instead.
"""
from __future__ import annotations

import argparse
import csv
import ctypes
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stepcast.emulate.driver.build import header_constants, nvidia_root, runtime_version
from stepcast.emulate.driver.child import WORKSPACE_BYTES, run_python
from stepcast.emulate.driver.launchlog import Launch, read_launches
from stepcast.profiling.hardware import lookup
from stepcast.errors import InputError, MissingFileError, cli_main

DTYPES = {"bf16": "CUDA_R_16BF", "fp16": "CUDA_R_16F", "fp32": "CUDA_R_32F"}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Gemm:
    """One cuBLAS problem, column-major as cuBLAS sees it."""
    m: int
    n: int
    k: int
    dtype: str = "bf16"
    transa: str = "T"
    transb: str = "N"

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 1:
            raise InputError(f"gemm m, n, k must be positive, got {self.m}, {self.n}, {self.k}")
        if self.dtype not in DTYPES:
            raise InputError(f"gemm dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.transa not in "NT" or self.transb not in "NT" or len(self.transa + self.transb) != 2:
            raise InputError(f"gemm transa/transb must be 'N' or 'T', got {self.transa!r}, {self.transb!r}")


def torch_mm_gemm(m: int, n: int, k: int, dtype: str) -> Gemm:
    """torch's ``(m, k) @ (k, n)`` on contiguous row-major tensors: cuBLAS computes C^T = B^T A^T, N/N, n x m x k."""
    return Gemm(m=n, n=m, k=k, dtype=dtype, transa="N", transb="N")


def torch_linear_gemm(m: int, n: int, k: int, dtype: str) -> Gemm:
    """``torch.nn.functional.linear`` of x (m, k) with a weight (n, k): cuBLAS computes C^T = W x^T, T/N, n x m x k."""
    return Gemm(m=n, n=m, k=k, dtype=dtype, transa="T", transb="N")


#: launches that are not the GEMM itself: split-K reductions, fills and the beta-scaling pass some split-K paths run
_AUXILIARY = ("splitkreduce", "memset", "scal_kernel", "reduce_kernel")


@dataclass
class GemmChoice:
    gemm: Gemm
    hardware: str
    cublaslt_version: int
    algorithms_found: int
    workspace_bytes: int
    waves: float
    heuristic_s: float  # wall time of the heuristic query in the child (the first one pays cuBLAS's lazy set-up)
    query_launches: int  # kernels the query itself launched (none: nothing is timed)
    launches: list[Launch] = field(default_factory=list)

    @property
    def main_launch(self) -> Launch | None:
        """The GEMM's own launch: the first that is not a split-K reduction, a fill or a scaling pass."""
        main = [x for x in self.launches if not any(a in x.name.lower() for a in _AUXILIARY)]
        return (main or self.launches or [None])[0]

    @property
    def kernel(self) -> str:
        """The main kernel's name (``main_launch``)."""
        return self.main_launch.name if self.main_launch else ""


def wheel_library() -> Path:
    """torch's own libcublasLt, what is asked unless a library is given: the one of the CUDA runtime's major version
    among the NVIDIA wheels beside torch (CUDA 12: ``nvidia/cublas/lib/libcublasLt.so.12``; CUDA 13:
    ``nvidia/cu13/lib/libcublasLt.so.13``)."""
    root = nvidia_root()
    name = f"libcublasLt.so.{runtime_version() // 1000}"
    found = sorted(root.glob(f"*/lib/{name}"))
    if not found:
        raise MissingFileError(f"{name} not found in {root}/*/lib: it comes with torch's NVIDIA wheels "
                                "(pip install a CUDA build of torch)")
    return found[0]


def choose(gemms: list[Gemm], hardware: str, *, workspace_bytes: int = WORKSPACE_BYTES,
           library: Path | None = None) -> list[GemmChoice]:
    """The top heuristic choice and its launched kernels for each problem, on virtual device ``hardware``, from
    ``library`` (a libcublasLt.so; default torch's, ``wheel_library``)."""
    spec = lookup(hardware)
    library = Path(library) if library is not None else wheel_library()
    if not library.is_file():
        raise MissingFileError(f"cuBLASLt library {library} not found")
    request = json.dumps({"workspace": workspace_bytes, "library": str(library), "gemms": [asdict(g) for g in gemms]})
    run = run_python(["-m", "stepcast.emulate.driver.gemm_choice", "--child"], spec.id, stdin=request)
    if run.returncode != 0:
        tail = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"cuBLASLt on the emulated {hardware} failed (exit {run.returncode}): {tail}")
    answers = json.loads(run.stdout)
    return [GemmChoice(gemm=g, hardware=spec.id, cublaslt_version=a["version"], algorithms_found=a["found"],
                       workspace_bytes=a["workspace"], waves=a["waves"], heuristic_s=a["heuristic_s"],
                       query_launches=a["query_launches"], launches=[Launch(**launch) for launch in a["launches"]])
            for g, a in zip(gemms, answers, strict=True)]


# ---------------------------------------------------------------------------------------------- the child side

class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class _Child:
    """cuBLASLt through ctypes, on whatever libcuda.so.1 the loader finds (the emulated one)."""

    def __init__(self, library: Path) -> None:
        self.k = {**header_constants("cublasLt.h", "CUBLASLT_"), **header_constants("cublas_api.h", "CUBLAS_"),
                  **header_constants("library_types.h", "CUDA_R_")}
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.lt = ctypes.CDLL(str(library))
        self.lt.cublasLtGetVersion.restype = ctypes.c_size_t
        self.version = int(self.lt.cublasLtGetVersion())
        self._check(self.cuda.cuInit(0), "cuInit")
        ctx = ctypes.c_void_p()
        self._check(self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
        self._check(self.cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.handle = ctypes.c_void_p()
        self._check(self.lt.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} returned {status}")

    def _alloc(self, nbytes: int) -> ctypes.c_uint64:
        ptr = ctypes.c_uint64()
        self._check(self.cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))), "cuMemAlloc")
        return ptr

    def _free(self, ptr: ctypes.c_uint64) -> None:
        self.cuda.cuMemFree_v2(ptr)

    def _layout(self, dtype: int, rows: int, cols: int) -> ctypes.c_void_p:
        layout = ctypes.c_void_p()
        self._check(self.lt.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, ctypes.c_uint64(rows),
                                                        ctypes.c_uint64(cols), ctypes.c_int64(rows)),
                    "cublasLtMatrixLayoutCreate")
        return layout

    def run(self, g: Gemm, workspace: int, log: Path) -> dict:
        k = self.k
        dtype = k[DTYPES[g.dtype]]
        desc = ctypes.c_void_p()
        self._check(self.lt.cublasLtMatmulDescCreate(ctypes.byref(desc), k["CUBLAS_COMPUTE_32F"], k["CUDA_R_32F"]),
                    "cublasLtMatmulDescCreate")
        for attr, op in (("CUBLASLT_MATMUL_DESC_TRANSA", g.transa), ("CUBLASLT_MATMUL_DESC_TRANSB", g.transb)):
            value = ctypes.c_int32(k["CUBLAS_OP_T"] if op == "T" else k["CUBLAS_OP_N"])
            self._check(self.lt.cublasLtMatmulDescSetAttribute(desc, k[attr], ctypes.byref(value), 4), attr)
        a_rows, a_cols = (g.k, g.m) if g.transa == "T" else (g.m, g.k)
        b_rows, b_cols = (g.n, g.k) if g.transb == "T" else (g.k, g.n)
        a, b, c = (self._layout(dtype, a_rows, a_cols), self._layout(dtype, b_rows, b_cols),
                   self._layout(dtype, g.m, g.n))
        pref = ctypes.c_void_p()
        self._check(self.lt.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        ws = ctypes.c_uint64(workspace)
        self._check(self.lt.cublasLtMatmulPreferenceSetAttribute(pref, k["CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES"],
                                                                 ctypes.byref(ws), 8), "max workspace")
        result = _HeuristicResult()
        found = ctypes.c_int()
        before = log.stat().st_size if log.exists() else 0
        t0 = time.perf_counter()
        self._check(self.lt.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, a, b, c, c, pref, 1,
                                                           ctypes.byref(result), ctypes.byref(found)),
                    "cublasLtMatmulAlgoGetHeuristic")
        heuristic_s = time.perf_counter() - t0
        launched_by_query = len(read_launches(log, before))
        size = ELEMENT_BYTES[g.dtype]
        bufs = [self._alloc(g.m * g.k * size), self._alloc(g.k * g.n * size), self._alloc(g.m * g.n * size),
                self._alloc(workspace)]
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        start = log.stat().st_size if log.exists() else 0
        self._check(self.lt.cublasLtMatmul(self.handle, desc, ctypes.byref(alpha), bufs[0], a, bufs[1], b,
                                           ctypes.byref(beta), bufs[2], c, bufs[2], c, ctypes.byref(result.algo),
                                           bufs[3], ctypes.c_size_t(workspace), None), "cublasLtMatmul")
        launches = read_launches(log, start)
        for buf in bufs:
            self._free(buf)
        for layout in (a, b, c):
            self.lt.cublasLtMatrixLayoutDestroy(layout)
        self.lt.cublasLtMatmulPreferenceDestroy(pref)
        self.lt.cublasLtMatmulDescDestroy(desc)
        return {"version": self.version, "found": found.value, "workspace": int(result.workspaceSize),
                "waves": float(result.wavesCount), "heuristic_s": heuristic_s, "query_launches": launched_by_query,
                "launches": [asdict(x) for x in launches]}


def _child_main() -> int:
    request = json.load(sys.stdin)
    log = Path(f"{os.environ['STEPCAST_DRIVER_LOG']}.{os.getpid()}.jsonl")
    child = _Child(Path(request["library"]))
    answers = [child.run(Gemm(**g), int(request["workspace"]), log) for g in request["gemms"]]
    json.dump(answers, sys.stdout)
    return 0


def read_batch(path: Path, *, torch_layout: bool) -> list[Gemm]:
    """The problems of a CSV batch file (see the module docstring); :class:`InputError` names the file and row."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    gemms = []
    for line, row in enumerate(rows, start=2):
        try:
            m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
            dtype = (row.get("dtype") or "bf16").strip()
            layout = (row.get("layout") or "TN").strip()
            gemms.append(torch_mm_gemm(m, n, k, dtype) if torch_layout
                         else Gemm(m, n, k, dtype, layout[:1], layout[1:]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path} line {line}: expected integer m, n, k (and dtype, layout) columns: "
                             f"{exc}") from exc
    return gemms


def _answer(choice: GemmChoice) -> dict:
    return {"hardware": choice.hardware, "gemm": asdict(choice.gemm), "cublaslt_version": choice.cublaslt_version,
            "kernel": choice.kernel, "launches": [asdict(x) for x in choice.launches]}


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate.driver.gemm_choice",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hardware", default="h100-sxm", help="catalog id (conf/hardware/<id>.yaml)")
    parser.add_argument("--m", type=int)
    parser.add_argument("--n", type=int)
    parser.add_argument("--k", type=int)
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--layout", default="TN", help="cuBLAS transa+transb, e.g. TN (default) or NN")
    parser.add_argument("--torch", action="store_true", help="m, n, k are torch's (m,k)@(k,n); use its cuBLAS layout")
    parser.add_argument("--batch", type=Path, help="CSV of problems (header m,n,k[,dtype][,layout]); JSON lines out")
    parser.add_argument("--cublaslt", type=Path, help="libcublasLt.so to ask (default: torch's wheel's)")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main()
    if args.batch is not None:
        gemms = read_batch(args.batch, torch_layout=args.torch)
    elif args.m is None or args.n is None or args.k is None:
        raise InputError("--m, --n and --k (or --batch FILE) are required")
    elif args.torch:
        gemms = [torch_mm_gemm(args.m, args.n, args.k, args.dtype)]
    else:
        gemms = [Gemm(args.m, args.n, args.k, args.dtype, args.layout[:1], args.layout[1:])]
    lookup(args.hardware)
    if args.cublaslt is not None and not args.cublaslt.is_file():
        raise MissingFileError(f"--cublaslt: cuBLASLt library {args.cublaslt} not found")
    choices = choose(gemms, args.hardware, library=args.cublaslt)
    if args.batch is None:
        print(json.dumps(_answer(choices[0]), indent=1))
    for choice in choices if args.batch is not None else []:
        print(json.dumps(_answer(choice)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
