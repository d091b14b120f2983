"""emulate/quick_bench.py: Triton's benchmark loop gets one warm-up and one timed repeat under the emulator, whose
elapsed times are the same at every repeat; everything else reaches the loop as given."""
from __future__ import annotations

import types

from stepcast.emulate.quick_bench import ONE_RUN_MS, TESTING, install, patch, wrap_do_bench


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
    install(lambda name, apply: (asked.append(name), apply(module)))
    first = module.do_bench
    patch(module)
    assert asked == [TESTING] and module.do_bench is first and module.do_bench("k") == (ONE_RUN_MS, ONE_RUN_MS)
