"""CUDA graphs captured by torch on the emulated driver (emulate/driver/csrc/graph.c), as the trace shows them:
stream capture records the work instead of logging it, and every graph launch logs the captured work again, as one
launch call, on the launching stream."""
from __future__ import annotations

import textwrap
from collections import Counter

import pytest

from stepcast.emulate.sim import host
from stepcast.emulate.sim.program import build_program

REPLAYS = 4

GRAPHED = textwrap.dedent(f"""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).cuda()
    side = torch.nn.Linear(64, 64).cuda()
    x = torch.randn(32, 64, device="cuda")
    branch = torch.cuda.Stream()

    def work():
        y = model(x)
        branch.wait_stream(torch.cuda.current_stream())  # fork: an event recorded in capture, waited on
        with torch.cuda.stream(branch):
            z = side(x)
        torch.cuda.current_stream().wait_stream(branch)  # join
        return y + z

    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        work()
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = work()
    assert torch.cuda.is_current_stream_capturing() is False
    for _ in range({REPLAYS}):
        graph.replay()
    torch.cuda.synchronize()
    print("replayed")
""")


@pytest.fixture(scope="module")
def graphed_events(emulate_run, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graphs")
    script = tmp / "graphed.py"
    script.write_text(GRAPHED)
    proc, _, traces = emulate_run(tmp, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "replayed" in proc.stdout
    return traces[0]["events"]


def _device_work(events):
    return [e for e in events if e["kind"] in ("kernel", "memcpy", "memset", "collective")]


def test_each_graph_launch_replays_the_captured_work(graphed_events):
    launches: dict[int, list[dict]] = {}
    for ev in graphed_events:
        if "graph_launch" in ev:
            launches.setdefault(ev["graph_launch"], []).append(ev)
    assert len(launches) == REPLAYS
    # nothing was logged while capturing: the eager warm-up's kernels once (on its side streams; randn's on the
    # default stream before it), then only the replays'
    eager = [e for e in _device_work(graphed_events)
             if "graph_launch" not in e and e["kind"] == "kernel" and e["stream"] != 0]
    sizes = {len([e for e in evs if e["kind"] == "kernel"]) for evs in launches.values()}
    assert sizes == {len(eager)}, (sizes, len(eager))
    names = [[e["name"] for e in evs if e["kind"] == "kernel"] for evs in launches.values()]
    assert all(n == [e["name"] for e in eager] for n in names)
    for evs in launches.values():
        assert [e["graph_node"] for e in evs] == list(range(len(evs)))
        assert all(e["gap_ns"] == 0 for e in evs[1:])  # one call: the launch's host gap is node 0's
        # the op the work was captured under, and an estimator row for each GEMM of every replay (fresh op calls)
        assert all(e["op"] for e in evs if e["kind"] == "kernel")
        assert sum(1 for e in evs if e.get("spec") and e["spec"]["family"] == "gemm") == 3


def test_replayed_work_runs_on_the_launching_stream_and_keeps_its_fork_and_join(graphed_events):
    replay = [e for e in graphed_events if e.get("graph_launch") == REPLAYS]
    streams = Counter(e["stream"] for e in replay if e["kind"] == "kernel")
    assert streams[0] > 0, "the capture's own stream's work was not moved onto the launching (default) stream"
    assert len(streams) == 2, streams   # the side branch keeps its stream
    kinds = [e["kind"] for e in replay]
    assert "event_record" in kinds and "stream_wait_event" in kinds
    waits = [e for e in replay if e["kind"] == "stream_wait_event"]
    assert {w["stream"] for w in waits} == set(streams)  # fork (branch waits) and join (launching stream waits)


def _program(events: list[dict]):
    events = [{"seq": i, "t_ns": 0, "gap_ns": 0, "thread": 0, **ev} for i, ev in enumerate(events)]
    return build_program({"rank": 0, "world_size": 1, "hardware": "h100-sxm", "meta": {}, "events": events})


def test_a_graph_launch_costs_one_launch_call_not_one_per_node():
    kernel = {"kind": "kernel", "stream": 0, "name": "k", "grid": [1, 1, 1], "block": [32, 1, 1], "shmem": 0}
    events = [{"kind": "iteration", "step": 0}, kernel,
              *({**kernel, "graph_launch": 1, "graph_node": i} for i in range(5))]
    gaps = host.effective_gaps(_program(events), 1.0, {"kernel": 7.5})
    assert gaps == [0.0, 7500.0, 7500.0, 0.0, 0.0, 0.0, 0.0]
