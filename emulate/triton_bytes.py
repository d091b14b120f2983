"""The bytes each Inductor Triton launch reads and writes, told to the capture library before the launch.

A Triton kernel has no aten op that describes it, and its grid does not show how many tensors it touches (Inductor
fuses one to a dozen). Its launcher does know: Inductor names a generated kernel's pointer arguments by role
(``in_ptr<k>`` read, ``out_ptr<k>`` written, ``in_out_ptr<k>`` both) and passes the tensors themselves to
``CachingAutotuner.run``. Around each ``run`` the capture layer (emulate/capture.py, which loads this file by its
path: nothing of the project is importable there) calls ``stepcast_kernel_bytes(read, written)``, so the launch
record the capture library writes carries them (the driver's ``rd``/``wr``), and resets them
to 0 after it. Each tensor counts at most the kernel's iteration space (the product of its ``*numel`` arguments)
elements per ``tl.load`` / ``tl.store`` statement of it in the kernel's source (``fn.src``), as Inductor's own
``estimate_kernel_num_bytes`` caps at the space: a gather (an embedding) reads the rows it indexes, not the whole
table, and a pooling window of k loads reads up to k spaces of its input.

A looped reduction (``triton_red_*`` whose rows do not fit one block) that loads a tensor in L loops over its rows
(a norm: the statistics, then the normalised output) reads it L times; the later passes come from L2 only where
the rows in flight fit there (:func:`reread_bytes`). Each program reloads its own rows one pass after it first read
them, and in between every other resident program reads its rows too, so a row is still in L2 when the rows of all
resident programs fit in it: true of a model's rows of a few thousand elements (an RMSNorm row of 4,096 bf16 is 8
KiB), not of a GroupNorm row of 2 MiB, which on a real T4 takes 1.6x the time of one pass over its input and output
(KernelBench, ``python -m benchmarks.emulate.kernelbench``). Rows in flight: the SMs times the programs an SM holds
(its thread limit over Inductor's looped-reduction programs of 8 warps), of the target the capture runs on.

A pointwise kernel that loads a smaller tensor at ``xindex % N`` (a LayerNorm's weight of the normalised shape,
broadcast over the batch) sweeps it once every N elements of its space: again from DRAM each sweep where what the
launch moves during one sweep overflows L2 (:func:`cycle_reread_bytes`; KernelBench's LayerNorm, a 16 MiB weight
and bias over a batch of 16, takes 1.5-1.6x one pass on a real T4, A10G or RTX A6000), from L2 where it fits.

A Triton kernel whose arguments follow no such naming is a user's or a library's (torchao's Float8 casts and scales,
launched eagerly through ``triton.runtime.jit.JITFunction.run``, or compiled by Inductor as a user-defined kernel):
its launch tells the **footprint** of its tensor arguments, each distinct tensor's bytes once, as read (the launch
does not say which it writes). Such kernels are casts, scales, norms and permutes that stream their tensors, so the
footprint is what they move; for one that touches part of a tensor it is an upper bound. Before, they were timed at
a launch floor: torchao's Float8 grouped-GEMM path casts every expert's activations and weights in kernels of that
kind.

The wrappers are installed when Inductor's runtime module or Triton's launcher is first imported
(emulate/import_hooks.py), so scripts that never use them pay nothing; their own work runs between
``stepcast_pause`` and ``stepcast_resume`` (the capture layer's time, not the script's host time).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

#: the module that defines Inductor's launcher (``CachingAutotuner``)
HEURISTICS = "torch._inductor.runtime.triton_heuristics"
#: the module that defines Triton's own launcher (``JITFunction.run``: every eager ``@triton.jit`` launch)
JIT = "triton.runtime.jit"
_NUMEL_ARGS = ("xnumel", "ynumel", "znumel", "rnumel", "r0_numel", "r1_numel")

#: argument role: 1 read, 2 written, 3 both (in_out), 4 an iteration-space size, 0 anything else
READ, WRITTEN, SIZE = 1, 2, 4


def argument_roles(names: Sequence[str]) -> tuple[int, ...]:
    """The role of each argument name of an Inductor kernel (``in_ptr0`` -> READ, ``in_out_ptr0`` -> READ |
    WRITTEN, ``xnumel`` -> SIZE ...)."""
    roles = []
    for name in names:
        if name.startswith("in_out_ptr"):
            roles.append(READ | WRITTEN)
        elif name.startswith("in_ptr"):
            roles.append(READ)
        elif name.startswith("out_ptr"):
            roles.append(WRITTEN)
        elif name in _NUMEL_ARGS:
            roles.append(SIZE)
        else:
            roles.append(0)
    return tuple(roles)


_ACCESS = re.compile(r"\btl\.(load|store)\(\s*(\w+)")
#: Inductor's generated pointwise / reduction kernels (profiling.classify's rule for them)
_INDUCTOR_NAME = re.compile(r"triton_(poi|per|red)_")


def access_counts(names: Sequence[str], source: str) -> tuple[int, ...]:
    """How many ``tl.load`` / ``tl.store`` statements of the kernel's source name each argument (at least 1): a
    pooling window or a gather loads one pointer at several offsets, each statement an iteration space of its own."""
    counts = dict.fromkeys(names, 0)
    for _, name in _ACCESS.findall(source or ""):
        if name in counts:
            counts[name] += 1
    return tuple(max(counts[n], 1) for n in names)


_LOOP = re.compile(r"^(\s*)for r\w*offset in (?:tl\.)?range\(")
_LOAD = re.compile(r"\btl\.load\(\s*(\w+)")


def loop_loads(names: Sequence[str], source: str) -> tuple[int, ...]:
    """In how many of the kernel's loops over its reduction dimension (``for r0_offset in range(...)``: a looped
    reduction's passes over its rows) each argument is loaded: 0 for one loaded outside them or not at all."""
    loops: dict[str, set[int]] = {n: set() for n in names}
    loop, indent = -1, None
    for line in (source or "").splitlines():
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is not None and depth <= indent:
            indent = None                       # the loop's body ended
        match = _LOOP.match(line)
        if match:
            loop, indent = loop + 1, len(match.group(1))
            continue
        if indent is not None:
            for name in _LOAD.findall(line):
                if name in loops:
                    loops[name].add(loop)
    return tuple(len(loops[n]) for n in names)


_CYCLE = re.compile(r"^\s*(x\d+) = \(?xindex % (\d+)\)?\s*$")
_LOAD_AT = re.compile(r"\btl\.load\(\s*(\w+) \+ \((\w+)\)")


def cycled_loads(names: Sequence[str], source: str) -> tuple[int, ...]:
    """For each argument a pointwise kernel loads at ``xindex % N`` (its index repeats every N elements of the
    iteration space: a tensor broadcast over the outer dimensions), N; else 0. Kernels with a reduction dimension
    (an ``r*numel`` argument) are not read: their loops decide the order."""
    if any(n in ("rnumel", "r0_numel", "r1_numel") for n in names):
        return tuple(0 for _ in names)
    cycle: dict[str, int] = {}
    found = dict.fromkeys(names, 0)
    for line in (source or "").splitlines():
        match = _CYCLE.match(line)
        if match:
            cycle[match.group(1)] = int(match.group(2))
            continue
        for name, index in _LOAD_AT.findall(line):
            if name in found and index in cycle:
                found[name] = cycle[index]
    return tuple(found[n] for n in names)


def cycle_reread_bytes(roles: Sequence[int], args: Sequence[Any], cycles: Sequence[int], moved: int,
                       device: tuple[int, int, int] | None) -> int:
    """Bytes a pointwise kernel reads again from DRAM of the tensors it sweeps once every N elements of its space
    (``cycles``: :func:`cycled_loads`): each sweep after the first, at the share of what the launch moves during
    one sweep (``moved`` over the space's sweeps) that overflows L2. ``device``: (SMs, threads per SM, L2 bytes);
    None: nothing counted."""
    if device is None or not any(cycles) or moved <= 0:
        return 0
    space = _space(roles, args)
    if not space:
        return 0
    extra = 0.0
    for role, arg, period in zip(roles, args, cycles):
        if not role & READ or period <= 0 or period >= space or not hasattr(arg, "element_size"):
            continue
        sweeps = space / period
        extra += (sweeps - 1.0) * min(arg.numel(), period) * arg.element_size() * _overflow(device, moved / sweeps)
    return int(extra)


#: the warps of one program of Inductor's looped reductions (its reduction configs cap num_warps at 8): with an
#: SM's thread limit, how many programs an SM holds at once
REDUCTION_PROGRAM_THREADS = 8 * 32


def reread_bytes(roles: Sequence[int], args: Sequence[Any], names: Sequence[str], passes: Sequence[int],
                 device: tuple[int, int, int] | None) -> int:
    """Bytes a looped reduction reads again from DRAM: each tensor loaded in L > 1 passes over its rows
    (:func:`loop_loads`) is read L - 1 more times, of which the share that the rows in flight overflow L2 comes from
    DRAM (module docstring). ``device``: (SMs, max threads per SM, L2 bytes) of the target; None: no rereads
    counted."""
    if device is None or not any(p > 1 for p in passes):
        return 0
    sms, threads, _ = device
    rows = next((int(a) for n, a in zip(names, args) if n == "xnumel" and isinstance(a, int)), 0)
    space = _space(roles, args)
    again = [(p - 1, (a.numel() if space is None else min(a.numel(), space)) * a.element_size())
             for r, a, p in zip(roles, args, passes) if r & READ and p > 1 and hasattr(a, "element_size")]
    if rows <= 0 or not again:
        return 0
    in_flight = min(1.0, sms * max(threads // REDUCTION_PROGRAM_THREADS, 1) / rows) * sum(b for _, b in again)
    return int(_overflow(device, in_flight) * sum(extra * size for extra, size in again))


def _overflow(device: tuple[int, int, int], touched: float) -> float:
    """The share of ``touched`` bytes, read before they are read again, that the device's L2 cannot hold."""
    return max(0.0, 1.0 - device[2] / touched) if touched > 0 else 0.0


def target_device() -> tuple[int, int, int] | None:
    """(SMs, max threads per SM, L2 bytes) of the current CUDA device (under the emulator: the target's catalog
    figures), None where torch cannot tell."""
    try:
        import torch

        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(p.multi_processor_count), int(p.max_threads_per_multi_processor), int(p.L2_cache_size)
    except Exception:
        return None


def _space(roles: Sequence[int], args: Sequence[Any]) -> int | None:
    """A launch's iteration space: the product of its size arguments (None without any)."""
    sizes = [int(a) for r, a in zip(roles, args) if r == SIZE and isinstance(a, int)]
    return math.prod(sizes) if sizes else None


def launch_bytes(roles: Sequence[int], args: Sequence[Any], accesses: Sequence[int] = ()) -> tuple[int, int]:
    """(bytes read, bytes written) of one launch: each tensor argument's bytes by its role, its elements capped at
    its accesses (statements, ``accesses``; 1 each when not given) times the iteration space (the product of the
    size arguments; uncapped when there are none)."""
    space = _space(roles, args)
    read = written = 0
    for i, (role, arg) in enumerate(zip(roles, args)):
        if not role & (READ | WRITTEN) or not hasattr(arg, "element_size"):
            continue
        numel = arg.numel()
        reach = None if space is None else space * (accesses[i] if i < len(accesses) else 1)
        size = (numel if reach is None else min(numel, reach)) * arg.element_size()
        if role & READ:
            read += size
        if role & WRITTEN:
            written += size
    return read, written


def footprint(args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> int:
    """Bytes of the distinct tensors among a launch's arguments (a tensor passed twice counts once)."""
    seen: set[int] = set()
    total = 0
    for arg in (*args, *(kwargs or {}).values()):
        if not hasattr(arg, "element_size") or not hasattr(arg, "data_ptr"):
            continue
        key = arg.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += arg.numel() * arg.element_size()
    return total


def _telling(run: Callable[..., Any], measure: Callable[[Any, tuple, dict], tuple[int, int] | None],
             tell: Callable[[int, int], None], pause: Callable[[], None],
             resume: Callable[[], None]) -> Callable[..., Any]:
    """``run`` wrapped to tell ``measure(self, args, kwargs)`` (bytes read, written) before the launch and
    ``tell(0, 0)`` after; ``measure`` giving None launches with nothing told. The bookkeeping runs paused (the
    capture layer's time) and never breaks the script's launch: a failure tells (0, 0)."""

    def stepcast_run(self, *args, **kwargs):
        pause()
        try:
            figures = measure(self, args, kwargs)
            if figures is not None:
                tell(*figures)
        except Exception:
            figures = (0, 0)
            tell(0, 0)
        finally:
            resume()
        if figures is None:
            return run(self, *args, **kwargs)
        try:
            return run(self, *args, **kwargs)
        finally:
            tell(0, 0)

    stepcast_run.__wrapped__ = run
    return stepcast_run


def _autotuner_bytes(autotuner: Any, args: tuple, kwargs: dict) -> tuple[int, int]:
    """A ``CachingAutotuner`` launch's bytes: by its arguments' roles, or for a kernel whose arguments have none (a
    user-defined kernel Inductor compiled), their footprint (module docstring)."""
    known = autotuner.__dict__.get("_stepcast_arguments")
    if known is None:  # once per kernel: its argument names, source and device do not change
        names = list(getattr(autotuner.fn, "arg_names", ()) or ())
        source = getattr(autotuner.fn, "src", "")
        passes, cycles = loop_loads(names, source), cycled_loads(names, source)
        device = target_device() if any(p > 1 for p in passes) or any(cycles) else None
        known = autotuner._stepcast_arguments = (names, argument_roles(names), access_counts(names, source), passes,
                                                 cycles, device)
    names, roles, accesses, passes, cycles, device = known
    if any(r & (READ | WRITTEN) for r in roles):
        read, written = launch_bytes(roles, args, accesses)
        if device is not None:  # a kernel that reads something again (only those asked the device)
            read += reread_bytes(roles, args, names, passes, device) + \
                cycle_reread_bytes(roles, args, cycles, read + written, device)
        return read, written
    return footprint(args, kwargs), 0


def _jit_bytes(function: Any, args: tuple, kwargs: dict) -> tuple[int, int] | None:
    """A ``JITFunction.run`` launch's footprint; None for a ``warmup`` call (it compiles, launches nothing) and for
    a kernel named as Inductor names its own (``triton_poi_...``), which the simulator times by Inductor's rule,
    from its grid when no bytes are told."""
    if kwargs.get("warmup") or _INDUCTOR_NAME.match(getattr(function, "__name__", "") or ""):
        return None
    return footprint(args, {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}), 0


def wrap_run(run: Callable[..., Any], tell: Callable[[int, int], None], pause: Callable[[], None],
             resume: Callable[[], None]) -> Callable[..., Any]:
    """``CachingAutotuner.run`` telling each launch's bytes (:func:`_autotuner_bytes`)."""
    return _telling(run, _autotuner_bytes, tell, pause, resume)


def wrap_jit_run(run: Callable[..., Any], tell: Callable[[int, int], None], pause: Callable[[], None],
                 resume: Callable[[], None]) -> Callable[..., Any]:
    """``JITFunction.run`` telling each launch's tensor footprint (:func:`_jit_bytes`)."""
    return _telling(run, _jit_bytes, tell, pause, resume)


def _patch_heuristics(module: Any, driver: Any, wrap_once: Callable[..., None]) -> None:
    wrap_once(getattr(module, "CachingAutotuner", None), "run",
              lambda run: wrap_run(run, driver.stepcast_kernel_bytes, driver.stepcast_pause, driver.stepcast_resume))


def _patch_jit(module: Any, driver: Any, wrap_once: Callable[..., None]) -> None:
    wrap_once(getattr(module, "JITFunction", None), "run",
              lambda run: wrap_jit_run(run, driver.stepcast_kernel_bytes, driver.stepcast_pause,
                                       driver.stepcast_resume))


def install(driver: Any, hooks: Any) -> None:
    """Wrap Inductor's and Triton's launchers now where loaded, else when first imported (``hooks``:
    emulate/import_hooks.py, its ``after_import`` and ``wrap_once``). ``driver``: the capture library (ctypes), which
    exports ``stepcast_kernel_bytes``; an older one without it: nothing is installed."""
    try:
        tell = driver.stepcast_kernel_bytes
    except AttributeError:
        return
    import ctypes

    tell.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    tell.restype = None
    hooks.after_import(HEURISTICS, lambda module: _patch_heuristics(module, driver, hooks.wrap_once))
    hooks.after_import(JIT, lambda module: _patch_jit(module, driver, hooks.wrap_once))
