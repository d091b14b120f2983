"""emulate/quick_bench.py: Triton's benchmark loop gets one warm-up and one timed repeat under the emulator, whose
elapsed times are the same at every repeat; everything else reaches the loop as given."""
from __future__ import annotations

import types

from stepcast.emulate.import_hooks import wrap_once
from stepcast.emulate.quick_bench import (INDUCTOR, ONE_RUN_MS, TESTING, install, patch, patch_inductor,
                                          wrap_benchmark_gpu, wrap_do_bench)


def test_the_loop_gets_one_run_and_every_other_argument_unchanged():
    calls = []

    def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        calls.append((fn, warmup, rep, grad_to_none, quantiles, return_mode))
        return 1.5

    wrapped = wrap_do_bench(do_bench)
    assert wrapped("kernel", quantiles=(0.5, 0.2, 0.8)) == 1.5
    assert wrapped("kernel", 50, 200, None, None, "min") == 1.5
    assert calls == [("kernel", ONE_RUN_MS, ONE_RUN_MS, None, (0.5, 0.2, 0.8), "mean"),
                     ("kernel", ONE_RUN_MS, ONE_RUN_MS, None, None, "min")]


def test_the_module_is_wrapped_once_when_first_imported():
    module = types.SimpleNamespace(do_bench=lambda fn, warmup=25, rep=100: (warmup, rep))
    asked = []
    install(types.SimpleNamespace(wrap_once=wrap_once, after_import=lambda name, apply: asked.append(name) or (
        apply(module) if name == TESTING else None)))
    first = module.do_bench
    patch(module, wrap_once)
    assert asked == [TESTING, INDUCTOR] and module.do_bench is first
    assert module.do_bench("k") == (ONE_RUN_MS, ONE_RUN_MS)


class _Benchmarker:
    def benchmark_gpu(self, _callable, estimation_iters=5, memory_warmup_iters=100, benchmark_iters=100,
                      max_benchmark_duration=25, return_mode="min", **kwargs):
        return estimation_iters, memory_warmup_iters, benchmark_iters, return_mode, kwargs


def test_inductors_loop_gets_one_estimation_and_one_timed_run_and_no_flushes():
    module = types.SimpleNamespace(InductorBenchmarker=type("InductorBenchmarker", (_Benchmarker,), {}))
    patch_inductor(module, wrap_once)
    first = module.InductorBenchmarker.benchmark_gpu
    patch_inductor(module, wrap_once)
    assert module.InductorBenchmarker.benchmark_gpu is first  # not wrapped twice
    bench = module.InductorBenchmarker()
    assert bench.benchmark_gpu("kernel", rep=40) == (1, 0, 1, "min", {"rep": 40})
    assert bench.benchmark_gpu("kernel", 7) == (7, 100, 100, "min", {})  # positional counts: as given


def test_a_loop_without_those_arguments_is_called_as_given():
    def benchmark_gpu(self, _callable, **kwargs):
        return kwargs

    assert wrap_benchmark_gpu(benchmark_gpu)(None, "kernel", rep=40) == {"rep": 40}
    patch_inductor(types.SimpleNamespace(), wrap_once)  # no InductorBenchmarker: nothing to wrap, nothing raised
