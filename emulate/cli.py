"""``stepcast run [--hardware h100-sxm] [--nproc N] [--nodes M] [--report report.json]
[--trace timeline.json] [--trace-dir DIR] -- script.py [args]``: run a training script unchanged on virtual GPUs,
write one trace per rank, then simulate it and write the report."""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.hardware import HardwareSpec
from stepcast import settings
from stepcast.errors import StepcastError, cli_main
from stepcast.preflight import Preflight, refuse_bad_environment


RUN_DESCRIPTION = """\
Run a training script unchanged on virtual GPUs, capture what it asks of them, then simulate it with the
kernel estimators and print the predicted iteration time and peak memory."""
RUN_EPILOG = """\
Nothing is written to the working folder unless asked (--report, --trace): captured traces go to --trace-dir,
else <cache>/runs/<time>-<pid>/ (<cache>: STEPCAST_CACHE_DIR, else ~/.cache/stepcast). Settings are checked
first (docs/configuration.md). Exit: 0 done, 2 bad input, 3 the script failed, 128+N signal N. Examples:
  stepcast run --hardware h100-sxm --report r.json -- examples/gpt.py --layers 4 --d-model 1024 --steps 6
  stepcast run --nproc 8 --nodes 16 --run-ranks 0,16,32,48,64,80,96,112 -- examples/megatron_scale.py --tp 8 \\
      --pp 8 --layers 8 --global-batch 16"""


def HELP_FORMATTER(prog: str) -> argparse.HelpFormatter:
    """Keeps the description's line breaks and puts option help beside the option, so --help fits a screen."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=26)


def add_run_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a PyTorch script on virtual GPUs and predict its step time and memory",
                              description=RUN_DESCRIPTION, epilog=RUN_EPILOG,
                              formatter_class=HELP_FORMATTER)
    p.add_argument("--hardware", default="h100-sxm", metavar="ID",
                   help="conf/hardware id or GPU name (default %(default)s)")
    p.add_argument("--nproc", default="1", metavar="N", help="ranks per node, like torchrun (default 1)")
    p.add_argument("--nodes", default="1", metavar="M", help="nodes, all run on this machine (default 1)")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the report (JSON) here")
    p.add_argument("--trace", type=Path, metavar="FILE", help="write the predicted timeline (Perfetto JSON) here")
    p.add_argument("--trace-ranks", metavar="LIST", default=None,
                   help="ranks on the --trace timeline (default: those that ran)")
    p.add_argument("--trace-dir", type=Path, default=None, metavar="DIR",
                   help="folder for the captured traces (default: see below)")
    p.add_argument("--host-speed", metavar="X", help="host CPU speed vs the reference (default "
                   f"{settings.SETTINGS['STEPCAST_HOST_SPEED'].default})")
    p.add_argument("--launch-queue", metavar="N", help="device ops queued before a launch blocks ("
                   f"{settings.SETTINGS['STEPCAST_LAUNCH_QUEUE_DEPTH'].default})")
    p.add_argument("--moe-routing", metavar="R", help="MoE routing: balanced (default), power:ALPHA or "
                   "histogram:FILE")
    p.add_argument("--gzip", action="store_true", help="write the captured traces gzip-compressed")
    p.add_argument("--capture-only", action="store_true", help="capture the traces; skip the simulation")
    p.add_argument("--no-dedup", action="store_true", help="run every rank, even ranks identical to a lower one")
    p.add_argument("--run-ranks", metavar="LIST", default=None,
                   help="only these ranks run (0-7,64-71 or auto[:M])")
    p.add_argument("--python-op-context", action="store_true", help="op context from Python (slower), not the C++ hook")
    p.add_argument("script", type=Path, help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments (after --)")
    p.set_defaults(func=run_command)


def run_command(ns: argparse.Namespace) -> int:
    """Check the arguments, capture every rank, then simulate. Exit codes: :mod:`emulate.launcher`; what this
    machine lacks (a CUDA build of torch, a compiler) and what cannot be learned are :class:`StepcastError`s."""
    from stepcast.emulate.driver.build import BuildError, driver_path, nccl_path, opctx_path
    from stepcast.emulate.launcher import RunInterrupted, check_target, check_torch_build, stop_signals_raise
    from stepcast.emulate.run_dirs import CaptureDir, new_run_dir

    spec, probe_nodes = check_run(ns)
    if spec is None:
        return 2
    script_args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    check_torch_build()
    check_target(spec)
    try:
        with stop_signals_raise():  # a first run builds the driver: a stop leaves no compiler and no half a build
            driver = driver_path()
            nccl_path()
            try:
                opctx: Path | None = None if ns.python_op_context else opctx_path()
            except BuildError as exc:
                print(f"stepcast: {exc}; recording op context with the slower Python dispatch mode", file=sys.stderr)
                opctx = None
    except RunInterrupted as exc:
        print(f"stepcast: {exc} while building the emulated driver; nothing was built", file=sys.stderr)
        return exc.exit_code
    if probe_nodes is not None:
        from stepcast.emulate.learned_roles import learn_run_ranks

        print(f"stepcast: learning which ranks run from a probe of {ns.nproc * probe_nodes} ranks "
              f"({probe_nodes} node(s))", file=sys.stderr, flush=True)
        ns.learned_roles = learn_run_ranks(ns.script.resolve(), script_args, hardware=spec.id, nproc=ns.nproc,
                                           probe_nodes=probe_nodes, world=ns.nproc * ns.nodes)
        ns.run_rank_list = ns.learned_roles.run_ranks
    capture_dir = CaptureDir(ns.trace_dir.resolve()) if ns.trace_dir else new_run_dir()
    with capture_dir:
        capture_dir.clear_previous_capture()
        return capture_and_simulate(ns, spec, driver, opctx, script_args, capture_dir.path)


def check_run(ns: argparse.Namespace) -> tuple[HardwareSpec | None, int | None]:
    """Every setting of a run, checked before anything is built or captured (:mod:`stepcast.preflight`): the
    options (parsed in place on ``ns``), the hardware, and the folders the run writes to. Returns the target and,
    for ``--run-ranks auto[:M]``, the probe's node count; the target None when a problem was printed."""
    from stepcast.profiling.paths import cache_root

    check = Preflight()
    spec = check.gpu("--hardware", ns.hardware)
    if not ns.script.is_file():
        check.add(f"script {ns.script} not found")
    ns.nproc = check.value("--nproc", ns.nproc, settings.whole_number(1))
    ns.nodes = check.value("--nodes", ns.nodes, settings.whole_number(1))
    ns.host_speed = check.option("STEPCAST_HOST_SPEED", "--host-speed", ns.host_speed)
    ns.launch_queue = check.option("STEPCAST_LAUNCH_QUEUE_DEPTH", "--launch-queue", ns.launch_queue)
    ns.moe_routing = check_routing(check, getattr(ns, "moe_routing", None), sparse=ns.run_ranks is not None)
    check.output_file("--report", ns.report)
    check.output_file("--trace", ns.trace)
    if ns.report is not None and ns.trace is not None and ns.report.absolute() == ns.trace.absolute():
        check.add(f"--trace: expected a file other than the --report, found {ns.trace}")
    if ns.trace_dir is not None:
        check.output_folder("--trace-dir", ns.trace_dir)
    check.output_folder("STEPCAST_CACHE_DIR", cache_root())  # builds, and the run folder without --trace-dir
    ns.run_rank_list, ns.trace_rank_list, probe_nodes = None, None, None
    if spec is not None and ns.nproc is not None and ns.nodes is not None and ns.trace_ranks is not None:
        from stepcast.emulate.roles import RunRanksError, parse_ranks

        try:
            ns.trace_rank_list = parse_ranks(ns.trace_ranks, ns.nproc * ns.nodes, "--trace-ranks")
        except RunRanksError as exc:
            check.add(str(exc))
    if spec is not None and ns.nproc is not None and ns.nodes is not None:
        per_node = spec.gpus_per_node or 8
        if ns.nproc > per_node:
            nodes = -(-ns.nproc * ns.nodes // per_node)
            check.add(f"--nproc {ns.nproc} is more than the {per_node} GPUs of a {spec.id} node (gpus_per_node in "
                      f"conf/hardware/{spec.id}.yaml): --nproc is ranks per node, use --nodes {nodes} --nproc "
                      f"{per_node} for {ns.nproc * ns.nodes} ranks")
        elif ns.run_ranks is not None:
            from stepcast.emulate.learned_roles import LearnError, parse_auto
            from stepcast.emulate.roles import RunRanksError, parse_run_ranks

            try:
                probe_nodes = parse_auto(ns.run_ranks)
                if probe_nodes is None:
                    ns.run_rank_list = parse_run_ranks(ns.run_ranks, ns.nproc * ns.nodes)
            except (RunRanksError, LearnError) as exc:
                check.add(str(exc))
    if check.refuse() is not None:
        return None, None
    return spec, probe_nodes


def check_routing(check: Preflight, given: str | None, sparse: bool = False) -> str | None:
    """The run's MoE routing (``--moe-routing``, else ``STEPCAST_MOE_ROUTING``), its text and, for a histogram,
    its file's contents checked; None when neither states one. A skewed routing is refused in a sparse run: it
    gives expert-parallel ranks different work, which the copies cannot have."""
    from stepcast.emulate.stated_routing import BALANCED, RoutingError, parse

    text = check.option("STEPCAST_MOE_ROUTING", "--moe-routing", given)
    if text is not None:
        label = "--moe-routing" if given is not None else "STEPCAST_MOE_ROUTING"
        try:
            routing = parse(text, label)
        except RoutingError as exc:
            check.add(str(exc))
            return None
        if sparse and routing.kind != BALANCED:
            check.add(f"{label} {text}: a skewed routing gives expert-parallel ranks different work, which the "
                      "copies of a sparse run (--run-ranks) cannot have: state balanced or run every rank")
    return text


def capture_and_simulate(ns: argparse.Namespace, spec: HardwareSpec, driver: Path, opctx: Path | None,
                         script_args: list[str], trace_dir: Path) -> int:
    from stepcast.emulate import config
    from stepcast.emulate.collate import collate, repair_log
    from stepcast.emulate.sim.durations import ranks_per_node_for
    from stepcast.emulate.launcher import (
        EXIT_DEADLOCK, EXIT_RANK_FAILED, RankProcess, RunInterrupted, exit_codes, failed_ranks, hosted_store, launch,
        new_run_id,
        remove_shared_memory, stop, stop_signals_raise, wait,
    )

    world = ns.nproc * ns.nodes
    run_id = new_run_id()
    ranks: list[RankProcess] = []
    interrupted: RunInterrupted | None = None
    started = time.perf_counter()
    run_ranks = getattr(ns, "run_rank_list", None)
    with stop_signals_raise(), (hosted_store(world) if world > 1 or run_ranks else contextlib.nullcontext()) \
            as store_port:
        try:
            launch(ns.script.resolve(), script_args, driver=driver, spec=spec, nproc=ns.nproc, nodes=ns.nodes,
                   trace_dir=trace_dir, run_id=run_id, ranks=ranks, opctx=opctx, dedup=not ns.no_dedup,
                   run_ranks=run_ranks, store_port=store_port, moe_routing=ns.moe_routing)
            wait(ranks)
        except RunInterrupted as exc:
            interrupted = exc
            stop(ranks)
        finally:
            if interrupted is None and any(rp.proc.poll() is None for rp in ranks):
                stop(ranks)  # the launcher itself failed: never leave a rank behind
            remove_shared_memory(run_id)
    capture_s = time.perf_counter() - started
    codes = exit_codes(ranks)
    # a rank that found the run deadlocked exits EXIT_DEADLOCK: the capture says so (judge_capture), unless another
    # rank failed on its own, whose failure the deadlock only follows from
    failed = {r: c for r, c in failed_ranks(ranks).items() if c != EXIT_DEADLOCK}
    hung = [rp.rank for rp in ranks if rp.hung]
    if interrupted is not None:
        reason, exit_code = f"stopped by {interrupted.name}", interrupted.exit_code
    elif hung:
        reason = (f"rank(s) {hung} stopped as hung: the ranks still running used under "
                  f"{config.STALL_CPU_FRACTION:.0%} of a core for {config.STALL_LIMIT_S:.0f} s "
                  f"(STEPCAST_STALL_LIMIT_S)")
        exit_code = EXIT_RANK_FAILED
    elif failed:
        reason = (f"the script failed on rank(s) {sorted(failed)} (exit {', '.join(map(str, failed.values()))})"
                  f"{', the others were stopped' if len(failed) < len(ranks) else ''}")
        exit_code = EXIT_RANK_FAILED
    else:
        reason, exit_code = None, 0
    partial = reason is not None

    logs = [r.log for r in ranks]
    missing = [str(p) for p in logs if not p.is_file()]
    expected = run_ranks or list(range(world))
    if missing or len(ranks) < len(expected):
        absent = missing or [f"rank{r}.log" for r in expected[len(ranks):]]
        print(f"stepcast: {reason or 'capture incomplete'}: no capture log from {', '.join(absent)} (the rank ended "
              f"before the driver loaded); capture folder {trace_dir}", file=sys.stderr)
        if ns.report:
            write_json_atomic(ns.report, {"partial": True, "partial_reason": reason, "capture_dir": str(trace_dir),
                                          "exit_codes": [codes.get(r) for r in expected]}, indent=1)
        return exit_code or EXIT_RANK_FAILED
    if partial:
        for log in logs:
            repair_log(log)
    try:
        with stop_signals_raise():  # collation writes the traces: a stop names what was written
            capture = collate(logs, hardware=spec.id, world_size=world,
                              ranks_per_node=ranks_per_node_for(world, ns.nodes, spec), trace_dir=trace_dir,
                              gzip=ns.gzip, rank_ids=run_ranks)
    except RunInterrupted as exc:
        written_traces = sorted(p.name for p in trace_dir.glob("rank*.trace.json*"))
        print(f"stepcast: {exc} while collating the captures: {len(written_traces)} of {len(logs)} traces written "
              f"in {trace_dir}; the captured logs are there too", file=sys.stderr)
        return exc.exit_code
    capture.update({"capture_dir": str(trace_dir), "capture_seconds": round(capture_s, 3),
                    "exit_codes": [codes[r.rank] for r in ranks]})
    reason, exit_code = judge_capture(capture, reason, exit_code)
    partial = reason is not None
    capture["partial"] = partial
    if partial:
        capture["partial_reason"] = reason
    if getattr(ns, "learned_roles", None) is not None:
        from stepcast.emulate.learned_roles import report_fields

        capture.update(report_fields(ns.learned_roles, trace_dir, capture.get("sparse_warnings", [])))
    deadlocked = exit_code == 2 and capture.get("deadlock")
    if deadlocked or any(p.startswith("no op table") for p in capture["incomplete_ranks"].values()):
        why = "a deadlocked program has no step time" if deadlocked else "a rank's kernels have no op to be timed by"
        return partial_without_simulation(ns, capture, reason, exit_code, why)
    if ns.capture_only:
        if ns.report:
            write_json_atomic(ns.report, capture, indent=1)
        if partial:
            print(f"stepcast: {reason}: traces up to then are in {trace_dir}", file=sys.stderr)
        else:
            print(f"stepcast: captured {len(ranks)} of {world} rank(s) on a virtual {spec.name}: peak memory "
                  f"{capture['peak_memory_bytes'] / 2**30:.2f} GiB; traces in {trace_dir}")
        return exit_code
    try:
        with stop_signals_raise():
            return simulate_capture(ns, spec, capture, reason, exit_code)
    except RunInterrupted as exc:
        capture["simulation_skipped"] = f"stopped by {exc.name} while simulating"
        if ns.report:
            write_json_atomic(ns.report, {**capture, "partial": True}, indent=1)
        print(f"stepcast: {exc} while simulating{written(ns.report)}; the traces are whole, in {trace_dir} "
              f"(stepcast replay {trace_dir}/rank*.trace.json --durations predicted --hardware {spec.id})",
              file=sys.stderr)
        return exc.exit_code


def judge_capture(capture: dict, reason: str | None, exit_code: int) -> tuple[str | None, int]:
    """What the captures themselves say about the run, beside the ranks' exit codes: a deadlock a rank found (the
    run is bad input, exit 2, unless a rank failed on its own, ``reason``: a peer waiting on a crashed rank is no
    deadlock of the program), or a rank whose capture is incomplete although every rank exited 0 (partial, exit 3).
    Returns the run's (partial reason or None, exit code)."""
    from stepcast.emulate.launcher import EXIT_RANK_FAILED

    if capture.get("deadlock") and reason is None:
        return f"deadlock: {capture['deadlock']}", 2
    incomplete = capture.get("incomplete_ranks") or {}
    if incomplete and reason is None:
        rank, problem = next(iter(incomplete.items()))
        more = f" (and {len(incomplete) - 1} more rank(s))" if len(incomplete) > 1 else ""
        return f"rank {rank}'s capture is incomplete: {problem}{more}", EXIT_RANK_FAILED
    return reason, exit_code


def simulate_capture(ns: argparse.Namespace, spec: HardwareSpec, capture: dict, reason: str | None,
                     exit_code: int) -> int:
    """Simulate the captured traces and write the report. A partial capture is simulated over the iterations
    every rank completed (``iterations_simulated``); with none, the report holds the capture facts only. Traces
    the simulator cannot take (a deadlock, ranks that disagree on a collective) are a :class:`StepcastError`: a
    partial run is reported without a simulation, a whole one fails naming the traces' folder."""
    from stepcast.emulate.collate import complete_iterations, read_copies
    from stepcast.emulate.launcher import RunInterrupted
    from stepcast.emulate.simulate import publish, simulate
    from stepcast.emulate.trace import read_trace
    from stepcast.errors import one_line

    paths = [Path(t) for t in capture["traces"]]
    try:
        docs = [read_trace(p) for p in paths]
        if reason is not None:
            docs, done = complete_iterations(docs)
            capture["iterations_simulated"] = done
            if not done:
                return partial_without_simulation(ns, capture, reason, exit_code,
                                                  "no iteration completed on every rank")
        copies = read_copies(Path(capture["copies"])) if capture.get("copies") else None
        result = simulate(docs, spec.id, nodes=ns.nodes, host_speed=ns.host_speed, sources=[str(p) for p in paths],
                          queue_depth=ns.launch_queue, copies=copies)
        if copies:
            result.warnings = [*(result.warnings or []), sparse_summary(capture), *capture.get("sparse_warnings", [])]
        result.warnings = [*(result.warnings or []), *capture.get("capture_warnings", [])]
        report = publish(result, paths, ns.report, ns.trace, extra=capture, quiet=reason is not None,
                         timeline_ranks=ns.trace_rank_list)
    except RunInterrupted:
        raise  # a stop while simulating: the caller says what it leaves
    except StepcastError as exc:
        if reason is not None:
            return partial_without_simulation(ns, capture, reason, exit_code, one_line(exc))
        print(f"stepcast: {one_line(exc)}; traces in {capture['capture_dir']}", file=sys.stderr)
        return exc.exit_code
    if reason is not None:
        print(f"stepcast: {reason}: partial report over {capture['iterations_simulated']} complete iteration(s): "
              f"{report['iteration_time_ms']:.3f} ms per iteration{written(ns.report)}; traces up to then in "
              f"{capture['capture_dir']}", file=sys.stderr)
    return exit_code


def sparse_summary(capture: dict) -> str:
    """One line: which ranks of a sparse run ran and which were copied from which."""
    from stepcast.emulate.roles import summary_line

    return summary_line(capture)


def partial_without_simulation(ns: argparse.Namespace, capture: dict, reason: str, exit_code: int,
                               why: str) -> int:
    capture["simulation_skipped"] = why
    if ns.report:
        write_json_atomic(ns.report, capture, indent=1)
    print(f"stepcast: {reason}: not simulated ({why}){written(ns.report)}; traces up to then in "
          f"{capture['capture_dir']}", file=sys.stderr)
    return exit_code


def written(report: Path | None) -> str:
    return f"; partial report in {report}" if report else ""


@cli_main
def dispatch(ns: argparse.Namespace) -> int:
    """Run the parsed subcommand (``python -m stepcast.emulate`` and the ``stepcast`` command both end here), once every
    ``STEPCAST_*`` setting is known to be good (:func:`stepcast.settings.check_environment`). A
    :class:`StepcastError` is one line and its exit status (:func:`stepcast.errors.cli_main`); anything else is a
    bug, and keeps its traceback."""
    refused = refuse_bad_environment()
    if refused is not None:
        return refused
    try:
        return ns.func(ns)
    except KeyboardInterrupt:  # Ctrl-C outside a capture (simulation, replay): no traceback
        print("stepcast: interrupted", file=sys.stderr)
        return 128 + 2


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate",
                                     description="Run unmodified PyTorch training scripts on virtual GPUs "
                                                 "(also: the stepcast command).")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    from stepcast.emulate import replay, validate

    replay.register(sub)
    validate.register(sub)
    return dispatch(parser.parse_args(argv))
