"""Check the emulated driver against a real GPU: capture there, compare here.

On a machine with a real GPU (no stepcast driver on ``LD_LIBRARY_PATH``)::

    python -m stepcast.emulate.driver.real_gpu capture --out h100.json     # every cuDeviceGetAttribute + matmul kernels

records the device's attribute values (through the system ``libcuda.so.1``), its cluster-occupancy table
(:mod:`emulate.driver.cluster_probe`) and, with torch.profiler, the kernels ``torch.matmul`` launches for the
acceptance shapes (:data:`PRODUCTS`). Anywhere, later::

    python -m stepcast.emulate.driver.real_gpu compare h100.json --hardware h100-sxm

lists the attributes whose catalog-derived value (:mod:`emulate.driver.device`) differs from the measured one,
the cluster-occupancy answers the emulated driver gives differently (the same probe, run on the emulated device),
and the shapes whose kernel on the emulated driver differs from the real one. Only the same torch / cuBLAS
versions compare like with like (the capture records them; ``compare`` refuses others).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from dataclasses import asdict
from pathlib import Path

from stepcast.emulate.driver.child import run_python
from stepcast.emulate.driver.cluster_probe import cluster_table, table_differences
from stepcast.emulate.driver.device import attribute_ids, attributes
from stepcast.emulate.driver.torch_gemm import Product, run_products
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.hardware import lookup
from stepcast.errors import InputError, UnavailableError, cli_main

#: the acceptance shapes (tests/emulate/test_driver_gemm.py uses the same list)
PRODUCTS = [Product(4096, 4096, 4096), Product(150, 8192, 28672), Product(8192, 150, 28672), Product(141, 512, 512),
            Product(788, 3072, 768), Product(8192, 8, 4096), Product(16, 4096, 4096), Product(1, 4096, 4096),
            Product(4096, 1000, 2048), Product(1024, 1024, 1024, "fp16"), Product(1024, 1024, 1024, "fp32"),
            Product(150, 4096, 4096, "fp32")]


def device_attributes(ordinal: int = 0) -> dict:
    """Name, memory and every CU_DEVICE_ATTRIBUTE_ value of the device, from whatever libcuda.so.1 loads."""
    cuda = ctypes.CDLL("libcuda.so.1")
    if cuda.cuInit(0) != 0:
        raise UnavailableError("cuInit failed: no usable CUDA device")
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, ordinal)
    total = ctypes.c_size_t()
    cuda.cuDeviceTotalMem_v2(ctypes.byref(total), ordinal)
    values = {}
    for attr, attr_id in attribute_ids().items():
        value = ctypes.c_int()
        if cuda.cuDeviceGetAttribute(ctypes.byref(value), attr_id, ordinal) == 0:
            values[attr] = value.value
    return {"name": name.value.decode(), "total_memory": total.value, "attributes": values}


def matmul_kernels(products: list[Product]) -> list[list[str]]:
    """The kernels torch.matmul runs for each product, as torch.profiler names them (a real GPU: CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from stepcast.emulate.driver.torch_gemm import TORCH_DTYPES

    out = []
    for p in products:
        dtype = getattr(torch, TORCH_DTYPES[p.dtype])
        a = torch.empty(p.m, p.k, device="cuda", dtype=dtype)
        b = torch.empty(p.k, p.n, device="cuda", dtype=dtype)
        torch.matmul(a, b)  # warm-up: cuBLAS set-up launches nothing the second time
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.matmul(a, b)
            torch.cuda.synchronize()
        out.append([e.name for e in prof.events() if e.device_type.name == "CUDA"])
    return out


def capture(out: Path, *, kernels: bool = True) -> dict:
    import torch

    doc = {"torch": torch.__version__, "cuda": torch.version.cuda, **device_attributes(),
           "clusters": cluster_table(), "products": [asdict(p) for p in PRODUCTS]}
    if kernels:
        doc["kernels"] = matmul_kernels(PRODUCTS)
    write_json_atomic(out, doc, indent=1)
    return doc


def compare(doc: dict, hardware: str) -> dict:
    """Attribute and kernel differences between a capture and the emulated ``hardware``."""
    import torch

    if doc.get("torch") != torch.__version__:
        raise InputError(f"capture was taken with torch {doc.get('torch')}, this is {torch.__version__}: the kernel "
                         "choice belongs to the library version, so the two do not compare")
    ids = attribute_ids()  # compared by id: cuda.h gives some ids two names (REGISTERS_PER_BLOCK, ...)
    modelled = {ids[name]: value for name, value in attributes(lookup(hardware)).items()}
    measured = doc["attributes"]
    attr_diff = {k: {"emulated": modelled.get(ids.get(k), 0), "real": v} for k, v in measured.items()
                 if modelled.get(ids.get(k), 0) != v}
    kernel_diff = []
    if "kernels" in doc:
        products = [Product(**p) for p in doc["products"]]
        emulated = run_products(products, hardware).launches
        for p, real, fake in zip(products, doc["kernels"], emulated, strict=True):
            fake_names = [x.name for x in fake]
            if real != fake_names:
                kernel_diff.append({"product": asdict(p), "real": real, "emulated": fake_names})
    cluster_diff = []
    if "clusters" in doc:
        run = run_python(["-m", "stepcast.emulate.driver.cluster_probe"], hardware)
        if run.returncode != 0:
            raise RuntimeError(f"the cluster probe failed on the emulated {hardware}: {run.stderr.strip()[-300:]}")
        cluster_diff = table_differences(doc["clusters"], json.loads(run.stdout))
    return {"attributes": attr_diff, "clusters": cluster_diff, "kernels": kernel_diff,
            "kernels_compared": len(doc.get("kernels", [])), "attributes_compared": len(measured),
            "clusters_compared": len(doc.get("clusters", {}).get("rows", []))}


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate.driver.real_gpu",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="on a real GPU: attributes, cluster occupancy and matmul kernels to a JSON "
                         "file")
    cap.add_argument("--out", type=Path, required=True)
    cap.add_argument("--no-kernels", action="store_true", help="attributes only (no torch.profiler)")
    cmp_ = sub.add_parser("compare", help="a capture against the emulated device")
    cmp_.add_argument("capture", type=Path)
    cmp_.add_argument("--hardware", required=True, help="catalog id (conf/hardware/<id>.yaml)")
    args = parser.parse_args(argv)
    if args.command == "capture":
        doc = capture(args.out, kernels=not args.no_kernels)
        print(f"{args.out}: {doc['name']}, {len(doc['attributes'])} attributes")
        return 0
    try:
        doc = json.loads(args.capture.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{args.capture}: not a capture file ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("attributes"), dict):
        raise InputError(f"{args.capture}: field 'attributes': expected an object (python -m "
                         "stepcast.emulate.driver.real_gpu capture writes it)")
    print(json.dumps(compare(doc, args.hardware), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
