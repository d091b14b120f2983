"""``python -m emulate run [--hardware h100-sxm] [--nproc N] [--nodes M] [--report report.json]
[--trace timeline.json] [--trace-dir DIR] -- script.py [args]``: run a training script unchanged on virtual GPUs,
write one trace per rank, then simulate it and write the report."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from profiling.atomic import write_json_atomic
from profiling.hardware import UnknownHardwareError, lookup


def add_run_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a PyTorch script on virtual GPUs and capture what it asks of them",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hardware", default="h100-sxm", help="target GPU: a conf/hardware id or vendor name")
    p.add_argument("--nproc", type=int, default=1, help="ranks per node, started like torchrun (default 1)")
    p.add_argument("--nodes", type=int, default=1, help="nodes (all ranks run on this machine; default 1)")
    p.add_argument("--report", type=Path, help="write the report (JSON) here")
    p.add_argument("--trace", type=Path, help="write the simulated timeline (Chrome trace JSON) here")
    p.add_argument("--trace-dir", type=Path, default=Path("stepcast-capture"),
                   help="folder for the per-rank captured traces (default ./stepcast-capture)")
    p.add_argument("--host-speed", type=float, default=1.0, help="target host CPU speed relative to this one")
    p.add_argument("--gzip", action="store_true", help="write the traces gzip-compressed (.trace.json.gz)")
    p.add_argument("--capture-only", action="store_true", help="write the traces and the capture report; skip "
                   "the simulation")
    p.add_argument("--no-dedup", action="store_true", help="run every rank to the end, even ranks identical to a "
                   "lower one")
    p.add_argument("--python-op-context", action="store_true", help="record op context with a Python "
                   "TorchDispatchMode instead of the compiled RecordFunction hook")
    p.add_argument("script", type=Path, help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments (after --)")
    p.set_defaults(func=run_command)


def run_command(ns: argparse.Namespace) -> int:
    from emulate.launcher import EmulationUnavailable, check_torch_build, launch, remove_shared_memory, wait
    from emulate.shim_build import ShimBuildError, opctx_path, shim_path

    try:
        spec = lookup(ns.hardware)
    except UnknownHardwareError as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    if not ns.script.is_file():
        print(f"stepcast: script {ns.script} not found", file=sys.stderr)
        return 2
    if ns.nproc < 1 or ns.nodes < 1:
        print("stepcast: --nproc and --nodes must be at least 1", file=sys.stderr)
        return 2
    script_args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    try:
        check_torch_build()
        shim = shim_path()
    except (EmulationUnavailable, ShimBuildError) as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    try:
        opctx: Path | None = None if ns.python_op_context else opctx_path()
    except ShimBuildError as exc:
        print(f"stepcast: {exc}; recording op context with the slower Python dispatch mode", file=sys.stderr)
        opctx = None
    world = ns.nproc * ns.nodes
    trace_dir = ns.trace_dir.resolve()
    for stale in trace_dir.glob("rank*.log*"):
        stale.unlink()
    started = time.perf_counter()
    ranks = launch(ns.script.resolve(), script_args, shim=shim, spec=spec, nproc=ns.nproc, nodes=ns.nodes,
                   trace_dir=trace_dir, distributed=world > 1, opctx=opctx, dedup=not ns.no_dedup)
    try:
        codes = wait(ranks)
    finally:
        remove_shared_memory(trace_dir)
    capture_s = time.perf_counter() - started

    from emulate.collate import collate

    logs = [r.log for r in ranks]
    missing = [str(p) for p in logs if not p.is_file()]
    if missing:
        print(f"stepcast: no capture log from {', '.join(missing)} (the rank died before the shim loaded)",
              file=sys.stderr)
        return max(codes.values()) or 1
    capture = collate(logs, hardware=spec.id, world_size=world, ranks_per_node=ns.nproc, trace_dir=trace_dir,
                      gzip=ns.gzip)
    capture["capture_seconds"] = round(capture_s, 3)
    capture["exit_codes"] = [codes[r.rank] for r in ranks]
    failed = {rank: code for rank, code in codes.items() if code != 0}
    if failed:
        print(f"stepcast: the script failed on rank(s) {sorted(failed)}: traces up to the failure are in "
              f"{trace_dir}", file=sys.stderr)
        if ns.report:
            write_json_atomic(ns.report, capture, indent=1)
        return next(iter(failed.values()))
    if not ns.capture_only:
        from emulate.simulate import simulate_traces

        simulate_traces([Path(t) for t in capture["traces"]], spec.id, ns.nodes, ns.report, ns.trace,
                        host_speed=ns.host_speed, extra=capture)
    else:
        print(f"stepcast: captured {world} rank(s) on a virtual {spec.name}: peak memory "
              f"{capture['peak_memory_bytes'] / 2**30:.2f} GiB; traces in {trace_dir}")
        if ns.report:
            write_json_atomic(ns.report, capture, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulate",
                                     description="Run unmodified PyTorch training scripts on virtual GPUs.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    from emulate import replay, validate

    replay.register(sub)
    validate.register(sub)
    ns = parser.parse_args(argv)
    return ns.func(ns)
