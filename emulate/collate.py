"""Join the ranks' capture logs (``rank<k>.log.driver.<pid>.jsonl``, :mod:`emulate.driver.tracelog`) into trace-v1
files (one per rank) and the capture part of the report."""
from __future__ import annotations

import platform
from collections import Counter
from pathlib import Path
from typing import Any

import copy

from stepcast.emulate.stated_routing import summarize
from stepcast.emulate.driver.tracelog import comm_sizes, driver_events, peak_device_bytes, read_driver_log
from stepcast.emulate.trace import write_trace
from stepcast.profiling.atomic import write_json_atomic


CUDNN_ON_DRIVER = "enabled: the real cuDNN chooses and launches its kernels on the emulated driver"


def splice_duplicate(own: list[dict[str, Any]], representative: list[dict[str, Any]], mark: int
                     ) -> list[dict[str, Any]]:
    """A rank stopped by dedup at iteration mark ``mark``: its own events up to that mark, then the
    representative's events after the same mark (its device work was identical), on the rank's own clock."""
    def cut(events: list[dict[str, Any]]) -> int:
        return next(i for i, e in enumerate(events) if e["kind"] == "iteration" and e["step"] == mark)

    mine, theirs = cut(own), cut(representative)
    shift = own[mine]["t_ns"] - representative[theirs]["t_ns"]
    tail = copy.deepcopy(representative[theirs + 1:])
    for ev in tail:
        ev["t_ns"] += shift
    events = own[:mine + 1] + tail
    for seq, ev in enumerate(events):
        ev["seq"] = seq
    return events


COPIES_FILE = "copies.json"


def sparse_copies(run_ranks: list[int], world_size: int, records: list[dict[str, Any]],
                  trace_dir: Path) -> dict[str, Any]:
    """The capture report's fields of a sparse run: which ranks ran, which were copied from which twin, warnings;
    each copy's communicator map goes to ``trace_dir/copies.json`` ({rank: {twin, comm_map}}), which the
    simulation reads (:func:`read_copies`)."""
    from stepcast.emulate.roles import copies, ranges

    absent, warnings = copies(run_ranks, world_size, records)
    by_twin: dict[int, list[int]] = {}
    for c in absent.values():
        by_twin.setdefault(c.twin, []).append(c.rank)
    path = trace_dir / COPIES_FILE
    write_json_atomic(path, {str(c.rank): {"twin": c.twin, "comm_map": c.comm_map, "structured": c.structured}
                             for c in absent.values()}, indent=None)
    if absent:
        warnings.append("copies are assumed to run their twin's operations exactly (e.g. ranks holding the first or "
                        "last pipeline stage of another replica, or data-dependent control flow, are assumed equal)")
    return {"ranks_run": ranges(run_ranks), "ranks_copied": {str(t): ranges(rs) for t, rs in sorted(by_twin.items())},
            "copies": str(path), "sparse_warnings": warnings}


def communicator_members(logs: list[Any], rank_of: list[int], sparse_records: list[dict[str, Any]]
                         ) -> dict[str, list[int]]:
    """Global ranks of each communicator: the ranks whose logs hold it, or, in a sparse run, its process group's
    ranks (absent members hold no log)."""
    members: dict[str, set[int]] = {}
    for rank, log in zip(rank_of, logs):
        for comm in getattr(log, "comms", {}):
            members.setdefault(comm, set()).add(rank)
    if sparse_records:
        from stepcast.emulate.roles import groups_from_records

        for grp in groups_from_records(sparse_records):
            if grp.comm:
                members[grp.comm] = set(grp.ranks)
            for key, comm in grp.p2p.items():
                members[comm] = {grp.ranks[int(x)] for x in key.split(":")}
    return {comm: sorted(ranks) for comm, ranks in members.items()}


def place_collectives(all_events: list[list[dict[str, Any]]], members: dict[str, list[int]],
                      ranks_per_node: int) -> None:
    """Each collective's ``spec.ranks_per_node``: its communicator's members on the busiest NVLink domain (ranks
    ``k * ranks_per_node`` ... on domain k: a host, or the hosts of an NVL72 rack; ``ranks_per_node`` is
    ``emulate.sim.durations.ranks_per_node_for``), so a group spread over domains is timed over the network (NCCL
    model: estimator/nccl.py) however small it is, and one within a domain at NVLink rates however many hosts it
    spans."""
    busiest = {comm: max(Counter(r // ranks_per_node for r in ranks).values())
               for comm, ranks in members.items() if ranks}
    for events in all_events:
        for ev in events:
            if ev.get("kind") == "collective" and isinstance(ev.get("spec"), dict) and ev.get("comm") in busiest:
                ev["spec"]["ranks_per_node"] = min(int(ev["spec"].get("ranks") or 1), busiest[ev["comm"]])


def read_copies(path: Path) -> dict[int, dict[str, Any]]:
    """``copies.json`` of a sparse run: {rank: {"twin": int, "comm_map": {comm: [comm, rank, peer numbers]}}}."""
    import json

    return {int(r): c for r, c in json.loads(Path(path).read_text()).items()}


def repair_log(path: Path) -> bool:
    """A rank killed mid-write (SIGKILL after the stop grace) can leave half a record at the end of its log: cut
    it, so the records it did write are read. Returns whether anything was cut."""
    if not path.is_file():
        return False
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return False
        f.truncate(data.rfind(b"\n") + 1)
    return True


def assumption_warnings(all_events: list[list[dict[str, Any]]]) -> list[str]:
    """What the capture had to assume, one line each: a script that asked the GPU for nothing (its step time is
    that of nothing), and values computed on the GPU that the script read back, which read as 0 (a loss it prints,
    or a count or a routing decision its control flow then followed as if it were 0)."""
    out = []
    if not any(ev["kind"] in ("kernel", "memcpy", "memset", "collective") for events in all_events for ev in events):
        out.append("the script asked the GPU for nothing (no kernel, copy or collective): the predicted time is "
                   "that of no device work; does it use torch.cuda / device='cuda'?")
    reads = Counter(ev.get("op") or "outside any op" for ev in all_events[0] if ev.get("read_zeros")) \
        if all_events else Counter()
    if reads:
        calls = ", ".join(f"{op} x{n}" for op, n in reads.most_common(4))
        more = f" and {len(reads) - 4} more ops" if len(reads) > 4 else ""
        out.append(f"rank 0 read {sum(reads.values())} values computed on the GPU, which read as 0 ({calls}{more}: "
                   "e.g. .item() of a loss); control flow that depends on them ran as if they were 0")
    return out


def dedup_warnings(stopped: dict[int, dict[str, Any]]) -> list[str]:
    """What rank dedup assumed (one line): the ranks it stopped, after which iteration, copying whom; a program whose
    ranks diverge after the iterations compared (emulate/capture.py ``Dedup``) is simulated as if they had not."""
    if not stopped:
        return []
    from stepcast.emulate.roles import ranges

    marks = sorted({d["mark"] for d in stopped.values()})
    reps = sorted({d["representative"] for d in stopped.values()})
    return [f"rank(s) {ranges(sorted(stopped))} stopped after iteration {marks[-1]} as copies of rank(s) "
            f"{ranges(reps)} (the same device work in every iteration compared), and are simulated as their copies "
            "from there on: a program whose ranks diverge later would be simulated as if they did not (--no-dedup "
            "runs every rank to the end)"]


def complete_iterations(docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Traces of a stopped run cut at the last iteration boundary every rank reached, so that each collective in
    what remains has all its members; returns the cut traces and how many iterations they hold (0: none)."""
    marks = [[i for i, e in enumerate(doc["events"]) if e["kind"] == "iteration"] for doc in docs]
    done = min(len(m) for m in marks) - 1 if marks else 0
    if done < 1:
        return docs, 0
    return [{**doc, "events": doc["events"][:m[done] + 1]} for doc, m in zip(docs, marks)], done


def collate(log_paths: list[Path], *, hardware: str, world_size: int, ranks_per_node: int, trace_dir: Path,
            gzip: bool = False, rank_ids: list[int] | None = None) -> dict[str, Any]:
    """Write ``trace_dir/rank<k>.trace.json[.gz]`` for every rank that ran and return the capture report fields.
    ``rank_ids``: the rank of each log (a sparse run, ``--run-ranks``; default 0, 1, ...): the absent ranks are
    then described as copies of running ones (:func:`sparse_copies`) instead of traces of their own."""
    logs = [read_driver_log(p) for p in log_paths]
    rank_of = list(rank_ids) if rank_ids is not None else list(range(len(logs)))
    index_of = {r: i for i, r in enumerate(rank_of)}
    sparse_records = [log.sidecar["sparse"] for log in logs if isinstance(log.sidecar.get("sparse"), dict)]
    sizes = comm_sizes(logs)
    if sparse_records:  # absent members hold no log: a communicator's size is its group's
        from stepcast.emulate.roles import groups_from_records

        for grp in groups_from_records(sparse_records):
            if grp.comm:
                sizes[grp.comm] = len(grp.ranks)
            for comm in grp.p2p.values():
                sizes[comm] = 2
    per_rank: list[dict[str, Any]] = []
    traces: list[str] = []
    all_events = [driver_events(log, comm_sizes=sizes, ranks_per_node=ranks_per_node) for log in logs]
    place_collectives(all_events, communicator_members(logs, rank_of, sparse_records), ranks_per_node)
    deduplicated: dict[int, int] = {}
    for k, log in enumerate(logs):
        dedup = log.sidecar.get("dedup")
        if dedup is not None:
            rep = dedup["representative"]
            all_events[k] = splice_duplicate(all_events[k], all_events[index_of[rep]], dedup["mark"])
            deduplicated[rank_of[k]] = rep
    for k, log in enumerate(logs):
        rank = rank_of[k]
        events = all_events[k]
        memory = log.sidecar.get("memory", {})
        if rank in deduplicated:  # its run ended early: the representative's whole-run figures stand for it
            memory = logs[index_of[deduplicated[rank]]].sidecar.get("memory", memory)
        meta = {"script": log.sidecar.get("script"), "argv": log.sidecar.get("argv"),
                "torch": log.sidecar.get("torch"), "capture_host": platform.node(),
                "capture_cpu": platform.processor() or platform.machine(), "status": log.sidecar.get("status"),
                "generic_entry_points": sorted(set(log.unhandled)), "backend": "driver", "cudnn": "enabled",
                "op_context": log.sidecar.get("op_context"), "host_clock": log.host_clock,
                "host_work": log.sidecar.get("host_work"),
                "deduplicated_from": deduplicated.get(rank),
                "memory": memory}
        path = trace_dir / f"rank{rank}.trace.json{'.gz' if gzip else ''}"
        write_trace(path, rank=rank, world_size=world_size, hardware=hardware, events=events, meta=meta)
        traces.append(str(path))
        kernels = sum(1 for e in events if e["kind"] == "kernel")
        per_rank.append({
            "rank": rank,
            "peak_memory_bytes": memory.get("max_memory_reserved", peak_device_bytes(events)),
            "max_memory_allocated": memory.get("max_memory_allocated"),
            "max_memory_reserved": memory.get("max_memory_reserved"),
            "device_malloc_peak_bytes": peak_device_bytes(events),
            "events": len(events), "kernels": kernels,
            "collectives": sum(1 for e in events if e["kind"] == "collective"),
            "iterations": sum(1 for e in events if e["kind"] == "iteration"),
            "failed_mallocs": sum(1 for e in events if e["kind"] == "malloc" and e.get("failed")),
            "status": log.sidecar.get("status", {"exit": "no op table: the process ended abruptly"}),
            "capture_problem": None if rank in deduplicated else log.completeness(),
            "trace": str(path),
        })
    generic = sorted({name for log in logs for name in log.unhandled})
    sparse = sparse_copies(rank_of, world_size, sparse_records, trace_dir) if rank_ids is not None else {}
    incomplete = {str(r["rank"]): r["capture_problem"] for r in per_rank if r["capture_problem"]}
    deadlocks = [log.deadlock for log in logs if log.deadlock]
    routing, routing_warnings = summarize([log.sidecar.get("moe_routing") for log in logs])
    return {**sparse,
        "moe_routing": routing,
        "incomplete_ranks": incomplete,
        "deadlock": deadlocks[0] if deadlocks else None,
        "capture_warnings": assumption_warnings(all_events) + dedup_warnings(
            {rank_of[k]: log.sidecar["dedup"] for k, log in enumerate(logs) if log.sidecar.get("dedup")})
            + routing_warnings,
        "emulation": {
            "backend": "driver",
            "cudnn": CUDNN_ON_DRIVER,
            "device_reads": "real bytes for small data moved by copies, collectives and metadata ops; zeros for "
                            "anything a kernel computed (loss.item() reads 0.0)",
            "generic_entry_points": generic,
        },
        "hardware": hardware,
        "world_size": world_size,
        "peak_memory_bytes": max((r["peak_memory_bytes"] or 0) for r in per_rank) if per_rank else 0,
        "ranks": per_rank,
        "traces": traces,
        "deduplicated_ranks": {str(r): rep for r, rep in deduplicated.items()},
        "processes_run_to_completion": len(logs) - len(deduplicated),
        "trace": traces[0] if traces else None,
    }
