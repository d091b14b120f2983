"""aiconfigurator's NCCL timings: ``<gpu>/comm/nccl/<nccl version>/nccl_perf.parquet`` (and GB200's
``comm/nccl/nccl_perf_2.23.parquet``; NVIDIA, Apache-2.0).

Columns ``op_name`` (all_gather, alltoall, reduce_scatter, all_reduce), ``nccl_dtype`` (half, int8), ``num_gpus``
(2, 4, 8 on one NVLink/NVSwitch node), ``message_size``, ``latency`` (ms); the H100/H200 2.23 tables have no
``device`` column (the folder names the GPU). NVIDIA's collector runs the nccl-tests binary of the op
(``<op>_perf -b S -e S -t num_gpus -d dtype``, 40 warm-up and 60-100 timed iterations) and records **message_size =
S / dtype bytes, in ELEMENTS**, and the out-of-place time, averaged over ranks. S is nccl-tests' ``size``, the larger
of a rank's send and receive buffers (all_gather: the gathered output; reduce_scatter: the input), which is exactly
the ``bytes`` column of the collective family, so ``bytes`` = message_size x (2 for half, 1 for int8).

Rows: family ``collective``, ``op`` (``alltoall`` -> ``all_to_all``), ``bytes``, ``ranks`` = ``ranks_per_node`` =
num_gpus, dtype ``fp16`` / ``int8``, ``runtime_us`` the median over the NCCL versions that timed the point (2.23 to
2.29; each keeps NVLS, ring and tree, and the tuner picks among them the same way), ``backend`` ``nccl``. ``group``:
``aiconfigurator-nccl/<n>gpu``, so held-out splits hold out whole GPU counts (on every device at once).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.aiconfigurator import SOURCE, catalog_tables, median_rows, tables
from stepcast.estimator.importers.common import DataImportError, finalize

REQUIRED = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency")
OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
       "alltoall": "all_to_all"}
DTYPES = {"half": ("fp16", 2), "int8": ("int8", 1)}


def input_files(root: Path) -> list[Path]:
    return [p for p in tables(root, "comm", "nccl_perf*.parquet") if "nccl" in p.parts[-3:-1]]


def load(root: Path) -> pd.DataFrame:
    parts = []
    for path, raw, hardware in catalog_tables(input_files(root), root, REQUIRED):
        unknown = set(raw["op_name"].astype(str)) - set(OPS)
        if unknown:
            raise DataImportError(f"{path}: column 'op_name': unexpected '{sorted(unknown)[0]}', "
                                  f"expected one of {', '.join(OPS)}")
        bad = set(raw["nccl_dtype"].astype(str)) - set(DTYPES)
        if bad:
            raise DataImportError(f"{path}: column 'nccl_dtype': unexpected '{sorted(bad)[0]}', "
                                  f"expected one of {', '.join(DTYPES)}")
        dtype = raw["nccl_dtype"].astype(str)
        parts.append(pd.DataFrame({
            "hardware": hardware, "op": raw["op_name"].astype(str).map(OPS), "dtype": dtype.map(lambda d: DTYPES[d][0]),
            "bytes": raw["message_size"].to_numpy() * dtype.map(lambda d: DTYPES[d][1]).to_numpy(),
            "ranks": raw["num_gpus"].to_numpy(), "latency": raw["latency"].to_numpy(), "table": str(path)}))
    if not parts:
        return finalize(pd.DataFrame(), SOURCE)
    rows = median_rows(pd.concat(parts, ignore_index=True), ["hardware", "op", "dtype", "bytes", "ranks"])
    rows = rows.assign(family="collective", ranks_per_node=rows["ranks"], runtime_us=rows["latency"] * 1000.0,
                       backend="nccl", group="aiconfigurator-nccl/" + rows["ranks"].astype(int).astype(str) + "gpu")
    return finalize(rows.drop(columns="latency"), SOURCE)
