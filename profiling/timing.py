"""Timing one operation the way kernel benchmarks do: warm-up, repetitions until the spread is stable, statistics.

- GPU: a CUDA event pair around each repetition, an optional L2 flush (writing a buffer twice the L2 size) before
  each, and, on request, one extra call under torch.profiler to record every kernel launched inside the op.
- CPU: ``time.perf_counter_ns`` around each repetition. Ops far shorter than the timer's resolution are called
  several times per repetition (``min_rep_us``) and the time divided, as ``timeit`` does.

Repetitions stop once the relative standard error of the mean is below ``rel_tol`` (after ``min_reps``), or at
``max_reps``, or when ``max_seconds`` of timing have passed.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch


@dataclass(frozen=True)
class MeasureSettings:
    warmup: int = 3
    min_reps: int = 5
    max_reps: int = 100
    rel_tol: float = 0.02
    max_seconds: float = 1.0
    min_rep_us: float = 50.0
    l2_flush: bool = True
    record_kernels: bool = False

    @classmethod
    def from_config(cls, cfg: Any) -> "MeasureSettings":
        names = cls.__dataclass_fields__
        return cls(**{k: cfg[k] for k in names if k in cfg and cfg[k] is not None})


@dataclass(frozen=True)
class Measurement:
    median_us: float
    min_us: float
    mean_us: float
    std_us: float
    reps: int
    timing: str
    kernels: Optional[str] = None

    def as_row(self) -> dict[str, Any]:
        return {"median_us": self.median_us, "min_us": self.min_us, "mean_us": self.mean_us, "std_us": self.std_us,
                "reps": self.reps, "timing": self.timing, "kernels": self.kernels}


def summarise(samples_us: list[float], timing: str, kernels: Optional[str] = None) -> Measurement:
    return Measurement(
        median_us=float(statistics.median(samples_us)),
        min_us=float(min(samples_us)),
        mean_us=float(statistics.fmean(samples_us)),
        std_us=float(statistics.pstdev(samples_us)) if len(samples_us) > 1 else 0.0,
        reps=len(samples_us),
        timing=timing,
        kernels=kernels,
    )


def is_stable(samples_us: list[float], settings: MeasureSettings) -> bool:
    """True once the relative standard error of the mean is within ``rel_tol``."""
    if len(samples_us) < max(2, settings.min_reps):
        return False
    mean = statistics.fmean(samples_us)
    if mean <= 0:
        return True
    return statistics.stdev(samples_us) / math.sqrt(len(samples_us)) / mean <= settings.rel_tol


def _done(samples: list[float], settings: MeasureSettings, started_ns: int) -> bool:
    return (is_stable(samples, settings) or len(samples) >= settings.max_reps
            or time.perf_counter_ns() - started_ns >= settings.max_seconds * 1e9)


def measure_cpu(fn: Callable[[], Any], settings: MeasureSettings) -> Measurement:
    for _ in range(settings.warmup):
        fn()
    # Calibrate how many calls make one repetition long enough for the timer.
    start = time.perf_counter_ns()
    fn()
    single_us = max((time.perf_counter_ns() - start) / 1e3, 1e-3)
    inner = max(1, math.ceil(settings.min_rep_us / single_us))
    samples: list[float] = []
    started = time.perf_counter_ns()
    while not _done(samples, settings, started):
        t0 = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3 / inner)
    return summarise(samples, "perf_counter")


class L2Flusher:
    """Evicts the GPU's L2 between repetitions by writing a buffer twice its size (outside the timed region)."""

    def __init__(self, l2_bytes: int, device: str = "cuda") -> None:
        self.buffer = torch.empty(max(2 * l2_bytes, 2**20) // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def measure_cuda(fn: Callable[[], Any], settings: MeasureSettings, flush: Optional[L2Flusher] = None) -> Measurement:
    for _ in range(settings.warmup):
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    started = time.perf_counter_ns()
    batch = max(1, settings.min_reps)
    while not _done(samples, settings, started):
        n = min(batch, settings.max_reps - len(samples))
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for begin, end in pairs:
            if flush is not None:
                flush()
            begin.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        samples.extend(begin.elapsed_time(end) * 1e3 for begin, end in pairs)  # ms -> us
    kernels = record_kernels(fn) if settings.record_kernels else None
    return summarise(samples, "cuda_event", kernels)


def record_kernels(fn: Callable[[], Any]) -> str:
    """Run ``fn`` once under torch.profiler; return its GPU kernels as a JSON list of {name, grid, block, duration_us}.

    Grid and block sizes are only in the Chrome trace export, so the trace is written to a temporary file and read.
    """
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh).get("traceEvents", [])
    finally:
        os.unlink(path)
    kernels = [
        {"name": e.get("name"), "grid": e.get("args", {}).get("grid"), "block": e.get("args", {}).get("block"),
         "duration_us": float(e.get("dur", 0.0))}
        for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
    ]
    return json.dumps(kernels)
