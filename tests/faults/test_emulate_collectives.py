"""Traces whose ranks disagree on their collectives are an error, never a plausible report: a call one rank skipped,
members that disagree on what they exchange, and orders that deadlock each end with one line naming the ranks,
the communicator and the call (``stepcast replay`` exits 2)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepcast.emulate.sim.collate import CollectiveMismatch
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate
from stepcast.profiling.paths import REPO_ROOT


def two_ranks(calls: list[list[tuple[str, int]]], world: int = 2) -> list[dict]:
    """One trace per rank; ``calls[rank]``: (communicator, bytes) of each all-reduce in order."""
    docs = []
    for rank, mine in enumerate(calls):
        b = TraceBuilder(rank=rank, world_size=world)
        b.iteration(0)
        for seq_by_comm, (comm, nbytes) in _numbered(mine):
            b.kernel(stream=1, duration_us=5.0)
            b.collective(stream=1, comm=comm, comm_seq=seq_by_comm, nbytes=nbytes, duration_us=10.0)
        b.iteration(1, end=True)
        docs.append(b.doc())
    return docs


def _numbered(calls: list[tuple[str, int]]) -> list[tuple[int, tuple[str, int]]]:
    seen: dict[str, int] = {}
    out = []
    for comm, nbytes in calls:
        out.append((seen.get(comm, 0), (comm, nbytes)))
        seen[comm] = seen.get(comm, 0) + 1
    return out


def test_a_collective_one_rank_skipped_is_an_error_naming_ranks_communicator_and_call():
    # rank 1 skipped the middle all-reduce: pairing by sequence number would shift the last two by one
    docs = two_ranks([[("world", 1 << 20)] * 3, [("world", 1 << 20)] * 2])
    with pytest.raises(CollectiveMismatch) as info:
        simulate(docs, "h100-sxm", durations="measured", sources=["r0.json", "r1.json"])
    message = str(info.value)
    assert "collective #2 on communicator 'world'" in message and "only rank(s) [0]" in message
    assert "rank(s) [1] never made it" in message and "r0.json events[" in message and "\n" not in message


def test_members_that_disagree_on_bytes_are_an_error_naming_both_ranks_and_events():
    docs = two_ranks([[("world", 1 << 20), ("world", 4 << 20)], [("world", 4 << 20), ("world", 4 << 20)]])
    with pytest.raises(CollectiveMismatch) as info:
        simulate(docs, "h100-sxm", durations="measured", sources=["r0.json", "r1.json"])
    message = str(info.value)
    assert "collective #0 on communicator 'world'" in message and "disagree on bytes" in message
    assert "rank 0 (r0.json events[2]" in message and "rank 1 (r1.json events[2]" in message


def test_ranks_that_agree_are_matched_and_a_partial_set_still_runs_alone():
    docs = two_ranks([[("world", 1 << 20)] * 2] * 2)
    assert len(simulate(docs, "h100-sxm", durations="measured").groups) == 2
    partial = two_ranks([[("world", 1 << 20)] * 3, [("world", 1 << 20)] * 2], world=4)  # ranks 2, 3 absent
    assert simulate(partial, "h100-sxm", durations="measured").groups == []


def kineto_rank(rank: int, calls: list[tuple[str, int]], world: int = 2) -> dict:
    """A profiler trace of one rank: one ProfilerStep holding an NCCL all-reduce per (process group, elements)."""
    host = {"pid": 1, "tid": 1}

    def x(cat, name, ts, dur, where, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}

    events = [x("user_annotation", "ProfilerStep#1", 100, 100 + 100 * len(calls), host)]
    for n, (group, nelems) in enumerate(calls, 1):
        t = 110 + 100 * n
        events += [
            x("cpu_op", "record_param_comms", t, 20, host, **{
                "External id": n, "Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                "Group size": world, "dtype": "float", "Process Group Name": group}),
            x("cuda_runtime", "cudaLaunchKernel", t + 5, 5, host, correlation=n, **{"External id": n}),
            x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 15, 50, {"pid": 0, "tid": 7}, stream=7,
              correlation=n, device=0, **{"External id": n})]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}


def replay_cli(tmp: Path, *ranks: dict) -> tuple[subprocess.CompletedProcess, float]:
    paths = []
    for rank, doc in enumerate(ranks):
        paths.append(tmp / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(doc))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate", "replay", *map(str, paths)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    return proc, time.monotonic() - started


def test_replay_of_a_deadlock_is_one_line_naming_ranks_and_collectives(tmp_path):
    # rank 0 all-reduces on group a then b, rank 1 on b then a: each waits for the other forever
    proc, seconds = replay_cli(tmp_path, kineto_rank(0, [("a", 1024), ("b", 1024)]),
                               kineto_rank(1, [("b", 1024), ("a", 1024)]))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "rank 0 is stuck" in lines[0] and "rank 1 is stuck" in lines[0]
    assert "('a', 0)" in lines[0] and "('b', 0)" in lines[0] and seconds < 10


def test_replay_of_a_missing_collective_is_one_line_and_exit_2(tmp_path):
    proc, seconds = replay_cli(tmp_path, kineto_rank(0, [("a", 1024), ("a", 1024)]), kineto_rank(1, [("a", 1024)]))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "collective #1 on communicator 'a'" in lines[0] and "rank(s) [1] never made it" in lines[0]
    assert seconds < 10


def test_an_empty_profiler_trace_is_one_line_naming_the_file(tmp_path):
    empty = {"schemaVersion": 1, "traceEvents": []}
    proc, _ = replay_cli(tmp_path, empty)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "rank0.json" in lines[0], proc.stderr[-2000:]
