"""Every setting of the simulation in one place (the model of ``torch/_inductor/config.py``): the default, the
environment variable that overrides it, and why the default is what it is.

Read once at import; command-line options (``python -m emulate run --launch-queue ...``) override per run.
"""
from __future__ import annotations

import os


def _env(name: str, default: float, cast: type) -> float:
    """A positive number from the environment variable ``name``, else ``default``; a bad value is one line."""
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        parsed = cast(value)
    except ValueError:
        parsed = None
    if parsed is None or not parsed > 0:
        raise ValueError(f"environment variable {name}: expected a positive {cast.__name__}, found {value!r}")
    return parsed


#: Device operations (kernels, copies, memsets, collectives) a host thread may have issued and not yet seen finish
#: before its next launch blocks (``STEPCAST_LAUNCH_QUEUE_DEPTH``). CUDA does not document the size of its
#: pending-launch queue; 1024 is the figure commonly measured on current drivers. What matters for the prediction
#: is that it is bounded: a host that runs ahead of its GPU is throttled to the GPU's pace.
LAUNCH_QUEUE_DEPTH: int = int(_env("STEPCAST_LAUNCH_QUEUE_DEPTH", 1024, int))

#: Rank processes start with address-space layout randomisation off (``STEPCAST_FIXED_LAYOUT``; ``0`` keeps it on).
#: Where a process's code, heap and stacks land changes its cache and TLB behaviour, so the CPU time of the same calls
#: differs between otherwise identical runs (Mytkowicz et al., "Producing wrong data without doing anything
#: obviously wrong!", ASPLOS 2009); captured host gaps are CPU time, so a fixed layout makes them a property of the
#: script rather than of where the loader happened to place it. Nothing in an emulation relies on randomisation.
FIXED_LAYOUT: bool = os.environ.get("STEPCAST_FIXED_LAYOUT", "1") != "0"

#: Submission latency of a kernel on an idle GPU (launch call -> kernel start) when the trace does not say
#: (``meta.launch_latency_us``, which the Kineto importer measures on real traces).
DEFAULT_LAUNCH_LATENCY_US: float = 3.0

#: Speed of the target's host CPU (``STEPCAST_HOST_SPEED``, ``--host-speed``): every host gap of a captured trace,
#: and the runtime-call costs added to it, are divided by it. 1.0 means a host like the reference machine of the
#: counted host model (:data:`HOST_MODEL`; the capturing machine itself under ``measured``); 2.0 one twice as fast.
HOST_SPEED: float = float(_env("STEPCAST_HOST_SPEED", 1.0, float))

#: How host time is modelled (``STEPCAST_HOST_MODEL``): ``counted`` (the default) times each host gap from the work
#: the capture counted before the call (aten ops, autograd nodes, the call itself) at costs fitted once on a
#: reference machine (:mod:`emulate.host_costs`), so the answer does not depend on what else runs on the emulating
#: machine; ``measured`` uses the capture's CPU-time gaps (the script's own host work exactly, at the emulating
#: machine's speed and load). See :mod:`emulate.sim.host`.
HOST_MODEL: str = os.environ.get("STEPCAST_HOST_MODEL", "counted").strip().lower() or "counted"
if HOST_MODEL not in ("counted", "measured"):
    raise ValueError(f"environment variable STEPCAST_HOST_MODEL: expected counted or measured, found {HOST_MODEL!r}")

#: Fewer iterations than this leave no steady state to measure (the first is warm-up, and a median of one steady
#: iteration says nothing about its spread): the report warns.
MIN_ITERATIONS_FOR_STEADY_STATE: int = 3

#: Where the runtime-call costs (what the real CUDA runtime and driver spend on the host per call, and the emulated
#: driver does not) come from: :mod:`emulate.host_costs` calibrates them from the runtime calls of real profiler traces.
HOST_CALL_COSTS_FILE: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_call_costs.json")

#: In-step calibration (``STEPCAST_INSTEP``: ``on``, the default, or ``off``): the estimators learn kernels timed one
#: at a time; on a GPU with per-operator times measured inside whole-model runs (NeuSight's label traces,
#: ``estimator.importers.neusight_inmodel``), predicted kernel times are scaled per family by how those in-step times
#: compare with the estimator's own predictions of the same kernels (:mod:`emulate.e2e.instep`).
INSTEP_CALIBRATION: bool = os.environ.get("STEPCAST_INSTEP", "on").strip().lower() not in ("off", "0", "false", "no")

#: Models (NeuSight config stems, comma-separated: ``STEPCAST_INSTEP_EXCLUDE=bert_large``) whose in-step rows the
#: calibration leaves out: the end-to-end benchmark holds out the model it evaluates.
INSTEP_EXCLUDE_MODELS: tuple[str, ...] = tuple(
    m.strip() for m in os.environ.get("STEPCAST_INSTEP_EXCLUDE", "").split(",") if m.strip())
