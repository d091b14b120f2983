"""Triton's benchmark loop cut to one repeat inside the emulated process: the answer is the same, the emulation is
not slowed by thousands of launches.

``triton.testing.do_bench`` (what ``@triton.autotune`` times each configuration with) runs a kernel for ``warmup``
then ``rep`` milliseconds, by an estimate of its time, to average out a real GPU's noise: for a kernel of a few
microseconds, about 1,250 launches, each after a 256 MB cache flush, per configuration. Under the emulator an
elapsed time is the prediction of the work between the events (emulate/event_timing.py), or the nominal clock, the
same at every repeat, so one warm-up and one timed repeat give the mean, median and quantiles many would. Run under
the wrapper, ``do_bench`` still makes its first call and its five estimate runs. torchao's Float8 MoE kernels
autotune over a dozen configurations each: a DeepSeek-V3 16B step with Float8 experts took 2 min 46 s to emulate, of
which about 40,000 benchmark launches on two ranks.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: the module that defines the benchmark loop
TESTING = "triton.testing"
#: warm-up and repetition times (ms) the loop gets: below any kernel's estimate, so one run of each
ONE_RUN_MS = 1e-9


def wrap_do_bench(do_bench: Callable[..., Any]) -> Callable[..., Any]:
    """``do_bench`` with its warm-up and repetition times cut to one run each, any other argument as given."""

    @functools.wraps(do_bench)
    def stepcast_do_bench(fn, warmup=25, rep=100, *args, **kwargs):
        return do_bench(fn, ONE_RUN_MS, ONE_RUN_MS, *args, **kwargs)

    stepcast_do_bench.__stepcast__ = True
    return stepcast_do_bench


def patch(module: ModuleType) -> None:
    """Wrap ``module.do_bench`` once (``triton.runtime``'s benchmarker looks it up there at each autotuner)."""
    do_bench = getattr(module, "do_bench", None)
    if do_bench is None or getattr(do_bench, "__stepcast__", False):
        return
    module.do_bench = wrap_do_bench(do_bench)


def install(after_import: Callable[[str, Callable[[ModuleType], None]], None]) -> None:
    """Wrap Triton's loop now if it is loaded, else when it is first imported (``after_import``:
    emulate/import_hooks.py's)."""
    after_import(TESTING, patch)
