"""The capture layer's wrappers of Inductor's and Triton's launchers (emulate/triton_bytes.py): argument roles, the bytes
a launch reads and writes, and that the wrapper tells the capture library around each launch and never breaks it."""
from __future__ import annotations

import textwrap
import types

import pytest
import torch

from stepcast.emulate.import_hooks import wrap_once
from stepcast.emulate.triton_bytes import (READ, SIZE, WRITTEN, _patch_heuristics, _patch_jit, access_counts,
                                           argument_roles, cycle_reread_bytes, cycled_loads, footprint, install,
                                           launch_bytes, loop_loads, reread_bytes, wrap_jit_run, wrap_run)


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


#: Inductor's looped GroupNorm (torch 2.14, trimmed): the statistics over each row, then a second pass over the
#: row that normalises it; the weight and bias are loaded in the second pass only
GROUP_NORM = """
def triton_red_fused_native_group_norm_0(in_ptr0, in_ptr1, in_ptr2, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 128
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 524288*x0), xmask, eviction_policy='evict_last', other=0.0)
        tmp2_mean = tl.where(xmask, tmp2_mean_next, tmp2_mean)
    tmp3, tmp4, tmp5 = triton_helpers.welford(tmp2_mean, tmp2_m2, tmp2_weight, 1)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        tmp8 = tl.load(in_ptr0 + (r0_1 + 524288*x0), xmask, eviction_policy='evict_first', other=0.0)
        tmp16 = tl.load(in_ptr1 + ((((r0_1 + 524288*x0) // 65536) % 64)), xmask, eviction_policy='evict_last')
        tmp18 = tl.load(in_ptr2 + ((((r0_1 + 524288*x0) // 65536) % 64)), xmask, eviction_policy='evict_last')
        tl.store(out_ptr2 + (r0_1 + 524288*x0), tmp19, xmask)
"""
#: torch 2.6's spelling of the loop (``roffset``, plain ``range``), one pass: a sum
ROW_SUM = """
def triton_red_fused_sum_0(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK : tl.constexpr, RBLOCK : tl.constexpr):
    for roffset in range(0, rnumel, RBLOCK):
        tmp0 = tl.load(in_ptr0 + (r1 + 4096*x0), rmask & xmask, eviction_policy='evict_first', other=0.0)
    tl.store(out_ptr0 + (x0), tmp2, xmask)
"""
NAMES = ["in_ptr0", "in_ptr1", "in_ptr2", "out_ptr2", "xnumel", "r0_numel"]
T4 = (40, 1024, 4 * 2**20)          # SMs, threads per SM, L2 bytes
H100 = (132, 2048, 50 * 2**20)


def test_a_looped_reduction_loads_a_tensor_once_per_pass_over_its_rows():
    assert loop_loads(NAMES, GROUP_NORM) == (2, 1, 1, 0, 0, 0)
    assert loop_loads(["in_ptr0", "out_ptr0", "xnumel", "rnumel"], ROW_SUM) == (1, 0, 0, 0)
    assert loop_loads(["in_ptr0"], POOL) == (0,)       # no loop over the rows at all


def test_rows_too_big_for_l2_are_read_again_from_dram_and_small_rows_are_not():
    """KernelBench's GroupNorm: 128 rows of 2 MiB (fp32) on a T4 stream the input twice; an LLM's RMSNorm rows of 4,096
    bf16 (8 KiB) on an H100 stay in L2 between the passes, and an unknown device counts no reread."""
    roles = argument_roles(NAMES)
    passes = loop_loads(NAMES, GROUP_NORM)
    big = torch.empty(128, 524288)
    args = [big, torch.zeros(64), torch.zeros(64), big, 128, 524288]
    extra = reread_bytes(roles, args, NAMES, passes, T4)
    assert 0.95 * big.numel() * 4 < extra <= big.numel() * 4
    small = torch.zeros(16384, 4096, dtype=torch.bfloat16)
    assert reread_bytes(roles, [small, torch.zeros(64), torch.zeros(64), small, 16384, 4096], NAMES, passes,
                        H100) == 0
    assert reread_bytes(roles, args, NAMES, passes, None) == 0
    assert reread_bytes(roles, args, NAMES, (1, 1, 1, 0, 0, 0), T4) == 0     # one pass: nothing read again


def test_a_looped_launch_tells_its_reread_bytes_where_the_target_cannot_hold_its_rows(monkeypatch):
    from stepcast.emulate import triton_bytes

    told = []
    wrapped = wrap_run(lambda self, *a, **k: "done", lambda r, w: told.append((r, w)), lambda: None, lambda: None)
    monkeypatch.setattr(triton_bytes, "target_device", lambda: T4)
    tuner = _Autotuner(NAMES)
    tuner.fn.src = GROUP_NORM
    rows = torch.empty(128, 65536)           # 32 MiB: eight times the T4's L2
    wrapped(tuner, rows, torch.zeros(64), torch.zeros(64), rows, 128, 65536)
    once = rows.numel() * 4 + 2 * 64 * 4
    assert told[0][1] == rows.numel() * 4 and once + 0.8 * rows.numel() * 4 < told[0][0] < once + rows.numel() * 4


#: Inductor's LayerNorm output kernel (torch 2.14, trimmed): a weight and bias of the normalised shape (4 Mi
#: elements) swept once per batch row (``xindex % 4194304``), the row statistics per batch row (``xindex // ...``)
LAYER_NORM_OUT = """
def triton_poi_fused_native_layer_norm_2(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 67108864
    x2 = xindex
    x1 = xindex // 4194304
    x0 = (xindex % 4194304)
    tmp0 = tl.load(in_ptr0 + (x2), None)
    tmp1 = tl.load(in_ptr1 + (x1), None, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr2 + (x1), None, eviction_policy='evict_last')
    tmp10 = tl.load(in_ptr3 + (x0), None, eviction_policy='evict_last')
    tmp12 = tl.load(in_ptr4 + (x0), None, eviction_policy='evict_last')
    tl.store(out_ptr0 + (x2), tmp13, None)
"""
LN_NAMES = ["in_ptr0", "in_ptr1", "in_ptr2", "in_ptr3", "in_ptr4", "out_ptr0", "xnumel"]


def test_a_tensor_loaded_at_xindex_modulo_n_is_swept_once_every_n_elements():
    assert cycled_loads(LN_NAMES, LAYER_NORM_OUT) == (0, 0, 0, 4194304, 4194304, 0, 0)
    assert cycled_loads(NAMES, GROUP_NORM) == (0,) * len(NAMES)        # a reduction's loops decide its order
    assert cycled_loads(["in_ptr0", "out_ptr0", "xnumel"], POOL) == (0, 0, 0)


def test_a_swept_weight_is_read_again_each_sweep_where_a_sweep_overflows_l2():
    """The LayerNorm output kernel over 16 batch rows moves 35.6 MB a sweep: a T4 (4 MiB of L2) reads the 16 MiB
    weight and bias again on each of the 15 later sweeps, nearly whole; an L40S's 96 MiB L2 keeps them."""
    x, w, stats = torch.empty(16, 64, 256, 256), torch.empty(64, 256, 256), torch.empty(16)
    args = [x, stats, stats, w, w, x, x.numel()]
    roles, cycles = argument_roles(LN_NAMES), cycled_loads(LN_NAMES, LAYER_NORM_OUT)
    moved = 2 * x.numel() * 4 + 2 * w.numel() * 4 + 2 * 16 * 4
    weights_again = 15 * 2 * w.numel() * 4
    assert 0.85 * weights_again < cycle_reread_bytes(roles, args, cycles, moved, T4) < weights_again
    assert cycle_reread_bytes(roles, args, cycles, moved, (142, 1536, 96 * 2**20)) == 0
    assert cycle_reread_bytes(roles, args, cycles, moved, None) == 0


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
    _patch_heuristics(module, driver, wrap_once)
    first = module.CachingAutotuner.run
    _patch_heuristics(module, driver, wrap_once)
    assert module.CachingAutotuner.run is first  # not wrapped twice
    out = module.CachingAutotuner(["in_ptr0"]).run(torch.zeros(4), stream=1)
    assert out[0] == "launched" and told == [(16, 0), (0, 0)]
    asked = []
    hooks = types.SimpleNamespace(after_import=lambda name, patch: asked.append(name), wrap_once=wrap_once)
    install(types.SimpleNamespace(), hooks)  # an older capture library:
    assert asked == []                       # nothing installed, nothing raised
    install(driver, hooks)
    assert asked == ["torch._inductor.runtime.triton_heuristics", "triton.runtime.jit"]


def test_a_footprint_counts_each_distinct_tensor_once_and_nothing_else():
    x = torch.zeros(1024, dtype=torch.bfloat16)
    scales = torch.zeros(8)
    assert footprint([x, x, 1024, None, "s"], {"scales": scales, "n": 3}) == 1024 * 2 + 8 * 4
    assert footprint([]) == 0


def test_a_user_kernel_inductor_compiled_tells_its_tensors_footprint():
    told = []
    wrapped = wrap_run(lambda self, *a, **k: "done", lambda r, w: told.append((r, w)), lambda: None, lambda: None)
    x, out = torch.zeros(256), torch.zeros(256)
    assert wrapped(_Autotuner(["x", "y", "n_elements", "BLOCK"]), x, out, 256) == "done"
    assert told == [(2 * 256 * 4, 0), (0, 0)]


class _JITFunction:
    __name__ = "_triton_fp8_rowwise_2d_fused_scale_and_cast_kernel"

    def run(self, *args, grid, warmup, **kwargs):
        return "launched", grid


def test_an_eager_triton_launch_tells_its_tensors_and_a_warmup_or_an_inductor_named_kernel_nothing():
    told = []
    driver = types.SimpleNamespace(stepcast_kernel_bytes=lambda r, w: told.append((r, w)),
                                   stepcast_pause=lambda: None, stepcast_resume=lambda: None)
    module = types.SimpleNamespace(JITFunction=type("JITFunction", (_JITFunction,), {}))
    _patch_jit(module, driver, wrap_once)
    first = module.JITFunction.run
    _patch_jit(module, driver, wrap_once)
    assert module.JITFunction.run is first  # not wrapped twice
    hp, fp8 = torch.zeros(64, 32, dtype=torch.bfloat16), torch.zeros(64, 32, dtype=torch.float8_e4m3fn)
    assert module.JITFunction().run(hp, out=fp8, grid=(4,), warmup=False) == ("launched", (4,))
    assert told == [(64 * 32 * 2 + 64 * 32, 0), (0, 0)]
    told.clear()
    module.JITFunction().run(hp, grid=(4,), warmup=True)
    inductor_named = module.JITFunction()
    inductor_named.__name__ = "triton_poi_fused_add_0"
    inductor_named.run(hp, grid=(4,), warmup=False)
    assert told == []


def test_the_jit_wrapper_never_breaks_a_launch():
    def tell(read, written):
        if read:
            raise RuntimeError("capture library gone")

    wrapped = wrap_jit_run(_JITFunction.run, tell, lambda: None, lambda: None)
    assert wrapped(_JITFunction(), torch.zeros(4), grid=(1,), warmup=False) == ("launched", (1,))


EAGER_KERNEL = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _scale_and_cast(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, (tl.load(x_ptr + offs, mask=mask) * 2.0).to(tl.bfloat16), mask=mask)

    x = torch.randn(1 << 22, device="cuda")
    y = torch.empty(1 << 22, device="cuda", dtype=torch.bfloat16)
    _scale_and_cast[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
""")


@pytest.mark.slow
def test_an_eager_triton_launch_carries_its_footprint_into_the_trace_and_is_timed_from_it(emulate_run, tmp_path,
                                                                                         monkeypatch):
    """Under the emulator, a plain ``@triton.jit`` launch records the bytes of its tensors (16 MiB read, 8 MiB
    written) and the simulator times it as the memory-bound kernel of those bytes, not a launch floor."""
    pytest.importorskip("triton")
    from stepcast import estimator
    from stepcast.emulate.sim.durations import assign_durations
    from stepcast.emulate.sim.program import build_program
    from stepcast.profiling.hardware import lookup

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    script = tmp_path / "eager_triton.py"
    script.write_text(EAGER_KERNEL)
    proc, _, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = list(traces[0]["events"])
    i = next(i for i, ev in enumerate(events) if ev["kind"] == "kernel" and ev["name"] == "_scale_and_cast")
    assert (events[i].get("bytes_read") or 0) + (events[i].get("bytes_written") or 0) == (4 + 2) << 22
    durations = assign_durations([build_program(traces[0], "<trace>")], lookup("h100-sxm"), "predicted",
                                 estimator.load(None), 1)
    assert durations.fallback_reasons.get("no_spec_launch_floor", 0) == 0
    assert durations.us[0][i] > 6 * 2**20 / 3.35e12 * 1e6   # at least the bytes at the H100's peak bandwidth


GROUP_NORM_SCRIPT = textwrap.dedent("""
    import torch

    norm = torch.compile(torch.nn.GroupNorm(8, 64).cuda())
    x = torch.randn(16, 64, 64, 64, device="cuda")    # 16 x 8 groups: 128 rows of 32 Ki fp32 (128 KiB), 16 MiB
    with torch.no_grad():
        norm(x)
    torch.cuda.synchronize()
""")


@pytest.mark.slow
@pytest.mark.parametrize("hardware, passes", [("t4", (1.7, 1.8)), ("h100-sxm", (1.0, 1.0))])
def test_inductors_looped_group_norm_reads_its_rows_again_where_the_targets_l2_cannot_hold_them(
        emulate_run, tmp_path, monkeypatch, hardware, passes):
    """Inductor compiles a GroupNorm of 128 KiB rows to a two-pass looped reduction whose 128 programs are all in
    flight at once on either GPU. On a T4 their 16 MiB overflow its 4 MiB of L2, so the second pass reads three
    quarters of the input from DRAM again (1.75 passes told); an H100's 50 MiB L2 holds them all (one pass)."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    script = tmp_path / "group_norm.py"
    script.write_text(GROUP_NORM_SCRIPT)
    proc, _, traces = emulate_run(tmp_path / hardware, script, hardware=hardware)
    assert proc.returncode == 0, proc.stderr[-3000:]
    looped = [ev for ev in traces[0]["events"] if ev["kind"] == "kernel" and ev["name"].startswith("triton_red_")]
    assert looped, [ev["name"] for ev in traces[0]["events"] if ev["kind"] == "kernel"]
    input_bytes = 16 * 64 * 64 * 64 * 4
    read = {ev.get("bytes_read") for ev in looped}
    assert len(read) == 1
    assert passes[0] * input_bytes <= read.pop() <= passes[1] * input_bytes + 4096   # + the weight and bias
