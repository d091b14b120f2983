"""The kernels torch's own ``torch.matmul`` launches on a virtual device: a child process imports torch with the
emulated driver on ``LD_LIBRARY_PATH`` (no preload, torch's real libcudart and cuBLAS) and runs each product on
never-backed tensors; the driver's launch log gives the kernels per product.

The child runs through :mod:`emulate.driver.child` (which pins torch's cuBLAS workspace to the heuristic's)."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from stepcast.emulate.driver.child import run_python
from stepcast.emulate.driver.launchlog import Launch, read_launches

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Product:
    """``(m, k) @ (k, n)`` on contiguous tensors of ``dtype``."""
    m: int
    n: int
    k: int
    dtype: str = "bf16"


@dataclass
class TorchRun:
    hardware: str
    device_name: str
    capability: tuple[int, int]
    sm_count: int
    total_memory: int
    launches: list[list[Launch]]  # per product


def run_products(products: list[Product], hardware: str) -> TorchRun:
    run = run_python(["-m", "stepcast.emulate.driver.torch_gemm"], hardware,
                     stdin=json.dumps([asdict(p) for p in products]))
    if run.returncode != 0:
        tail = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"torch on the emulated {hardware} failed (exit {run.returncode}): {tail}")
    out = json.loads(run.stdout)
    return TorchRun(hardware=hardware, device_name=out["name"], capability=tuple(out["capability"]),
                    sm_count=out["sm_count"], total_memory=out["total_memory"],
                    launches=[[Launch(**x) for x in per] for per in out["launches"]])


def _child_main() -> int:
    import torch

    products = [Product(**p) for p in json.load(sys.stdin)]
    log = Path(f"{os.environ['STEPCAST_DRIVER_LOG']}.{os.getpid()}.jsonl")
    if not torch.cuda.is_available():
        print("stepcast: torch.cuda.is_available() is False on the emulated driver", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    launches = []
    for p in products:
        dtype = getattr(torch, TORCH_DTYPES[p.dtype])
        a = torch.empty(p.m, p.k, device="cuda", dtype=dtype)
        b = torch.empty(p.k, p.n, device="cuda", dtype=dtype)
        torch.cuda.synchronize()
        start = log.stat().st_size if log.exists() else 0
        torch.matmul(a, b)
        torch.cuda.synchronize()
        launches.append([asdict(x) for x in read_launches(log, start)])
    json.dump({"name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
               "sm_count": props.multi_processor_count, "total_memory": props.total_memory,
               "launches": launches}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
