"""The predicted timeline is valid Chrome trace-event JSON with one track per rank's host and per stream."""
from __future__ import annotations

import json
from collections import defaultdict

from stepcast.emulate.sim.synthetic import training_like_traces
from stepcast.emulate.simulate import simulate
from stepcast.emulate.timeline import HOST_TID, write_timeline


def test_timeline_has_one_track_per_stream_and_rank(tmp_path):
    result = simulate(training_like_traces(2000, ranks=2), "h100-sxm", durations="measured")
    path = write_timeline(result, tmp_path / "timeline.json")
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    tracks: dict[int, set[str]] = defaultdict(set)
    for ev in events:
        if ev["ph"] == "M" and ev["name"] == "thread_name":
            tracks[ev["pid"]].add(ev["args"]["name"])
    assert tracks == {0: {"host", "stream 1", "stream 2"}, 1: {"host", "stream 1", "stream 2"}}
    slices = [ev for ev in events if ev["ph"] == "X"]
    assert slices and all(ev["dur"] >= 0 and isinstance(ev["ts"], float) for ev in slices)
    names = {ev["name"] for ev in slices}
    assert {"iteration 0", "all_reduce world", "k", "stream_sync"} <= names
    host = [ev for ev in slices if ev["tid"] == HOST_TID]
    assert host and all(ev["cat"] in ("iteration", "sync") for ev in host)
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.json"]


def test_kernel_slices_have_short_names_and_keep_the_whole_name_in_their_args(tmp_path):
    from stepcast.emulate.sim.synthetic import TraceBuilder
    from stepcast.emulate.timeline import short_kernel_name

    full = ("void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, "
            "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, "
            "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
    assert short_kernel_name(full) == "at::native::(anonymous)::vectorized_elementwise_kernel"
    assert short_kernel_name("nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT") == \
        "nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT"
    assert short_kernel_name("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    b = TraceBuilder()
    b.iteration(0)
    b.kernel(stream=1, duration_us=1.0, name=full)
    b.iteration(1, end=True)
    doc = json.loads(write_timeline(simulate([b.doc()], "h100-sxm", durations="measured"),
                                    tmp_path / "t.json").read_text())
    kernel = next(ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel")
    assert kernel["name"] == "at::native::(anonymous)::vectorized_elementwise_kernel"
    assert kernel["args"]["kernel"] == full


def test_a_sparse_runs_timeline_shows_the_ranks_that_ran_unless_told_which(tmp_path):
    from tests.emulate.test_sim_copies import COPIES, tp_dp_trace

    result = simulate([tp_dp_trace(r) for r in (0, 1)], None, durations="measured", copies=COPIES)

    def pids(ranks=None) -> set[int]:
        doc = json.loads(write_timeline(result, tmp_path / "t.json", ranks).read_text())
        return {ev["pid"] for ev in doc["traceEvents"] if ev["ph"] == "X"}

    assert pids() == {0, 1}
    assert pids([0, 3]) == {0, 3}
