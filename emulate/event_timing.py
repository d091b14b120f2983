"""Event timing inside the emulated process: ``cudaEventElapsedTime`` / ``cuEventElapsedTime`` answer the predicted
device time of the work between the two events, so that autotuners (Inductor max-autotune, Triton's
``@triton.autotune``, Inductor's coordinate descent) compare their candidates as the estimator predicts them on the
target GPU instead of seeing ties.

The capture layer (emulate/capture.py, which loads this file by its path) calls :func:`install` once; it registers
:func:`EventTiming.answer` with the capture library (``stepcast_set_elapsed_predictor``: the driver's stream.c).
At a query the driver passes the two events' handles as its log writes them (in ``event_record`` records); this
module reads the log's new lines (it is unbuffered), finds each event's latest record, and takes the device work
logged between them on the start event's stream (one stream, back to back: how autotuners time). That work is
turned into trace events by the parser the collator uses (:func:`emulate.driver.tracelog.driver_events`) and timed by
the simulator's own :func:`emulate.sim.durations.assign_durations` on the GPU the run emulates (``STEPCAST_GPU_NAME``)
with the shipped estimator, loaded once at the first query; each distinct piece of work is predicted once. The answer is
the sum.

Candidates are told apart only where the estimator tells their work apart. A Triton kernel is timed from the
bytes its launch moves (emulate/triton_bytes.py), which its configurations share, and a kernel with no model at all
(Inductor's benchmark copies named ``triton_`` without bytes) takes the simulator's launch floor: such configs tie
and the autotuner keeps its first, as under the nominal clock. Either way the answer is the same at every repeat,
which is why Triton's benchmark loop runs once a configuration (emulate/quick_bench.py). Inductor's GEMM templates
(``triton_mm``) are timed as the GEMM they compute while Inductor benchmarks them (:func:`gemm_row`), as the cuBLAS
choice is: they tie with it instead of looking free, so max-autotune keeps its first choice (cuBLAS).

Recording stays O(1) (the libraries note nothing more than before); reading the log happens at queries only, from
where the previous query stopped; the last :data:`KEEP_WORK` pieces of device work are kept. When the predictor
cannot answer (an event it has no record of, work older than that, an error: one warning), the library's nominal
clock stands: one microsecond per piece of device work. ``STEPCAST_EVENT_TIMING=nominal`` registers nothing.

Its own work runs between ``stepcast_pause`` and ``stepcast_resume`` (the capture layer's time, not the
script's). At exit it writes ``$STEPCAST_LOG.events.json``: how many queries were answered with a prediction,
which code asked (the autotuner, found on the Python stack) and the choices those autotuners made on predicted
times (read by :func:`emulate.report.predicted_event_timings`).
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable

PREDICTOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_float,
                             ctypes.POINTER(ctypes.c_float))
KEEP_WORK = 1 << 17                # device-work records kept for queries (older ones: the nominal clock answers)
DRIVER_WORK = tuple(b'{"event":"%s"' % k for k in (b"launch", b"memcpy", b"memset", b"collective"))
DRIVER_RECORD = b'{"event":"event_record"'
DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset", "collective"})
#: where on the Python stack a query comes from -> the autotuner it names (most specific first)
TUNERS = (("torch/_inductor/select_algorithm.py", "inductor.select_algorithm"),
          ("torch/_inductor/autotune_process.py", "inductor.select_algorithm"),
          ("torch/_inductor/runtime/coordinate_descent_tuner.py", "inductor.coordinate_descent"),
          ("torch/_inductor/runtime/triton_heuristics.py", "inductor.triton_configs"),
          ("triton/runtime/autotuner.py", "triton.autotune"),
          ("torch/_inductor/runtime/benchmarking.py", "inductor.benchmarker"),
          ("triton/testing.py", "triton.testing.do_bench"),
          ("torch/utils/benchmark/", "torch.utils.benchmark"))
_EVENT_FILES = ("torch/cuda/streams.py", "torch/cuda/__init__.py")
KEPT_ANSWERS = 200                 # answers listed one by one in the summary (all are counted)
_VOLATILE = frozenset({"t_ns", "gap_ns", "thread", "seq", "host_ops", "host_nodes", "host_py", "graph_launch",
                       "graph_node"})


class WorkLog:
    """The capture log read incrementally: each event's latest record (its position among the device-work records
    and its stream) and the last :data:`KEEP_WORK` device-work records, raw."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.work: list[bytes] = []
        self.base = 0                        # the position of work[0] among all device-work records
        self.latest: dict[int, tuple[int, int]] = {}   # event id -> (device-work records before it, its stream)
        self.comms: dict[str, tuple[int, int]] = {}

    def read(self) -> None:
        """Take in the lines written since the previous read."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            self._line(line)
        if len(self.work) > KEEP_WORK:
            drop = len(self.work) - KEEP_WORK // 2
            del self.work[:drop]
            self.base += drop
            self.latest = {e: at for e, at in self.latest.items() if at[0] >= self.base}

    def _line(self, line: bytes) -> None:
        if line.startswith(DRIVER_WORK):
            self.work.append(line)
        elif line.startswith(DRIVER_RECORD):
            rec = json.loads(line)
            self.latest[int(rec["handle"])] = (self.base + len(self.work), int(rec["stream"]))
        elif line.startswith(b'{"event":"comm"'):
            rec = json.loads(line)
            self.comms[rec["comm"]] = (int(rec["nranks"]), int(rec["rank"]))

    def between(self, start: int, end: int) -> tuple[list[Any], int] | None:
        """The device-work records between the latest records of events ``start`` and ``end`` on the start event's
        stream (parsed as the collator's log reader does) and the sign of the interval (-1: ``end`` was recorded
        first); None when either event has no record or the work has left memory."""
        if start not in self.latest or end not in self.latest:
            return None
        (a, stream), (b, _) = self.latest[start], self.latest[end]
        sign = 1 if b >= a else -1
        a, b = min(a, b), max(a, b)
        if a < self.base:
            return None
        raw = self.work[a - self.base:b - self.base]
        records = [r for r in map(json.loads, raw) if int(r["stream"]) == stream]
        return records, sign


class EventTiming:
    """The predictor the capture library calls (:meth:`answer`) and what it answered."""

    def __init__(self, driver: Any, log: WorkLog, summary_path: Path | None,
                 op_table: Callable[[], list[dict[str, Any]]] = list) -> None:
        self.driver, self.log, self.summary_path = driver, log, summary_path
        self.op_table = op_table             # the capture's op recorder's table so far (its dump)
        self.pid = os.getpid()               # a forked child reads another log: its queries stay nominal
        self.lock = threading.Lock()
        self.queries = self.predicted = 0
        self.callers: Counter = Counter()
        self.answers: list[dict[str, Any]] = []
        self.failure: str | None = None
        self.cache: dict[str, float] = {}    # a piece of work (its trace event, timing fields left out) -> us
        self.ops: list[dict[str, Any]] = []
        self.model: Any = None
        self.hardware: Any = None
        self.label: str | None = None
        self.tuners: dict[int, tuple[str, Any]] = {}    # id -> (kind, Triton / Inductor autotuner object)
        self.selections: list[dict[str, Any]] = []      # Inductor select_algorithm choices (patched log_results)
        self.since_selection = 0                        # predicted answers since the last selection
        self.selection_patched = False
        self.callback = PREDICTOR(self.answer)          # kept: the library holds only the C pointer

    # -- the C callback ----------------------------------------------------------------------------------------
    def answer(self, start: int, end: int, nominal_ms: float, out: Any) -> int:
        """0 with ``out[0]`` = the predicted ms, or 1 (the library's nominal answer stands). Never raises."""
        if os.getpid() != self.pid:
            return 1
        self.driver.stepcast_pause()
        try:
            with self.lock:
                caller, context = self._caller()
                try:
                    ms = self._predict(start, end, context)
                except Exception as exc:  # noqa: BLE001 (counted as a nominal answer)
                    self._fail(exc)
                    ms = None
                self.queries += 1
                self.callers[caller] += 1
                if ms is not None:
                    self.predicted += 1
                    self.since_selection += 1
                    out[0] = ms
                if len(self.answers) < KEPT_ANSWERS:
                    self.answers.append({"caller": caller, "predicted_ms": ms, "nominal_ms": round(nominal_ms, 6)})
                return 0 if ms is not None else 1
        except BaseException as exc:  # noqa: BLE001 (the script must never see the predictor fail)
            self._fail(exc)
            return 1
        finally:
            self.driver.stepcast_resume()

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            print(f"stepcast: event timing: {self.failure}; elapsed times fall back to the nominal 1 us per device "
                  "op", file=sys.stderr, flush=True)

    def _predict(self, start: int, end: int, context: dict[str, Any] | None = None) -> float | None:
        if self.failure is not None:
            return None
        self.log.read()
        found = self.log.between(start, end)
        if found is None:
            return None
        records, sign = found
        if not records:
            return 0.0
        events = self._events(records)
        if context is not None:  # a GEMM template being benchmarked: timed as the GEMM it computes
            first = next((ev for ev in events if ev["kind"] == "kernel" and not ev.get("spec")
                          and not ev.get("op_part")), None)
            if first is not None:
                first["spec"] = dict(context)
        return sign * sum(self.durations_us(events)) / 1e3

    def _events(self, records: list[Any]) -> list[dict[str, Any]]:
        """Trace events of the window's records, as the collator makes them (op context included)."""
        from stepcast.emulate.driver.tracelog import DriverLog, driver_events

        if max(int(r["op"]) for r in records) >= len(self.ops):
            self.ops = self.op_table()
        log = DriverLog(self.log.path, records=records, ops=self.ops, comms=self.log.comms)
        events = driver_events(log, comm_sizes={}, ranks_per_node=_ranks_per_node())
        return [ev for ev in events if ev["kind"] in DEVICE_KINDS]

    def durations_us(self, events: list[dict[str, Any]]) -> list[float]:
        """Each event's predicted device time (us) on the target, by the simulator's durations; each distinct
        piece of work is predicted once."""
        keys = [json.dumps({k: v for k, v in ev.items() if k not in _VOLATILE}, sort_keys=True, default=str)
                for ev in events]
        todo = {k: ev for k, ev in zip(keys, events) if k not in self.cache}
        if todo:
            for key, us in zip(todo, self._assign(list(todo.values()))):
                self.cache[key] = us
        return [self.cache[k] for k in keys]

    def _assign(self, events: list[dict[str, Any]]) -> list[float]:
        from stepcast.emulate.sim.durations import assign_durations
        from stepcast.emulate.sim.program import build_program

        if self.model is None:
            from stepcast import estimator
            from stepcast.profiling.hardware import lookup

            self.hardware = lookup(os.environ.get("STEPCAST_GPU_NAME", "h100-sxm"))
            self.model = estimator.load(None)
        rows = [{"kind": "iteration", "step": 0, "source": None, "t_ns": 0, "gap_ns": 0, "thread": 0, "seq": 0}]
        rows += [{**ev, "t_ns": i, "gap_ns": 0, "thread": 0, "seq": i} for i, ev in enumerate(events, 1)]
        program = build_program({"events": rows, "rank": 0, "world_size": 1, "hardware": self.hardware.id},
                                 "<event timing>")
        times = assign_durations([program], self.hardware, "predicted", self.model, _ranks_per_node())
        self.label = times.estimator_label or self.label
        return [float(us) for us in times.us[0][1:]]

    # -- who asked, and what they chose ------------------------------------------------------------------------
    def _caller(self) -> tuple[str, dict[str, Any] | None]:
        """The autotuner on the Python stack (:data:`TUNERS`), else the first frame outside torch's event code;
        and, when Inductor is benchmarking a choice of a GEMM (its ``benchmark_choice``), that GEMM's estimator
        row (:func:`gemm_row`)."""
        frame = sys._getframe(1)
        first, found, context = None, {}, None
        while frame is not None:
            path = frame.f_code.co_filename.replace(os.sep, "/")
            if first is None and not path.endswith(_EVENT_FILES) and path != __file__:
                first = f"{path.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
            for part, tuner in TUNERS:
                if part in path and tuner not in found:
                    found[tuner] = frame
            if frame.f_code.co_name == "benchmark_choice" and path.endswith(TUNERS[0][0]):
                context = gemm_row(frame.f_locals.get("inputs"), frame.f_locals.get("output"))
            frame = frame.f_back
        for _, tuner in TUNERS:
            if tuner in found:
                self._note_tuner(tuner, found[tuner])
                return tuner, context
        return first or "<no Python frame>", context  # e.g. cuDNN timing plans on autograd's thread

    def _note_tuner(self, tuner: str, frame: Any) -> None:
        obj = frame.f_locals.get("self")
        if tuner in ("triton.autotune", "inductor.triton_configs") and obj is not None:
            self.tuners.setdefault(id(obj), (tuner, obj))
        elif tuner == "inductor.select_algorithm" and not self.selection_patched:
            self.selection_patched = True
            self._patch_selection(sys.modules.get("torch._inductor.select_algorithm"))

    def _patch_selection(self, module: Any) -> None:
        """Note each Inductor algorithm selection (``AlgorithmSelectorCache.log_results``, called once per
        autotuned op with its timings) made after predicted answers."""
        cls = getattr(module, "AlgorithmSelectorCache", None)
        original = getattr(cls, "log_results", None)
        if original is None:
            return

        def log_results(name, input_nodes, timings, *args, **kwargs):
            try:
                if timings and self.since_selection:
                    best = min(timings, key=timings.__getitem__)
                    self.selections.append({"tuner": "inductor.select_algorithm", "op": str(name),
                                            "chosen": getattr(best, "name", str(best)),
                                            "predicted_ms": float(timings[best]), "candidates": len(timings)})
                self.since_selection = 0
            except Exception:  # noqa: BLE001 (bookkeeping only)
                pass
            return original(name, input_nodes, timings, *args, **kwargs)

        cls.log_results = staticmethod(log_results)

    def choices(self) -> list[dict[str, Any]]:
        """The choices made on predicted times: Inductor's selections, then each Triton / Inductor autotuner that
        timed its configs through this predictor, with the config it kept."""
        out = list(self.selections)
        for tuner, obj in self.tuners.values():
            try:
                if tuner == "triton.autotune":
                    name = getattr(getattr(obj, "base_fn", None), "__name__", None) or repr(obj)
                    for key, config in getattr(obj, "cache", {}).items():
                        out.append({"tuner": tuner, "kernel": name, "key": str(key), "chosen": str(config)})
                else:
                    launchers = getattr(obj, "launchers", None) or []
                    name = getattr(getattr(obj, "fn", None), "__name__", None) or repr(obj)
                    if len(launchers) == 1:
                        out.append({"tuner": tuner, "kernel": name, "chosen": str(launchers[0].config)})
            except Exception:  # noqa: BLE001 (bookkeeping only)
                continue
        return out

    def summary(self) -> dict[str, Any]:
        return {"queries": self.queries, "predicted": self.predicted, "nominal": self.queries - self.predicted,
                "hardware": getattr(self.hardware, "id", None), "estimator": self.label, "failure": self.failure,
                "callers": dict(self.callers.most_common()), "choices": self.choices(), "answers": self.answers}

    def write_summary(self) -> None:
        if self.summary_path is None or not self.queries or os.getpid() != self.pid:
            return
        try:
            tmp = self.summary_path.with_name(self.summary_path.name + ".tmp")
            tmp.write_text(json.dumps(self.summary(), indent=1, default=str))
            os.replace(tmp, self.summary_path)
        except OSError:
            pass


def gemm_row(inputs: Any, output: Any) -> dict[str, Any] | None:
    """The estimator row of the GEMM whose benchmark tensors these are (an output [..., M, N] and, among the
    inputs, an A [..., M, K] and a B [..., K, N]), as ``aten.mm`` of those shapes gets from the classifier; None when
    they are not a GEMM's. Inductor's GEMM templates have no model of their own: timed as
    the GEMM, they tie with the cuBLAS choice instead of looking free (an unclassified kernel's launch floor)."""
    import math

    shape = tuple(getattr(output, "shape", ()) or ())
    if len(shape) < 2 or not isinstance(inputs, (list, tuple)):
        return None
    m, n = shape[-2], shape[-1]
    tensors = [t for t in inputs if len(getattr(t, "shape", ())) == len(shape)]
    for a in tensors:
        k = a.shape[-1]
        if a.shape[-2] == m and any(b.shape[-2] == k and b.shape[-1] == n for b in tensors if b is not a):
            from stepcast.profiling.classify import tensor_dtype

            dtype = tensor_dtype(str(a.dtype).replace("torch.", ""))
            if dtype == "fp32" and _tf32():
                dtype = "tf32"
            return {"family": "gemm", "dtype": dtype, "m": int(m), "n": int(n), "k": int(k),
                    "batch": int(math.prod(shape[:-2]))}
    return None


def _tf32() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.backends.cuda.matmul.allow_tf32)


def _ranks_per_node() -> int:
    """Ranks on this rank's NVLink domain (``emulate.sim.durations.ranks_per_node_for``), from what the launcher set
    (torchrun's sizes and the target the driver emulates)."""
    from stepcast.emulate.sim.durations import ranks_per_node_for
    from stepcast.profiling.hardware import UnknownHardwareError, lookup

    world = max(1, int(os.environ.get("WORLD_SIZE") or 1))
    nodes = max(1, int(os.environ.get("GROUP_WORLD_SIZE") or 1))
    try:
        hardware = lookup(os.environ.get("STEPCAST_GPU_NAME", "h100-sxm"))
    except UnknownHardwareError:
        hardware = None
    return ranks_per_node_for(world, nodes, hardware)


def log_path() -> Path | None:
    """This process's capture log (the driver's is per process: ``$STEPCAST_DRIVER_LOG.<pid>.jsonl``)."""
    prefix = os.environ.get("STEPCAST_DRIVER_LOG")
    return Path(f"{prefix}.{os.getpid()}.jsonl") if prefix else None


_installed: EventTiming | None = None


def install(driver: Any, op_table: Callable[[], list[dict[str, Any]]]) -> EventTiming | None:
    """Register the predictor with the emulated driver (``driver``: its ctypes handle), reading op contexts from
    ``op_table`` (the capture's op recorder's ``dump``); nothing when it has no
    ``stepcast_set_elapsed_predictor`` (an older build), when there is no log, or with
    ``STEPCAST_EVENT_TIMING=nominal``."""
    global _installed
    where = log_path()
    from stepcast import settings

    if settings.get("STEPCAST_EVENT_TIMING") == "nominal" or where is None:
        return None
    try:
        register = driver.stepcast_set_elapsed_predictor
    except AttributeError:
        return None
    register.argtypes = [PREDICTOR]
    register.restype = None
    summary = os.environ.get("STEPCAST_LOG")
    timing = EventTiming(driver, WorkLog(where), Path(summary + ".events.json") if summary else None, op_table)
    register(timing.callback)
    atexit.register(timing.write_summary)
    _installed = timing
    return timing
