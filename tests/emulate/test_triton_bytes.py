"""The capture layer's wrapper of Inductor's Triton launcher (emulate/triton_bytes.py): argument roles, the bytes
a launch reads and writes, and that the wrapper tells the capture library around each launch and never breaks it."""
from __future__ import annotations

import types

import torch

from stepcast.emulate.triton_bytes import (READ, SIZE, WRITTEN, _patch, access_counts, argument_roles, install,
                                           launch_bytes,
                                  wrap_run)


def test_inductor_argument_names_give_their_roles():
    names = ["in_out_ptr0", "in_ptr0", "in_ptr1", "out_ptr0", "xnumel", "r0_numel", "ws_ptr", "XBLOCK"]
    assert argument_roles(names) == (READ | WRITTEN, READ, READ, WRITTEN, SIZE, SIZE, 0, 0)


def test_launch_bytes_count_each_tensor_by_role_capped_at_the_iteration_space():
    act = torch.zeros(16, 64, dtype=torch.bfloat16)   # 1,024 elements, 2 bytes
    table = torch.zeros(1000, 64)                       # an embedding table: only the gathered rows are read
    weight = torch.zeros(64)
    roles = argument_roles(["in_out_ptr0", "in_ptr0", "in_ptr1", "out_ptr0", "xnumel"])
    read, written = launch_bytes(roles, [act, table, weight, act, 1024])
    assert read == 1024 * 2 + 1024 * 4 + 64 * 4 and written == 1024 * 2 + 1024 * 2
    # no size argument: whole tensors
    assert launch_bytes(argument_roles(["in_ptr0", "out_ptr0"]), [table, weight]) == (64000 * 4, 64 * 4)


POOL = """
def triton_poi_fused_max_pool2d_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    tmp0 = tl.load(in_ptr0 + (2*x0 + 128*x1), xmask)
    tmp1 = tl.load(in_ptr0 + (1 + 2*x0 + 128*x1), xmask)
    tmp2 = tl.load(in_ptr0 + (64 + 2*x0 + 128*x1), xmask)
    tmp3 = tl.load(in_ptr0 + (65 + 2*x0 + 128*x1), xmask)
    tl.store(out_ptr0 + (x2), triton_helpers.maximum(tmp0, tmp3), xmask)
"""


def test_a_pointer_loaded_by_k_statements_reads_up_to_k_iteration_spaces():
    """A 2x2 max pool reads its whole input (4 loads of a quarter-size space each); a broadcast weight loaded
    twice still reads only its own elements."""
    names = ["in_ptr0", "out_ptr0", "xnumel"]
    accesses = access_counts(names, POOL)
    assert accesses == (4, 1, 1)
    image, pooled = torch.zeros(64, 64), torch.zeros(32, 32)
    assert launch_bytes(argument_roles(names), [image, pooled, 1024], accesses) == (64 * 64 * 4, 1024 * 4)
    assert launch_bytes(argument_roles(names), [torch.zeros(16), pooled, 1024], accesses) == (16 * 4, 1024 * 4)


class _Autotuner:
    """Stands in for CachingAutotuner: a fn with arg_names and a run that launches."""

    def __init__(self, names):
        self.fn = types.SimpleNamespace(arg_names=names, src="")

    def run(self, *args, stream=0):
        return ("launched", args)


def test_wrapped_run_tells_the_bytes_before_the_launch_and_clears_them_after():
    told, calls = [], []

    def run(self, *args, stream=0):
        calls.append(told[-1])
        return "done"

    wrapped = wrap_run(run, lambda r, w: told.append((r, w)), lambda: None, lambda: None)
    x = torch.zeros(8)
    tuner = _Autotuner(["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"])
    assert wrapped(tuner, x, x, 8, stream=3) == "done"
    assert calls == [(32, 32)] and told[-1] == (0, 0)


def test_bookkeeping_failure_never_breaks_the_launch():
    told = []

    class Odd:
        def numel(self):
            raise RuntimeError("not a real tensor")

        def element_size(self):
            return 4

    wrapped = wrap_run(lambda self, *a, **k: "done", lambda r, w: told.append((r, w)), lambda: None, lambda: None)
    assert wrapped(_Autotuner(["in_ptr0"]), Odd()) == "done"
    assert told == [(0, 0), (0, 0)]


def test_patch_wraps_the_autotuner_once_and_install_needs_the_export():
    told = []
    driver = types.SimpleNamespace(stepcast_kernel_bytes=lambda r, w: told.append((r, w)),
                                 stepcast_pause=lambda: None, stepcast_resume=lambda: None)
    module = types.SimpleNamespace(CachingAutotuner=type("CachingAutotuner", (_Autotuner,), {}))
    _patch(module, driver)
    first = module.CachingAutotuner.run
    _patch(module, driver)
    assert module.CachingAutotuner.run is first  # not wrapped twice
    out = module.CachingAutotuner(["in_ptr0"]).run(torch.zeros(4), stream=1)
    assert out[0] == "launched" and told == [(16, 0), (0, 0)]
    install(types.SimpleNamespace())  # an older capture library: nothing installed, nothing raised
