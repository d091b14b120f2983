"""Build trace-v1 documents in code: known-answer tests and the simulator benchmark use them.

    b = TraceBuilder(rank=0, world_size=1)
    b.iteration(0)
    b.kernel(stream=1, duration_us=10.0, gap_us=2.0)
    doc = b.doc()          # what emulate.trace.read_trace would return
"""
from __future__ import annotations

import random
from typing import Any

from stepcast.emulate.trace import FORMAT, VERSION


class TraceBuilder:
    """Appends events in host order; ``gap_us`` is the host time since the previous event (stored as gap_ns), all
    of it: no runtime-call cost is added (``meta.call_costs_in_gaps``, :mod:`emulate.sim.host`) unless the caller's
    ``meta`` says otherwise."""

    def __init__(self, rank: int = 0, world_size: int = 1, hardware: str = "h100-sxm",
                 meta: dict[str, Any] | None = None) -> None:
        self.rank, self.world_size, self.hardware = rank, world_size, hardware
        self.meta = {"call_costs_in_gaps": True, **(meta or {})}
        self.events: list[dict[str, Any]] = []
        self._t_ns = 0

    def add(self, kind: str, gap_us: float = 0.0, **fields: Any) -> dict[str, Any]:
        gap_ns = int(round(gap_us * 1e3))
        self._t_ns += gap_ns
        ev = {"seq": len(self.events), "kind": kind, "t_ns": self._t_ns, "gap_ns": gap_ns}
        ev.update({k: v for k, v in fields.items() if v is not None})
        self.events.append(ev)
        return ev

    def kernel(self, stream: int = 0, duration_us: float | None = None, gap_us: float = 0.0, name: str = "k",
               spec: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.add("kernel", gap_us, stream=stream, name=name, grid=[1, 1, 1], block=[128, 1, 1], shmem=0,
                        lib=None, duration_us=duration_us, spec=spec)

    def memcpy(self, nbytes: int, direction: str = "h2d", stream: int = 0, blocking: bool = False,
               duration_us: float | None = None, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("memcpy", gap_us, stream=stream, bytes=nbytes, direction=direction, blocking=blocking,
                        duration_us=duration_us)

    def collective(self, op: str = "all_reduce", stream: int = 2, comm: str = "world", comm_seq: int | None = None,
                   nbytes: int = 1 << 20, duration_us: float | None = None, gap_us: float = 0.0,
                   peer: int | None = None) -> dict[str, Any]:
        return self.add("collective", gap_us, stream=stream, op=op, comm=comm, comm_seq=comm_seq,
                        ranks=2 if peer is not None else self.world_size, peer=peer, bytes=nbytes, dtype="bf16",
                        duration_us=duration_us)

    def malloc(self, ptr: int, nbytes: int, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("malloc", gap_us, ptr=ptr, bytes=nbytes)

    def free(self, ptr: int, nbytes: int | None = None, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("free", gap_us, ptr=ptr, bytes=nbytes)

    def record(self, event: int, stream: int, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("event_record", gap_us, event=event, stream=stream)

    def wait(self, stream: int, event: int, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("stream_wait_event", gap_us, stream=stream, event=event)

    def event_sync(self, event: int, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("event_sync", gap_us, event=event)

    def stream_sync(self, stream: int, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("stream_sync", gap_us, stream=stream)

    def device_sync(self, gap_us: float = 0.0) -> dict[str, Any]:
        return self.add("device_sync", gap_us)

    def iteration(self, step: int, gap_us: float = 0.0, end: bool = False) -> dict[str, Any]:
        return self.add("iteration", gap_us, step=step, end=True if end else None)

    def doc(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "rank": self.rank, "world_size": self.world_size,
                "hardware": self.hardware, "meta": dict(self.meta), "events": list(self.events)}


def training_like_traces(n_events: int, ranks: int = 1, seed: int = 0, specs: bool = False) -> list[dict[str, Any]]:
    """Traces shaped like a data-parallel training loop, about ``n_events`` events per rank, every device op with
    a measured duration: per iteration a stream of compute kernels with host gaps, a cross-stream event
    dependency, a gradient all-reduce per bucket on a communication stream, allocator traffic, and a stream sync
    at the end of the step (the loss read). ``specs``: compute kernels also carry GEMM specs (24 distinct shapes,
    as the layers of a model repeat them) for predicted durations."""
    rng = random.Random(seed)
    per_iteration = 1000
    iterations = max(1, n_events // per_iteration)
    docs = []
    for rank in range(ranks):
        b = TraceBuilder(rank=rank, world_size=ranks, meta={"launch_latency_us": 3.0})
        rank_rng = random.Random(rng.random() + rank)
        seq = 0
        for it in range(iterations):
            b.iteration(it, gap_us=5.0)
            for j in range(per_iteration - 11):
                if j % 100 == 50:
                    b.malloc(ptr=it * 1000 + j, nbytes=1 << 20)
                elif j % 100 == 99:
                    b.free(ptr=it * 1000 + j - 49)
                else:
                    spec = _gemm_spec(j % 24) if specs else None
                    b.kernel(stream=1, duration_us=rank_rng.uniform(2.0, 40.0), gap_us=rank_rng.uniform(3.0, 9.0),
                             spec=spec)
            for _ in range(3):
                b.record(event=1, stream=1)
                b.wait(stream=2, event=1)
                if ranks > 1:
                    b.collective(stream=2, comm_seq=seq, duration_us=rank_rng.uniform(50.0, 120.0))
                else:
                    b.kernel(stream=2, duration_us=rank_rng.uniform(50.0, 120.0))
                seq += 1
            b.stream_sync(stream=1, gap_us=2.0)
        b.iteration(iterations, end=True)
        docs.append(b.doc())
    return docs


def _gemm_spec(i: int) -> dict[str, Any]:
    return {"family": "gemm", "dtype": "bf16", "m": 1024 * (1 + i % 4), "n": 1024 * (1 + i // 4 % 3),
            "k": 2048 * (1 + i // 12), "batch": 1}
