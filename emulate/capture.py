"""The capture layer inside the emulated process: run an unmodified script on the virtual GPU and tag every call
the emulated driver logs with the aten op it belongs to.

Started by ``stepcast run`` as ``python -P .../emulate/capture.py SCRIPT [ARGS...]`` (by file path, so
that nothing of the project is on the script's ``sys.path``) on the emulated driver (emulate/driver: found by the
CUDA runtime through ``LD_LIBRARY_PATH``; ``STEPCAST_DRIVER`` names it for the capture API, ``stepcast_*``), which
logs to ``$STEPCAST_DRIVER_LOG.<pid>.jsonl``; ``STEPCAST_LOG`` names this rank's capture (the op table goes to
``<STEPCAST_LOG>.ops.json``). It

- belongs to its launcher: the kernel sends it SIGTERM when ``emulate run`` dies (``PR_SET_PDEATHSIG``), and
  SIGTERM, from the launcher or anyone, makes it write its op table with
  status ``signal`` and exit with 128 + 15, so a stopped rank keeps its trace up to the signal. SIGTERM is blocked
  in every thread (the mask is set before torch starts any) and taken by one watcher thread with ``sigwait``,
  which runs even while the main thread sits in a long call that released the GIL; forked children (data loader
  workers) get the default disposition back;

- tells the driver, around each aten op, the op's id, so every launch, copy and collective it logs carries it; the
  op table (name, input shapes, dtypes, scalar arguments) goes to ``<log>.ops.json`` at exit.
  The hook is torch's RecordFunction (a C++ callback, csrc/opctx.cpp, named by ``STEPCAST_OPCTX``) when it could
  be built, else a Python TorchDispatchMode (several times slower). Time spent describing ops is reported to the
  driver as the capture layer's own (``stepcast_pause``/``resume``), so host gaps stay close to the script's own;
- marks iteration boundaries: ``torch.profiler`` steps, optimizer steps (a global step post-hook) and top-level
  backward passes are all marked, with their source; the collator keeps the best source present;
- in a sparse run (``--run-ranks``: ``STEPCAST_RUN_RANKS`` lists the ranks that run), answers what torch waits for
  from the absent ranks (NCCL unique ids, small-collective areas) and records the process groups
  (emulate/sparse_store.py, loaded by its path);
- deduplicates ranks: from the second profiler/optimizer mark on, ranks compare the hash of the device work of the
  iteration just ended, in ``1 + STEPCAST_DEDUP_CONFIRM`` iterations in a row; a rank equal to the same lower rank in
  every one stops (``STEPCAST_DEDUP=0`` disables); the collator rebuilds its trace;
- is complete or says it is not: the op table is saved whenever it has grown at an iteration mark, and at every exit
  path it can reach (the script's end, ``sys.exit``, an exception, ``os._exit``, SIGTERM, a deadlock), each of which
  also writes the log's ``end`` record (how it ended, how many timed records) and marks the rank as left for the
  other ranks' waits (emulate/driver/csrc/ranks.c); a log without an ``end`` record was cut short;
- reports a deadlock the driver finds (a small collective whose peer has left, or every running rank waiting) in one
  line and leaves with exit code 4, where the GPUs would hang;
- tells the capture library, around each launch of an Inductor Triton kernel, the bytes it reads and writes
  (emulate/triton_bytes.py: its tensor arguments by role), which the launch record carries;
- states the routing of mixture-of-experts routers: each router top-k's expert ids follow ``STEPCAST_MOE_ROUTING``
  (emulate/stated_routing.py), and the C++ hook carries the values on to token counts and split sizes;
- times events: ``cudaEventElapsedTime`` / ``cuEventElapsedTime`` answer the predicted device time of the work
  between the two events (emulate/event_timing.py), so autotuners choose on the target's predicted times;
- drops CUDA activities from ``torch.profiler`` (CUPTI needs a real driver) and skips DDP's cross-rank parameter
  shape check (device reads return zeros, so it would always fail);
- runs the script with ``runpy`` (``__name__ == "__main__"``), then writes the op table and torch's own memory
  statistics (``max_memory_allocated``/``reserved``) whatever way the script ended.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import runpy
import signal
import sys
import threading
from pathlib import Path
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
STOP_SIGNAL = signal.SIGTERM


def _belong_to_launcher() -> None:
    """Block SIGTERM (for the watcher thread; before torch exists, so every thread inherits the mask), ask for it
    when the launcher dies, and leave at once if it already has (between fork and the prctl)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {STOP_SIGNAL})
    os.register_at_fork(after_in_child=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, {STOP_SIGNAL}))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(STOP_SIGNAL), 0, 0, 0)
    launcher = os.environ.get("STEPCAST_LAUNCHER_PID")
    if launcher and os.getppid() != int(launcher):
        os._exit(128 + int(STOP_SIGNAL))


if __name__ == "__main__":
    _belong_to_launcher()

import torch  # noqa: E402  (after the signal mask: torch's threads must inherit it)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

SOURCE_PROFILER, SOURCE_OPTIMIZER, SOURCE_BACKWARD = 1, 2, 3
EXIT_DEADLOCK = 4  # a rank that found the run deadlocked (emulate/driver/csrc/fakecuda.h FK_EXIT_DEADLOCK)
DEADLOCK_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
MAX_DEDUP_ROUNDS = 8  # emulate/driver/csrc/dedup.c MAX_ROUNDS
CLEAN_ENDS = frozenset({"ok", "os._exit", "deduplicated"})  # how a process may end with the run going on
SOURCES_BY_ID = {SOURCE_PROFILER: "profiler", SOURCE_OPTIMIZER: "optimizer", SOURCE_BACKWARD: "backward"}
_SCALARS = (bool, int, float, str, type(None))


def _driver() -> ctypes.CDLL:
    """The capture API. Loaded RTLD_GLOBAL: the RecordFunction hook (csrc/opctx.cpp) resolves its ``stepcast_*``
    names from the global scope, where the driver is put here."""
    lib = ctypes.CDLL(os.environ["STEPCAST_DRIVER"], mode=ctypes.RTLD_GLOBAL)
    for name in ("stepcast_pause", "stepcast_resume", "stepcast_flush"):
        getattr(lib, name).restype = None
    lib.stepcast_op_enter.argtypes = [ctypes.c_int]
    lib.stepcast_op_enter.restype = None
    lib.stepcast_op_exit.argtypes = [ctypes.c_int]
    lib.stepcast_op_exit.restype = None
    lib.stepcast_mark.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.stepcast_mark.restype = None
    lib.stepcast_needs_untrack.restype = ctypes.c_int
    lib.stepcast_untrack.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.stepcast_untrack.restype = None
    lib.stepcast_device_peak.argtypes = [ctypes.c_int]
    lib.stepcast_device_peak.restype = ctypes.c_longlong
    for name in ("stepcast_rank_alive", "stepcast_rank_exited"):
        getattr(lib, name).restype = None
    lib.stepcast_end.argtypes = [ctypes.c_char_p]
    lib.stepcast_end.restype = None
    lib.stepcast_set_deadlock_handler.argtypes = [DEADLOCK_HANDLER]
    lib.stepcast_set_deadlock_handler.restype = None
    lib.stepcast_dedup_round.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.stepcast_dedup_round.restype = ctypes.c_int
    lib.stepcast_dedup_decide.argtypes = [ctypes.c_int]
    lib.stepcast_dedup_decide.restype = None
    return lib


def _arg_value(a: Any) -> Any:
    """A JSON-able, hashable stand-in for a non-tensor argument (dims, flags, scalars); None for anything else."""
    if isinstance(a, _SCALARS):
        return a
    if isinstance(a, (list, tuple)) and all(isinstance(x, _SCALARS) for x in a):
        return tuple(a)
    if isinstance(a, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(a)
    return None


def describe(args: tuple, kwargs: dict) -> tuple[tuple, tuple, tuple, tuple]:
    """(shapes, dtypes, values, kwargs) in the form profiling.classify.classify_op reads: one entry per positional
    argument; a tensor gives its shape and dtype, a tensor list a list of each, anything else ``()`` and ``""``."""
    shapes, dtypes, values = [], [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(tuple(a.shape))
            dtypes.append(str(a.dtype))
            values.append(None)
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            shapes.append(tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else () for t in a))
            dtypes.append(tuple(str(t.dtype) if isinstance(t, torch.Tensor) else "" for t in a))
            values.append(None)
        else:
            shapes.append(())
            dtypes.append("")
            values.append(_arg_value(a))
    kw = tuple(sorted((k, _arg_value(v)) for k, v in kwargs.items() if not isinstance(v, torch.Tensor)))
    return tuple(shapes), tuple(dtypes), tuple(values), kw


class NativeOpContext:
    """The C++ RecordFunction hook (emulate/csrc/opctx.cpp): same op table, at C++ speed."""

    def __init__(self, path: str) -> None:
        self._lib = ctypes.CDLL(path)
        self._lib.stepcast_opctx_table.restype = ctypes.c_char_p

    def __enter__(self) -> "NativeOpContext":
        if not self._lib.stepcast_opctx_install():
            raise RuntimeError("stepcast: could not register the RecordFunction callback")
        return self

    def __exit__(self, *exc) -> None:
        self._lib.stepcast_opctx_remove()

    def dump(self) -> list[dict[str, Any]]:
        return json.loads(self._lib.stepcast_opctx_table().decode())

    def count(self) -> int:
        return int(self._lib.stepcast_opctx_count())

    @property
    def library(self) -> ctypes.CDLL:
        """The hook's library (the stated routing's writer is installed into it: emulate/stated_routing.py)."""
        return self._lib


class OpRecorder(TorchDispatchMode):
    """Tags the driver's log with the aten op in which each call happens; keeps the op table."""

    def __init__(self, driver: ctypes.CDLL) -> None:
        super().__init__()
        self._driver = driver
        self._ids: dict[tuple, int] = {}
        self.table: list[tuple] = []
        self._lock = threading.Lock()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        driver = self._driver
        driver.stepcast_pause()
        kwargs = kwargs or {}
        try:
            key = (func, *describe(args, kwargs))
        except Exception:  # an argument we cannot describe must never break the user's script
            key = (func, (), (), (), ())
        op_id = self._ids.get(key)
        if op_id is None:
            with self._lock:
                op_id = self._ids.setdefault(key, len(self.table))
                if op_id == len(self.table):
                    self.table.append(key)
        driver.stepcast_host_work(0)  # one dispatched op (autograd nodes are not seen here: the native hook counts them)
        driver.stepcast_op_enter(op_id)
        try:
            out = func(*args, **kwargs)
        finally:
            driver.stepcast_op_exit(-1)
        if driver.stepcast_needs_untrack():  # a kernel wrote the outputs: their remembered bytes are stale
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    driver.stepcast_untrack(t.data_ptr(), t.numel() * t.element_size())
        driver.stepcast_resume()
        return out

    def dump(self) -> list[dict[str, Any]]:
        return [{"op": str(func), "shapes": shapes, "dtypes": dtypes, "args": values, "kwargs": dict(kw)}
                for func, shapes, dtypes, values, kw in self.table]

    def count(self) -> int:
        return len(self.table)


DEDUP_MARK = 2  # ranks compare the device work of the iteration that ends at this mark (the first full one) ...


class Dedup:
    """... and of the ``confirm`` iterations after it (``STEPCAST_DEDUP_CONFIRM``): a rank stops as a duplicate only
    when it matched the same lower rank in every one of them (emulate/driver/csrc/dedup.c), so a program that
    diverges within them runs on, and its divergence is reported as the deadlock it is. One source of marks
    (the first profiler or optimizer source to reach DEDUP_MARK) counts. ``on_duplicate(representative, source,
    mark)`` stops the rank."""

    def __init__(self, driver: ctypes.CDLL, confirm: int, on_duplicate: Callable[[int, int, int], None]) -> None:
        self.driver, self.confirm, self.on_duplicate = driver, confirm, on_duplicate
        self.source: int | None = None
        self.representatives: list[int] = []
        self.done = False

    def at_mark(self, source: int, count: int) -> None:
        if self.done or source == SOURCE_BACKWARD or count < DEDUP_MARK:
            return
        if self.source is None:
            self.source = source
        if source != self.source:
            return
        round_ = count - DEDUP_MARK
        self.driver.stepcast_pause()  # waiting for the other ranks is no host work of the script's
        try:
            self.representatives.append(self.driver.stepcast_dedup_round(source, round_))
            if round_ < self.confirm:
                return
            self.done = True
            rank = int(os.environ.get("RANK", "0"))
            rep = self.representatives[0]
            stops = 0 <= rep != rank and all(r == rep for r in self.representatives)
            self.driver.stepcast_dedup_decide(int(stops))
        finally:
            self.driver.stepcast_resume()
        if stops:
            self.on_duplicate(rep, source, count)


def _install_iteration_marks(driver: ctypes.CDLL, dedup: Dedup | None, on_mark: Callable[[], None]) -> None:
    """Mark iteration ends (then ``on_mark()``: the capture layer saves a grown op table), and let rank dedup
    compare ranks at its marks."""
    counts = {SOURCE_PROFILER: 0, SOURCE_OPTIMIZER: 0, SOURCE_BACKWARD: 0}

    def mark(source: int) -> None:
        counts[source] += 1
        driver.stepcast_mark(source, counts[source])
        on_mark()
        if dedup is not None:
            dedup.at_mark(source, counts[source])

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    depth = threading.local()
    # an optimizer whose step runs other optimizers' steps (torchtitan's OptimizersContainer, a wrapper) ends one
    # iteration: only the outermost step marks
    register_optimizer_step_pre_hook(lambda *_: setattr(depth, "optimizer", getattr(depth, "optimizer", 0) + 1))

    def optimizer_done(*_: Any) -> None:
        depth.optimizer = getattr(depth, "optimizer", 1) - 1
        if depth.optimizer == 0:
            mark(SOURCE_OPTIMIZER)

    register_optimizer_step_post_hook(optimizer_done)

    original_backward = torch.autograd.backward

    def backward(*args, **kwargs):
        level = getattr(depth, "level", 0)
        depth.level = level + 1
        try:
            return original_backward(*args, **kwargs)
        finally:
            depth.level = level
            if level == 0:
                mark(SOURCE_BACKWARD)

    torch.autograd.backward = backward  # Tensor.backward calls torch.autograd.backward

    import torch.profiler as tprof
    original_step, original_init = tprof.profile.step, tprof.profile.__init__

    def step(self, *args, **kwargs):
        out = original_step(self, *args, **kwargs)
        mark(SOURCE_PROFILER)
        return out

    def init(self, *args, activities=None, **kwargs):
        if activities is not None:  # CUPTI cannot run on the virtual device
            activities = [a for a in activities if a != tprof.ProfilerActivity.CUDA] or [tprof.ProfilerActivity.CPU]
        elif args:
            first = list(args[0] or [])
            args = ([a for a in first if a != tprof.ProfilerActivity.CUDA] or [tprof.ProfilerActivity.CPU], *args[1:])
        else:
            activities = [tprof.ProfilerActivity.CPU]
        if activities is not None:
            kwargs["activities"] = activities
        return original_init(self, *args, **kwargs)

    tprof.profile.step = step
    tprof.profile.__init__ = init


def _skip_value_checks() -> None:
    """Checks that compare device values across ranks cannot pass when every device read returns zeros: DDP's
    one-time parameter-shape verification (an all-gather of shapes at construction) is skipped. The ranks of the
    bundled examples, like most scripts, build identical models, which is all the check verifies."""
    import torch.distributed as dist

    if dist.is_available() and hasattr(dist, "_verify_params_across_processes"):
        dist._verify_params_across_processes = lambda *args, **kwargs: None


def _memory_stats(driver: ctypes.CDLL) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    if torch.cuda.is_initialized():
        dev = torch.cuda.current_device()
        stats = {"device": dev, "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
                 "max_memory_reserved": torch.cuda.max_memory_reserved(dev)}
        stats["device_peak_bytes"] = int(driver.stepcast_device_peak(dev))
    return stats


def _remove_shared_memory() -> None:
    """The run's shared-memory areas (small collectives, dedup: /dev/shm/stepcast-<run id>-*). The launcher
    removes them too; this covers a launcher that was killed outright."""
    run = os.environ.get("STEPCAST_RUN_ID")
    if run:
        for area in Path("/dev/shm").glob(f"stepcast-{run}-*"):
            area.unlink(missing_ok=True)


def _load_private(name: str, path: Path) -> Any:
    """The module at ``path``, loaded by its path and registered under the private name ``_stepcast_<name>``
    (dataclasses look their module up)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_stepcast_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _sibling(name: str, path: Path | None = None) -> Any:
    """This folder's module ``name`` (or the one at ``path``), loaded by its path so that nothing of the project
    lands on the script's ``sys.path``. Such a module may import the error classes (``from stepcast.errors import
    ...``, standard library only): ``stepcast.errors`` names the project's own copy while it loads, and the
    script's ``sys.modules`` is left as it was."""
    errors = sys.modules.get("_stepcast_errors") or _load_private("errors", _stepcast_file("errors"))
    saved = sys.modules.get("stepcast.errors")
    sys.modules["stepcast.errors"] = errors
    try:
        return _load_private(name, path or Path(__file__).resolve().with_name(f"{name}.py"))
    finally:
        if saved is None:
            del sys.modules["stepcast.errors"]
        else:
            sys.modules["stepcast.errors"] = saved


def _install_routing(native: NativeOpContext | None) -> Callable[[], dict[str, Any]]:
    """Give every router top-k the stated routing (``STEPCAST_MOE_ROUTING``: emulate/stated_routing.py, through
    the C++ hook; the launcher checked the value); returns what the op table keeps of it. Without the C++ hook the
    routing cannot be given (the Python op context does not carry values), and the record says so."""
    text = _settings().get("STEPCAST_MOE_ROUTING")
    if native is None:
        return lambda: {"routing": None, "stated": bool(text), "routers": [],
                        "error": "no routing given: the Python op context cannot carry values (build the C++ hook)"}
    router, callback = _sibling("stated_routing").install(native.library, text)
    keep_alive.append(callback)
    return router.record


def _install_sparse(driver: ctypes.CDLL) -> dict[str, Any]:
    """A sparse run (``--run-ranks``): answer for the absent ranks (emulate/sparse_store.py); returns the record
    kept in the op table."""
    return _sibling("sparse_store").install(driver)


def _watch_stop_signal(on_stop: Callable[[int], None]) -> None:
    """Run ``on_stop(signum)`` on a thread of its own when SIGTERM arrives (blocked elsewhere: see
    :func:`_belong_to_launcher`). Without the launcher's mask (a rank started by hand) it is blocked here."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {STOP_SIGNAL})
    threading.Thread(target=lambda: on_stop(signal.sigwait({STOP_SIGNAL})), name="stepcast-stop",
                     daemon=True).start()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m stepcast.emulate.capture SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script = Path(argv[0]).resolve()
    driver = _driver()
    driver.stepcast_rank_alive()
    sparse = _install_sparse(driver) if os.environ.get("STEPCAST_RUN_RANKS") else None
    native = os.environ.get("STEPCAST_OPCTX")
    recorder = NativeOpContext(native) if native else OpRecorder(driver)
    routing = _install_routing(recorder if native else None)  # a MoE router's top-k gives the stated routing
    hooks = _sibling("import_hooks")  # patches library modules at their first import, wrapping each function once
    _sibling("triton_bytes").install(driver, hooks)  # each Triton launch's bytes read and written
    _sibling("event_timing").install(driver, recorder.dump)  # elapsed event times: predicted device time between
    _sibling("quick_bench").install(hooks)  # Triton's benchmark loop: one repeat (the answers are the same)
    driver.stepcast_count_python()  # this thread's Python calls count as host work (csrc/hostwork.c)
    status: dict[str, Any] = {"exit": "running"}  # until the process ends: a saved table says so if it is killed
    sidecar_lock, finish_lock = threading.RLock(), threading.Lock()
    main_pid = os.getpid()
    saved_ops = -1
    ended = False
    real_exit = os._exit

    def write_sidecar(extra: dict[str, Any] | None = None) -> None:
        """Save the op table and the rank's facts (``<log>.ops.json``, written to a temporary name and renamed);
        the process's own, never a forked child's."""
        nonlocal saved_ops
        if os.getpid() != main_pid:
            return
        with sidecar_lock:
            ops = recorder.dump()
            sidecar = {"ops": ops, "memory": _memory_stats(driver), "status": status,
                       "op_context": "record_function" if native else "dispatch_mode",
                       "host_work": "record_function" if native else "dispatch_mode",
                       "torch": torch.__version__, "script": str(script), "argv": sys.argv[1:], **(extra or {})}
            if sparse is not None:
                sidecar["sparse"] = sparse
            sidecar["moe_routing"] = routing()
            log = Path(os.environ["STEPCAST_LOG"])
            tmp = log.with_name(log.name + ".ops.json.tmp")
            tmp.write_text(json.dumps(sidecar))
            os.replace(tmp, log.with_name(log.name + ".ops.json"))
            saved_ops = len(ops)

    def finish(how: str, extra: dict[str, Any] | None = None) -> None:
        """The process ends (``how``): save the capture, write the log's end record, and tell the other ranks this
        one has left (waits on it end at once: emulate/driver/csrc/ranks.c). Once; never in a forked child."""
        nonlocal ended
        if os.getpid() != main_pid:
            return
        with finish_lock:  # a second path (SIGTERM during a deadlock report) waits for the first to finish
            if ended:
                return
            ended = True
            try:
                write_sidecar(extra)
            finally:
                driver.stepcast_end(how.encode())
                if how in CLEAN_ENDS or (how == "sys.exit" and not status.get("code")):
                    # a rank that fails is no peer to wait for either, but the launcher stops every rank then:
                    # only a clean end is announced, so that a wait on it is a deadlock of the program
                    driver.stepcast_rank_exited()

    def save_grown_table() -> None:
        """At each iteration mark: save the op table when it has grown, so a rank killed later (SIGKILL, the OOM
        killer) still leaves the table its log's records point into."""
        if recorder.count() != saved_ops:
            driver.stepcast_pause()
            try:
                write_sidecar()
            finally:
                driver.stepcast_resume()

    def stop_as_duplicate(representative: int, source: int, mark: int) -> None:
        """This rank's iterations matched a lower rank's: record where it stopped and leave at once (no
        finalisers: the representative carries on with the collectives, the collator rebuilds this trace)."""
        nonlocal status
        status = {"exit": "deduplicated", "representative": representative}
        finish("deduplicated", {"dedup": {"representative": representative, "source": SOURCES_BY_ID[source],
                                          "mark": mark}})
        sys.stdout.flush()
        sys.stderr.flush()
        real_exit(0)

    def stop_on_signal(signum: int) -> None:
        """SIGTERM (the launcher stops this rank, or it died): keep what was captured, then leave at once."""
        nonlocal status
        status = {"exit": "signal", "signal": signal.Signals(signum).name}
        try:
            finish("signal")
            _remove_shared_memory()  # the run is ending: its launcher stops every rank, or it is gone
            sys.stdout.flush()
            sys.stderr.flush()
        finally:  # whatever failed above, the rank leaves now (the launcher is waiting for it)
            real_exit(128 + signum)

    def on_deadlock(message: bytes) -> None:
        """The driver found the run deadlocked (a collective whose peer has left, or every rank waiting): save the
        capture, say where in one line, and leave (the launcher stops the others and reports it)."""
        nonlocal status
        text = message.decode(errors="replace")
        status = {"exit": "deadlock", "message": text}
        try:
            finish("deadlock")
            if not os.environ.get("STEPCAST_LAUNCHER_PID"):  # under stepcast run, the launcher says it
                print(f"stepcast: deadlock: {text}", file=sys.stderr, flush=True)
            sys.stdout.flush()
        finally:
            real_exit(EXIT_DEADLOCK)

    def exit_now(code: int = 0) -> None:
        """``os._exit`` called by the script: it skips every finaliser, so the capture is saved here first."""
        nonlocal status
        if os.getpid() == main_pid:
            status = {"exit": "os._exit", "code": code}
            finish("os._exit")
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
        real_exit(code)

    deadlock_handler = DEADLOCK_HANDLER(on_deadlock)
    driver.stepcast_set_deadlock_handler(deadlock_handler)
    os._exit = exit_now
    _watch_stop_signal(stop_on_signal)
    dedup = (Dedup(driver, settings_dedup_confirm(), stop_as_duplicate)
             if os.environ.get("STEPCAST_DEDUP", "1") == "1" else None)
    _install_iteration_marks(driver, dedup, save_grown_table)
    _skip_value_checks()
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(script.parent))  # as ``python script.py`` does (with -P nothing else was put there)
    how = "ok"
    try:
        with recorder:
            runpy.run_path(str(script), run_name="__main__")
        status = {"exit": "ok"}
    except SystemExit as exc:
        status = {"exit": "sys.exit", "code": exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)}
        how = "sys.exit"
        raise
    except BaseException as exc:
        status = {"exit": "exception", "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                  "message": str(exc).splitlines()[0][:500] if str(exc) else ""}
        how = "exception"
        raise
    finally:
        finish(how)
        keep_alive.append(deadlock_handler)
    return 0


keep_alive: list[Any] = []  # the C callbacks the driver holds (ctypes frees a callback whose object is gone)


def _settings() -> Any:
    """The settings registry (stepcast/settings.py, loaded by its path: nothing of the project goes on the script's
    ``sys.path``; the launcher checked the values before the run)."""
    return _sibling("settings", _stepcast_file("settings"))


def _stepcast_file(name: str) -> Path:
    """The file of module ``stepcast.<name>``: in a checkout stepcast/ sits beside emulate/; installed, emulate/
    sits inside the stepcast package (setup.py)."""
    parent = Path(__file__).resolve().parents[1]
    return parent / f"{name}.py" if (parent / "__init__.py").is_file() else parent / "stepcast" / f"{name}.py"


def settings_dedup_confirm() -> int:
    """``STEPCAST_DEDUP_CONFIRM``: iterations after the first compared one in which a duplicate must match too."""
    return min(int(_settings().get("STEPCAST_DEDUP_CONFIRM")), MAX_DEDUP_ROUNDS - 1)


def leave(run: Callable[[], int]) -> None:
    """Run ``run`` as the interpreter would run a script (the same exit status and traceback), then leave without
    the interpreter's finalisation: atexit handlers still run and output is flushed, but torch's autograd worker
    threads can race with finalisation ('terminate called without an active exception', exit -6) when a script
    ends right after a backward pass whose kernels, being emulated, took no time."""
    import atexit
    import traceback

    try:
        code = run()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 (the script's own failure: reported as python would)
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    leave(lambda: main(sys.argv[1:]))
