"""Join the ranks' capture logs into trace-v1 files (one per rank) and the capture part of the report."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from emulate.shimlog import comm_sizes, peak_device_bytes, rank_events, read_rank_log
from emulate.trace import write_trace


def collate(log_paths: list[Path], *, hardware: str, world_size: int, ranks_per_node: int, trace_dir: Path,
            gzip: bool = False) -> dict[str, Any]:
    """Write ``trace_dir/rank<k>.trace.json[.gz]`` for every rank and return the capture report fields."""
    logs = [read_rank_log(p) for p in log_paths]
    sizes = comm_sizes(logs)
    per_rank: list[dict[str, Any]] = []
    traces: list[str] = []
    for rank, log in enumerate(logs):
        events = rank_events(log, comm_sizes=sizes, ranks_per_node=ranks_per_node)
        memory = log.sidecar.get("memory", {})
        meta = {"script": log.sidecar.get("script"), "argv": log.sidecar.get("argv"),
                "torch": log.sidecar.get("torch"), "capture_host": platform.node(),
                "capture_cpu": platform.processor() or platform.machine(), "status": log.sidecar.get("status"),
                "generic_entry_points": sorted(set(log.unhandled)), "cudnn": "disabled (not emulated)",
                "op_context": log.sidecar.get("op_context"),
                "memory": memory}
        path = trace_dir / f"rank{rank}.trace.json{'.gz' if gzip else ''}"
        write_trace(path, rank=rank, world_size=world_size, hardware=hardware, events=events, meta=meta)
        traces.append(str(path))
        kernels = sum(1 for e in events if e["kind"] == "kernel")
        per_rank.append({
            "rank": rank,
            "peak_memory_bytes": memory.get("max_memory_reserved", peak_device_bytes(events)),
            "max_memory_allocated": memory.get("max_memory_allocated"),
            "max_memory_reserved": memory.get("max_memory_reserved"),
            "device_malloc_peak_bytes": peak_device_bytes(events),
            "events": len(events), "kernels": kernels,
            "collectives": sum(1 for e in events if e["kind"] == "collective"),
            "iterations": sum(1 for e in events if e["kind"] == "iteration"),
            "failed_mallocs": sum(1 for e in events if e["kind"] == "malloc" and e.get("failed")),
            "status": log.sidecar.get("status", {"exit": "no op table: the process ended abruptly"}),
            "trace": str(path),
        })
    return {
        "hardware": hardware,
        "world_size": world_size,
        "peak_memory_bytes": max((r["peak_memory_bytes"] or 0) for r in per_rank) if per_rank else 0,
        "ranks": per_rank,
        "traces": traces,
        "trace": traces[0] if traces else None,
    }
