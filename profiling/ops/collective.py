"""Collectives through ``torch.distributed``: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv.

``bytes`` is per rank, the larger of its send and receive buffers (nccl-tests' ``size``): all_gather's output,
reduce_scatter's input. send_recv pairs ranks (0->1, 2->3, ...). Every rank times each repetition after a barrier;
a repetition's time is the slowest rank's (all-reduced MAX), as nccl-tests reports it.

This module runs inside each rank's process; :mod:`profiling.distributed` starts those processes.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
import torch.distributed as dist

from stepcast.profiling.families import dtype_bytes
from stepcast.profiling.model_catalog import ModelConfig
from stepcast.profiling.ops.base import TORCH_DTYPES, FamilyBench, describe_failure, tensor
from stepcast.profiling.timing import MeasureSettings, Measurement, summarise


# Single-tensor all_gather / reduce_scatter: the *_single names replace the *_tensor ones in recent torch.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class CollectiveBench(FamilyBench):
    family = "collective"

    def model_shapes(self, model: ModelConfig, tp: int, tokens: int) -> Iterable[dict[str, Any]]:
        """Tensor-parallel activation all-reduce (bf16 tokens x hidden) among ``tp`` ranks."""
        if tp > 1:
            yield {"bytes": tokens * model.hidden * 2, "ranks": tp}

    def complete(self, values: dict[str, Any]) -> dict[str, Any] | None:
        ranks = values["ranks"]
        values.setdefault("ranks_per_node", ranks)
        if ranks < 2 or values["ranks_per_node"] > ranks or ranks % values["ranks_per_node"]:
            return None
        if values["dtype"] not in TORCH_DTYPES or values["dtype"] in ("tf32", "bool"):
            return None
        # Round up so every rank holds a whole number of elements.
        quantum = ranks * dtype_bytes(values["dtype"])
        values["bytes"] = max(quantum, math.ceil(values["bytes"] / quantum) * quantum)
        return values

    def cost(self, values: Mapping[str, Any]) -> tuple[float, float]:
        return 0.0, float(values["bytes"])

    def build(self, values: Mapping[str, Any], device: str, group: Any = None) -> Callable[[], Any]:
        """The collective on this rank's buffers, among the first ``ranks`` ranks (``group``, default the world)."""
        op, dtype = values["op"], values["dtype"]
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        count = values["bytes"] // dtype_bytes(dtype)
        full = tensor((count,), dtype, device)
        part = tensor((count // world,), dtype, device)
        if op == "all_reduce":
            return lambda: dist.all_reduce(full, group=group)
        if op == "all_gather":
            return lambda: _ALL_GATHER(full, part, group=group)
        if op == "reduce_scatter":
            return lambda: _REDUCE_SCATTER(part, full, group=group)
        if op == "all_to_all":
            out = torch.empty_like(full)
            return lambda: dist.all_to_all_single(out, full, group=group)
        if op == "broadcast":
            return lambda: dist.broadcast(full, src=0, group=group)
        if op == "send_recv":  # group ranks are the first ranks of the world, so group rank == global rank
            peer = rank ^ 1
            if peer >= world:
                return lambda: None
            if rank % 2 == 0:
                return lambda: dist.send(full, peer, group=group)
            return lambda: dist.recv(full, peer, group=group)
        raise ValueError(f"unknown collective op '{op}'")


def _timed_call(fn: Callable[[], Any], device: str) -> float:
    """One call's time in microseconds (CUDA events around it on GPU)."""
    if device == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) * 1e3
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e3


def _max_over_ranks(values: list[float], device: str, group: Any) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def measure_collective(fn: Callable[[], Any], settings: MeasureSettings, device: str, group: Any = None
                       ) -> Measurement:
    """Warm up, size the repetitions from one timed call (same count on every rank), time each after a barrier."""
    for _ in range(settings.warmup):
        fn()
    dist.barrier(group=group)
    (estimate,) = _max_over_ranks([_timed_call(fn, device)], device, group)
    reps = int(min(settings.max_reps, max(settings.min_reps, settings.max_seconds * 1e6 // max(estimate, 1.0))))
    samples = []
    for _ in range(reps):
        dist.barrier(group=group)
        samples.append(_timed_call(fn, device))
    return summarise(_max_over_ranks(samples, device, group), "cuda_event" if device == "cuda" else "perf_counter")


def measure_points(points: list[dict[str, Any]], settings: MeasureSettings, device: str, deadline: float
                   ) -> Iterator[tuple[str, dict[str, Any], Measurement | str]]:
    """Measure ``points`` in the current process group; a point with ``ranks`` r runs among ranks 0..r-1 (a
    subgroup when r is smaller than the world) while the others wait. Rank 0 yields ("start", values, "") before each
    point and ("done", values, measurement or error text) after it; other ranks yield nothing. Rank 0's clock decides
    when ``deadline`` (a ``time.time()`` value) stops the run, so every rank stops at the same point."""
    bench = CollectiveBench()
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = sorted({int(v["ranks"]) for v in points if v["ranks"] <= world})
    # new_group is collective over the world: every rank creates every subgroup, in the same order.
    groups = {r: (None if r == world else dist.new_group(list(range(r)))) for r in sizes}
    flag_device = device if dist.get_backend() == "nccl" else "cpu"
    for values in points:
        if values["ranks"] not in groups:
            continue
        go = torch.tensor([1 if time.time() < deadline else 0], device=flag_device)
        dist.broadcast(go, src=0)
        if not go.item():
            return
        if rank >= values["ranks"]:
            continue
        if rank == 0:
            yield "start", values, ""
        group = groups[values["ranks"]]
        try:
            result: Measurement | str = measure_collective(bench.build(values, device, group), settings, device, group)
        except Exception as exc:  # unsupported op or dtype for the backend, out of memory: recorded, not retried
            result = describe_failure(exc)
            if device == "cuda":
                torch.cuda.empty_cache()
        if rank == 0:
            yield "done", values, result
