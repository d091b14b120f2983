"""Kernels that share the GPU with NCCL: a collective holds SMs, so a kernel that fills the GPU runs slower beside it.

NCCL runs a collective as one CTA per channel, and a CTA of NCCL takes an SM to itself for the collective's whole
span ("NCCL CTAs won't share an SM with compute kernels", NCCL maintainers, NVIDIA/nccl#689), from the moment its
kernel starts on the stream, through any wait for peers, to its end. NCCL launches two CTAs per NVLink to saturate
the links for large messages (NVIDIA/nccl#1703): 24 for an all-reduce on a DGX A100 (NVIDIA/nccl#1225) and 24 for
an FSDP all-gather on an H100 (an Nsight Systems trace on NVIDIA's developer forum, "Compute-communication overlap
causes severe GEMM performance degradation because of tail effect", 2025). A GPU without NVLink runs its rings over
PCIe at a bandwidth two CTAs already reach (#689: "it should just launch 2 SMs").

So a kernel whose blocks fill the GPU (:func:`emulate.sim.durations.fills_gpu`) progresses, while a collective of
its rank holds ``C`` of the ``S`` SMs, at (S - C) / S of its rate: its duration grows by the time it overlapped
collectives x C / (S - C). With C = 24 that is 22 % on an H100's 132 SMs, which is what a study of overlapped
training kernels measured on average (18.9 % compute slowdown, up to 40 %, on H100, A100, MI250, MI210: Lee et al.,
"Characterizing compute-communication overlap in GPU-accelerated distributed deep learning", arXiv:2507.03114).
A kernel of one wave can lose more (its last blocks wait for a second wave, the forum trace's 2x); the mean rate is
what this model keeps. Kernels too small to fill the GPU find free SMs and are left alone, as are kernels with a
recorded duration (a real run's durations already include the sharing), copy-engine copies (no SMs) and pipeline
sends and receives (NCCL gives a point-to-point peer a few channels of its own, not the collective's rings).

The overlap comes from a first simulation; the engine then runs again on the stretched durations (one correction:
the collectives the stretched kernels delay move by a fraction of the stretch, a second-order effect left out).
``STEPCAST_COMM_CONTENTION=off`` keeps the first simulation's timelines.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from stepcast.emulate.sim.program import COLLECTIVE, RankProgram

#: NCCL CTAs of a collective on a GPU with NVLink: two per link for large messages, 24 as traced on the DGX A100
#: and the H100 (module docstring)
NCCL_CTAS_NVLINK = 24
#: on a GPU without NVLink (rings over PCIe)
NCCL_CTAS_PCIE = 2
#: pipeline sends and receives: not the collective's rings (module docstring)
POINT_TO_POINT_OPS = ("send", "recv", "send_recv")


def nccl_ctas(spec: Any) -> int:
    """The SMs a collective of NCCL holds on ``spec``'s GPU (:data:`NCCL_CTAS_NVLINK`, :data:`NCCL_CTAS_PCIE`)."""
    return NCCL_CTAS_NVLINK if getattr(spec, "nvlink_bandwidth_gbps", None) else NCCL_CTAS_PCIE


def slowdown_share(spec: Any) -> float:
    """Extra time per unit of overlap for a GPU-filling kernel beside a collective: C / (S - C)."""
    sms, ctas = int(spec.sm_count), nccl_ctas(spec)
    return ctas / (sms - ctas) if sms > ctas else 0.0


def collective_spans(prog: RankProgram, timeline: Any) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint spans (start, end; us, sorted) during which a collective of the rank holds SMs: from when its
    stream reached it (``timeline.arrival``; its kernel waits for peers on the GPU) to its end. Point-to-point
    sends and receives are left out (module docstring)."""
    at = np.flatnonzero(prog.kind_array == COLLECTIVE)
    if len(at):
        ops = prog.events.field("op")
        at = np.array([i for i in at if ops[i] not in POINT_TO_POINT_OPS], dtype=np.int64)
    if not len(at):
        return np.zeros(0), np.zeros(0)
    arrival = timeline.arrival
    starts = np.array([min(arrival.get(int(i), s), s) for i, s in zip(at, timeline.start[at])], dtype=np.float64)
    ends = np.asarray(timeline.end[at], dtype=np.float64)
    keep = ends > starts
    return merge_spans(starts[keep], ends[keep])


def merge_spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of spans as disjoint spans in time order."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    first = np.ones(len(starts), dtype=bool)
    first[1:] = starts[1:] > np.maximum.accumulate(ends)[:-1]   # a span that begins after all before it ended
    heads = np.flatnonzero(first)
    return starts[heads], np.maximum.reduceat(ends, heads)


def covered(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per interval [a, b], the time the disjoint sorted spans cover of it."""
    if not len(starts):
        return np.zeros(len(a))
    edges = np.empty(2 * len(starts))
    edges[0::2], edges[1::2] = starts, ends
    cumulative = np.zeros(2 * len(starts))
    cumulative[1::2] = np.cumsum(ends - starts)
    cumulative[2::2] = cumulative[1:-1:2]
    return np.interp(b, edges, cumulative) - np.interp(a, edges, cumulative)


def stretched(programs: list[RankProgram], durations: Any, timelines: list[Any], spec: Any) -> Any | None:
    """``durations`` with each GPU-filling predicted kernel lengthened by its overlap with its rank's collectives in
    ``timelines`` x :func:`slowdown_share`; None where no such kernel overlaps one. Ranks that share a timeline and
    a duration array (a sparse run's copies) share the stretched array too."""
    if spec is None or not durations.fills:
        return None
    share = slowdown_share(spec)
    if share <= 0.0:
        return None
    done: dict[tuple[int, int], np.ndarray] = {}
    out, changed = [], False
    for r, (prog, timeline) in enumerate(zip(programs, timelines)):
        us, fills = durations.us[r], durations.fills[r]
        key = (id(timeline), id(us))
        if key not in done:
            done[key] = us
            kernels = np.flatnonzero(fills) if fills is not None and len(fills) else np.zeros(0, dtype=np.int64)
            if len(kernels):
                starts, ends = collective_spans(prog, timeline)
                overlap = covered(starts, ends, timeline.start[kernels], timeline.end[kernels])
                if overlap.any():
                    grown = np.array(us, dtype=np.float64, copy=True)
                    grown[kernels] += overlap * share
                    done[key] = grown
                    changed = True
        out.append(done[key])
    return dataclasses.replace(durations, us=out) if changed else None
