"""What the real CUDA runtime and driver cost the host per call, calibrated from real profiler traces.

The shim answers every intercepted call at once, so a captured host gap holds the framework's own work (Python,
the dispatcher, the caching allocator) but not the time the real ``cudaLaunchKernel``, ``cudaMemcpyAsync`` or
``cudaEventRecord`` would have spent on the host. The simulator adds it back per event kind (then divides by
``--host-speed`` with the rest of the host time); without it a launch-bound script is predicted too fast.

Calibration: every ``cuda_runtime`` / ``cuda_driver`` call of the Kineto traces under ``../shared/data`` (HTA,
kineto, PARAM: A100, V100 and RTX 2080 Ti hosts); per trace, the median duration of each call name with at least
``MIN_CALLS`` calls; per event kind, the median over traces. Calls that wait for the device (synchronisations,
blocking copies) get no cost: the simulator models their wait. These durations include the profiler's own per-call
overhead (CUPTI callbacks), so they are upper estimates of an unprofiled run's costs.

    python -m emulate.host_costs            # per-trace table and the pooled costs, from ../shared/data
    python -m emulate.host_costs --write    # also rewrite emulate/host_call_costs.json (what the simulator reads)
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from emulate import config
from profiling.atomic import atomic_text
from profiling.paths import shared_data_root

#: Trace event kind -> the runtime/driver calls that issue it.
CALLS_OF_KIND: dict[str, tuple[str, ...]] = {
    "kernel": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"),
    "memcpy": ("cudaMemcpyAsync",),
    "memset": ("cudaMemsetAsync",),
    "event_record": ("cudaEventRecord", "cudaEventRecordWithFlags"),
    "stream_wait_event": ("cudaStreamWaitEvent",),
}
#: NCCL enqueues its kernel with the same launch call.
KIND_ALIASES: dict[str, str] = {"collective": "kernel"}
MIN_CALLS = 100
TRACE_GLOBS = ("hta/tests/data/**/*.json*", "kineto/tb_plugin/samples/**/*.json*", "param/**/*kineto*.json*")


def trace_files(root: Path | None = None) -> list[Path]:
    root = Path(root or shared_data_root())
    return sorted({p for pattern in TRACE_GLOBS for p in root.glob(pattern) if p.is_file()})


def per_trace_medians(path: Path) -> dict[str, tuple[float, int]]:
    """{event kind: (median call duration in us, number of calls)} of one trace, kinds with >= MIN_CALLS only."""
    from profiling import kineto

    events = kineto.read_trace(path).events
    calls = events[events["cat"].isin(kineto.LAUNCH_CATEGORIES)]
    out: dict[str, tuple[float, int]] = {}
    for kind, names in CALLS_OF_KIND.items():
        durations = calls.loc[calls["name"].isin(names), "dur"].astype(float)
        if len(durations) >= MIN_CALLS:
            out[kind] = (float(durations.median()), int(len(durations)))
    return out


def calibrate(files: list[Path], root: Path | None = None) -> dict[str, Any]:
    """The pooled costs (median over traces of each trace's median) and the per-trace figures behind them."""
    from profiling.kineto import TraceFormatError

    root = Path(root or shared_data_root())
    per_trace: dict[str, dict[str, tuple[float, int]]] = {}
    for path in files:
        try:
            medians = per_trace_medians(path)
        except TraceFormatError:
            continue
        if medians:
            per_trace[str(path.relative_to(root)) if path.is_relative_to(root) else str(path)] = medians
    costs = {kind: round(statistics.median(m[kind][0] for m in per_trace.values() if kind in m), 3)
             for kind in CALLS_OF_KIND if any(kind in m for m in per_trace.values())}
    return {"costs_us": costs, "min_calls": MIN_CALLS, "traces": {
        name: {kind: {"median_us": v[0], "calls": v[1]} for kind, v in m.items()} for name, m in per_trace.items()}}


@functools.lru_cache(maxsize=4)
def load_costs(path: str = config.HOST_CALL_COSTS_FILE) -> dict[str, float]:
    """{trace event kind: host cost in us} the simulator adds to captured gaps (kinds not listed cost 0)."""
    try:
        doc = json.loads(Path(path).read_text())
        costs = {str(k): float(v) for k, v in doc["costs_us"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: field 'costs_us': expected {{kind: microseconds}} ({exc})") from None
    for alias, kind in KIND_ALIASES.items():
        if kind in costs:
            costs.setdefault(alias, costs[kind])
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate.host_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="shared data folder (default: ../shared/data)")
    parser.add_argument("--write", action="store_true", help=f"rewrite {config.HOST_CALL_COSTS_FILE}")
    args = parser.parse_args(argv)
    root = Path(args.data or shared_data_root())
    files = trace_files(root)
    if not files:
        print(f"stepcast: {root}: no Kineto traces found (expected {', '.join(TRACE_GLOBS)})", file=sys.stderr)
        return 2
    result = calibrate(files, root)

    from rich.console import Console
    from rich.table import Table

    kinds = list(CALLS_OF_KIND)
    table = Table(title="Host cost of CUDA runtime calls in real profiler traces (median us; calls)")
    table.add_column("trace")
    for kind in kinds:
        table.add_column(kind, justify="right")
    for name, m in result["traces"].items():
        table.add_row(name[-60:], *(f"{m[k]['median_us']:.1f} ({m[k]['calls']})" if k in m else "-" for k in kinds))
    table.add_row("[bold]pooled (median of traces)", *(f"[bold]{result['costs_us'].get(k, 0):.2f}" for k in kinds))
    Console().print(table)
    if args.write:
        with atomic_text(Path(config.HOST_CALL_COSTS_FILE)) as f:
            json.dump(result, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {config.HOST_CALL_COSTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
