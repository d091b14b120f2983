"""Vidur's NCCL timings: ``vidur/data/profiling/network/<platform>/{all_reduce,send_recv}.csv`` and the older
``_history/<commit>/data/profiling/<gpu>/all_gather.csv``.

Network CSVs: ``size`` is the buffer in bytes (fp16) on each rank, ``num_workers`` the ranks, ``devices_per_node``
the ranks on each node (``num_workers > devices_per_node`` is inter-node); ``time_stats.<collective>.median`` is ms.
Rows map to collective rows ``op`` = the ``collective`` column, ``bytes`` = size, ``ranks`` = num_workers,
``ranks_per_node`` = devices_per_node, dtype fp16, runtime = median x 1000.

Platforms -> catalog ids (the folder names the machine, not the part; choices):

- ``a100_dgx`` -> ``a100-sxm-80gb`` (8x A100-80GB SXM with NVSwitch; 16 ranks span two nodes)
- ``h100_dgx`` -> ``h100-sxm``
- ``a100_pairwise_nvlink`` -> ``a100-pcie-80gb`` (Azure NC A100 v4: four PCIe A100-80GB, NVLink bridges in pairs)
- ``h100_pairwise_nvlink`` -> ``h100-pcie`` (Azure NC H100 v5: H100 NVL PCIe cards, bridged in pairs)
- ``a40_pairwise_nvlink`` -> ``a40``

The pair-wise NVLink topology itself has no column: a 4-rank collective on those machines crosses PCIe between
pairs, which the estimator can only learn from the hardware id.

``_history/.../all_gather.csv`` (A100, A40): despite the file name and as its ``time_stats.all_reduce`` columns say,
the profiler of that commit timed ``torch.distributed.all_reduce`` of an fp16 buffer of
``[num_tokens, vocab_size // num_workers]`` (its ``GraphAllGather.launch`` all-reduces when graphs are disabled,
which is how it was run). Those rows are imported as ``all_reduce`` with bytes = 2 num_tokens (vocab_size //
num_workers), ranks = num_workers, all on one node (``ranks_per_node`` = ranks; at most 8 ranks). The A100 there is
taken as ``a100-sxm-80gb`` (8 ranks on one node rules out the 4-GPU pairwise machines). The V100 table is skipped:
the V100 variant is not recorded. Rows with 0 tokens (an empty buffer) are dropped.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from stepcast.estimator.importers.common import DataImportError, finalize, read_csv

SOURCE = "vidur"
NETWORK_DIR = Path("vidur/data/profiling/network")
HISTORY_DIR = Path("vidur/_history")
PLATFORMS = {
    "a100_dgx": "a100-sxm-80gb",
    "h100_dgx": "h100-sxm",
    "a100_pairwise_nvlink": "a100-pcie-80gb",
    "h100_pairwise_nvlink": "h100-pcie",
    "a40_pairwise_nvlink": "a40",
}
HISTORY_GPUS = {"a100": "a100-sxm-80gb", "a40": "a40"}
COLLECTIVES = {"all_reduce": "all_reduce", "send_recv": "send_recv"}
FP16_BYTES = 2


def input_files(root: Path) -> list[Path]:
    root = Path(root)
    network = sorted((root / NETWORK_DIR).glob("*/*.csv"))
    history = sorted(p for p in (root / HISTORY_DIR).glob("*/data/profiling/*/all_gather.csv")
                     if p.parent.name in HISTORY_GPUS)
    return network + history


def load(root: Path) -> pd.DataFrame:
    frames = []
    for path in input_files(root):
        frames.append(load_history_file(path) if path.name == "all_gather.csv" else load_network_file(path))
    frames = [f for f in frames if len(f)]
    return finalize(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), SOURCE)


def load_network_file(path: Path) -> pd.DataFrame:
    platform = path.parent.name
    if platform not in PLATFORMS:
        raise DataImportError(f"{path}: platform folder '{platform}' is not one of {', '.join(PLATFORMS)}")
    collective = path.stem
    if collective not in COLLECTIVES:
        raise DataImportError(f"{path}: expected all_reduce.csv or send_recv.csv")
    median = f"time_stats.{collective}.median"
    raw = read_csv(path, ("size", "num_workers", "devices_per_node", median), index_col=0)
    return pd.DataFrame({
        "family": "collective",
        "op": COLLECTIVES[collective],
        "bytes": raw["size"],
        "ranks": raw["num_workers"],
        "ranks_per_node": raw["devices_per_node"],
        "dtype": "fp16",
        "hardware": PLATFORMS[platform],
        "runtime_us": pd.to_numeric(raw[median], errors="coerce") * 1000.0,
        "group": f"vidur-network/{platform}",
        "backend": "nccl",
    })


def load_history_file(path: Path) -> pd.DataFrame:
    gpu = path.parent.name
    median = "time_stats.all_reduce.median"
    raw = read_csv(path, ("num_workers", "vocab_size", "num_tokens", median), index_col=0)
    raw = raw[raw["num_tokens"] > 0]
    return pd.DataFrame({
        "family": "collective",
        "op": "all_reduce",
        "bytes": FP16_BYTES * raw["num_tokens"] * (raw["vocab_size"] // raw["num_workers"]),
        "ranks": raw["num_workers"],
        "ranks_per_node": raw["num_workers"],
        "dtype": "fp16",
        "hardware": HISTORY_GPUS[gpu],
        "runtime_us": pd.to_numeric(raw[median], errors="coerce") * 1000.0,
        "group": f"vidur-history/{gpu}",
        "backend": "nccl",
        "num_tokens": raw["num_tokens"],
    })
