"""Triton's and Inductor's benchmark loops cut to one run inside the emulated process: the answer is the same, the
emulation is not slowed by thousands of launches and elapsed-time queries.

``triton.testing.do_bench`` (what ``@triton.autotune`` times each configuration with) runs a kernel for ``warmup``
then ``rep`` milliseconds, by an estimate of its time, to average out a real GPU's noise: for a kernel of a few
microseconds, about 1,250 launches, each after a 256 MB cache flush, per configuration. Under the emulator an
elapsed time is the prediction of the work between the events (emulate/event_timing.py), or the nominal clock, the
same at every repeat, so one warm-up and one timed repeat give the mean, median and quantiles many would. Run under
the wrapper, ``do_bench`` still makes its first call and its five estimate runs. torchao's Float8 MoE kernels
autotune over a dozen configurations each: a DeepSeek-V3 16B step with Float8 experts took 2 min 46 s to emulate, of
which about 40,000 benchmark launches on two ranks.

Inductor times its kernels' configurations with its own loop (``InductorBenchmarker.benchmark_gpu``: 5 estimation
runs, 100 cache flushes, up to 100 timed runs, the minimum taken), so it gets one estimation and one timed run and
no flushes, where its version has those arguments. Each timed run is a query to the event-timing predictor:
``examples/compat/compiled_mlp.py`` asked 2,730 of them and took 56 s to emulate; with one run a configuration, 52
queries and 34 s, the same 13 choices and iteration time (fresh Inductor caches both times).
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: the module that defines Triton's benchmark loop
TESTING = "triton.testing"
#: the module that defines Inductor's (``InductorBenchmarker``)
INDUCTOR = "torch._inductor.runtime.benchmarking"
#: the arguments of Inductor's loop, cut to one run each (the flushes to none)
ONE_ITERATION = {"estimation_iters": 1, "memory_warmup_iters": 0, "benchmark_iters": 1}
#: warm-up and repetition times (ms) the loop gets: below any kernel's estimate, so one run of each
ONE_RUN_MS = 1e-9


def wrap_do_bench(do_bench: Callable[..., Any]) -> Callable[..., Any]:
    """``do_bench`` with its warm-up and repetition times cut to one run each, any other argument as given."""

    @functools.wraps(do_bench)
    def stepcast_do_bench(fn, warmup=25, rep=100, *args, **kwargs):
        return do_bench(fn, ONE_RUN_MS, ONE_RUN_MS, *args, **kwargs)

    return stepcast_do_bench


def patch(module: ModuleType, wrap_once: Callable[..., None]) -> None:
    """Wrap ``module.do_bench`` once (``triton.runtime``'s benchmarker looks it up there at each autotuner)."""
    wrap_once(module, "do_bench", wrap_do_bench)


def wrap_benchmark_gpu(benchmark_gpu: Callable[..., Any]) -> Callable[..., Any]:
    """``InductorBenchmarker.benchmark_gpu`` with its loop's counts (those of :data:`ONE_ITERATION` it takes) cut
    to one run, unless a caller passes arguments by position (then as given)."""
    try:
        takes = inspect.signature(benchmark_gpu).parameters
    except (TypeError, ValueError):
        return benchmark_gpu
    cut = {k: v for k, v in ONE_ITERATION.items() if k in takes}

    @functools.wraps(benchmark_gpu)
    def stepcast_benchmark_gpu(self, _callable, *args, **kwargs):
        if args or not cut:
            return benchmark_gpu(self, _callable, *args, **kwargs)
        return benchmark_gpu(self, _callable, **{**kwargs, **cut})

    return stepcast_benchmark_gpu


def patch_inductor(module: ModuleType, wrap_once: Callable[..., None]) -> None:
    """Wrap ``InductorBenchmarker.benchmark_gpu`` once, where the module has that class."""
    wrap_once(getattr(module, "InductorBenchmarker", None), "benchmark_gpu", wrap_benchmark_gpu)


def install(hooks: Any) -> None:
    """Wrap Triton's and Inductor's loops now where loaded, else when first imported (``hooks``:
    emulate/import_hooks.py, its ``after_import`` and ``wrap_once``)."""
    hooks.after_import(TESTING, lambda module: patch(module, hooks.wrap_once))
    hooks.after_import(INDUCTOR, lambda module: patch_inductor(module, hooks.wrap_once))
