"""Every setting of the simulation in one place (the model of ``torch/_inductor/config.py``): the default, the
environment variable that overrides it, and why the default is what it is.

The variables themselves are declared in :mod:`stepcast.settings` (type, default, allowed values). The attributes
that come from one (:data:`FROM_ENVIRONMENT`) are read when used, not at import, so a bad value never breaks an
import: the command-line tools refuse it in one line before any work, and a library caller gets
:class:`stepcast.settings.SettingError` where the value is used. Command-line options
(``stepcast run --launch-queue ...``) override per run.
"""
from __future__ import annotations

import os
from typing import Any

from stepcast import settings

#: Attribute -> the environment variable it is read from, with why its default is what it is.
FROM_ENVIRONMENT: dict[str, str] = {
    # Device operations (kernels, copies, memsets, collectives) a host thread may have issued and not yet seen
    # finish before its next launch blocks (also ``--launch-queue``). CUDA does not document the size of its
    # pending-launch queue; 1024 is the figure commonly measured on current drivers. What matters for the prediction
    # is that it is bounded: a host that runs ahead of its GPU is throttled to the GPU's pace.
    "LAUNCH_QUEUE_DEPTH": "STEPCAST_LAUNCH_QUEUE_DEPTH",
    # Rank processes start with address-space layout randomisation off (``0`` keeps it on). Where a process's code,
    # heap and stacks land changes its cache and TLB behaviour, so the CPU time of the same calls differs between
    # otherwise identical runs (Mytkowicz et al., "Producing wrong data without doing anything obviously wrong!",
    # ASPLOS 2009); captured host gaps are CPU time, so a fixed layout makes them a property of the script rather
    # than of where the loader happened to place it. Nothing in an emulation relies on randomisation.
    "FIXED_LAYOUT": "STEPCAST_FIXED_LAYOUT",
    # Speed of the target's host CPU (also ``--host-speed``): every host gap of a captured trace, and the
    # runtime-call costs added to it, are divided by it. 1.0 means the reference host of the counted host model
    # (HOST_MODEL): the median of KernelBench's GPU servers, ``reference_host`` in emulate/host_call_costs.json
    # (emulate.host_costs.ReferenceHost); the capturing machine itself under ``measured``; 2.0 one twice as fast.
    "HOST_SPEED": "STEPCAST_HOST_SPEED",
    # How host time is modelled: ``counted`` (the default) times each host gap from the work the capture counted
    # before the call (aten ops, autograd nodes, the call itself) at costs fitted once on a reference machine
    # (emulate.host_costs), so the answer does not depend on what else runs on the emulating machine; ``measured``
    # uses the capture's CPU-time gaps (the script's own host work exactly, at the emulating machine's speed and
    # load). See emulate.sim.host.
    "HOST_MODEL": "STEPCAST_HOST_MODEL",
    # In-step calibration (``on``, the default, or ``off``): the estimators learn kernels timed one at a time; on a
    # GPU with per-operator times measured inside whole-model runs (NeuSight's label traces,
    # estimator.importers.neusight_inmodel), predicted kernel times are scaled per family by how those in-step times
    # compare with the estimator's own predictions of the same kernels (emulate.sim.instep).
    "INSTEP_CALIBRATION": "STEPCAST_INSTEP",
    # Models (NeuSight config stems, comma-separated: ``STEPCAST_INSTEP_EXCLUDE=bert_large``) whose in-step rows the
    # calibration leaves out: the end-to-end benchmark holds out the model it evaluates.
    "INSTEP_EXCLUDE_MODELS": "STEPCAST_INSTEP_EXCLUDE",
    # Compute-communication contention (``on``, the default, or ``off``): NCCL's CTAs hold SMs for a collective's
    # whole span, so a kernel that fills the GPU beside one runs on the SMs left (emulate.sim.contention: 24 of an
    # H100's 132 SMs, +22 % while they overlap; measured on average +18.9 %, arXiv:2507.03114). ``off`` lets
    # overlapped collectives cost compute nothing, as the engine did before.
    "COMM_CONTENTION": "STEPCAST_COMM_CONTENTION",
    # Seconds the ranks still running may together use under STALL_CPU_FRACTION of one core before the launcher stops
    # them as hung (emulate.launcher.wait). A rank that blocks for good (a lock never released after its peers
    # ended: seen once in a 405B capture, which would otherwise have held the machine for the benchmark's 6 h limit)
    # uses no CPU, where one that compiles, captures or waits on a working peer keeps a core busy somewhere in the
    # run; waits between ranks inside the driver have their own limit (STEPCAST_WAIT_LIMIT_S). 600 s is longer than
    # any quiet spell of the benchmarks' runs (a torchrun worker's store timeouts are 300 s).
    "STALL_LIMIT_S": "STEPCAST_STALL_LIMIT_S",
}

#: CPU time, as a fraction of the time passed, under which the ranks count as making no progress (STALL_LIMIT_S):
#: above what a blocked process's timers use (torch's heartbeat and watchdog threads wake about once a second),
#: below what any working rank uses
STALL_CPU_FRACTION: float = 0.01

LAUNCH_QUEUE_DEPTH: int
FIXED_LAYOUT: bool
HOST_SPEED: float
HOST_MODEL: str
INSTEP_CALIBRATION: bool
INSTEP_EXCLUDE_MODELS: tuple[str, ...]
COMM_CONTENTION: bool
STALL_LIMIT_S: float


def __getattr__(name: str) -> Any:
    """``config.HOST_SPEED`` and the other :data:`FROM_ENVIRONMENT` attributes: the variable's value now."""
    if name in FROM_ENVIRONMENT:
        return settings.get(FROM_ENVIRONMENT[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Submission latency of a kernel on an idle GPU (launch call -> kernel start) when the trace does not say
#: (``meta.launch_latency_us``, which the Kineto importer measures on real traces).
DEFAULT_LAUNCH_LATENCY_US: float = 3.0

#: Fewer iterations than this leave no steady state to measure (the first is warm-up, and a median of one steady
#: iteration says nothing about its spread): the report warns.
MIN_ITERATIONS_FOR_STEADY_STATE: int = 3

#: Where the runtime-call costs (what the real CUDA runtime and driver spend on the host per call, and the emulated
#: driver does not) come from: :mod:`emulate.host_costs` calibrates them from the runtime calls of real profiler traces.
HOST_CALL_COSTS_FILE: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_call_costs.json")
