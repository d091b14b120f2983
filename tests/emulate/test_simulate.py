"""Known-answer traces for the simulator: each scenario's iteration time and breakdown follow from the model by hand.

Launch latency is 0 in these traces (``meta.launch_latency_us``) so the arithmetic stays plain."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stepcast.emulate.report import build_report
from stepcast.emulate.sim.engine import SimulationDeadlock
from stepcast.emulate.sim.synthetic import TraceBuilder
from stepcast.emulate.simulate import simulate, simulate_traces
from stepcast.emulate.trace import TraceFormatError, write_trace
from stepcast.estimator.base import KernelEstimator

NO_LATENCY = {"launch_latency_us": 0.0}


def builder(rank: int = 0, world_size: int = 1) -> TraceBuilder:
    b = TraceBuilder(rank=rank, world_size=world_size, meta=NO_LATENCY)
    b.iteration(0)
    return b


def run(*builders: TraceBuilder, **kwargs) -> dict:
    docs = []
    for b in builders:
        b.iteration(1, end=True)
        docs.append(b.doc())
    kwargs.setdefault("durations", "measured")
    return build_report(simulate(docs, "h100-sxm", **kwargs))


def test_kernels_on_two_streams_overlap():
    b = builder()
    b.kernel(stream=1, duration_us=100.0)
    b.kernel(stream=2, duration_us=100.0, gap_us=10.0)
    b.device_sync()
    report = run(b)
    assert report["iteration_time_ms"] == pytest.approx(0.110)
    assert report["breakdown_ms"]["compute"] == pytest.approx(0.110)


def test_kernels_on_one_stream_run_in_order():
    b = builder()
    b.kernel(stream=1, duration_us=100.0)
    b.kernel(stream=1, duration_us=100.0, gap_us=10.0)
    b.device_sync()
    assert run(b)["iteration_time_ms"] == pytest.approx(0.200)


def test_event_wait_makes_the_second_stream_wait():
    b = builder()
    b.kernel(stream=1, duration_us=100.0)
    b.record(event=7, stream=1)
    b.wait(stream=2, event=7)
    b.kernel(stream=2, duration_us=50.0)
    b.device_sync()
    report = run(b)
    assert report["iteration_time_ms"] == pytest.approx(0.150)


def test_event_handle_reuse_waits_for_the_latest_record():
    b = builder()
    b.kernel(stream=1, duration_us=100.0)
    b.record(event=7, stream=1)
    b.kernel(stream=1, duration_us=100.0)
    b.record(event=7, stream=1)          # same handle, second version
    b.wait(stream=2, event=7)
    b.kernel(stream=2, duration_us=10.0)
    b.device_sync()
    assert run(b)["iteration_time_ms"] == pytest.approx(0.210)


def test_host_bound_sequence():
    b = builder()
    for _ in range(10):
        b.kernel(stream=1, duration_us=1.0, gap_us=20.0)
    report = run(b)
    # The host issues kernels at 20, 40, ... 200 us and closes the iteration at 200 us; the device computes
    # 1 us of every 20 and otherwise waits for the host; the iteration ends when its last kernel does (201 us).
    assert report["iteration_time_ms"] == pytest.approx(0.201)
    parts = report["breakdown_ms"]
    assert parts["compute"] == pytest.approx(0.010)
    assert parts["host_bound"] == pytest.approx(0.191)


def test_stream_sync_blocks_the_host():
    b = builder()
    b.kernel(stream=1, duration_us=500.0)
    b.stream_sync(stream=1)
    b.kernel(stream=1, duration_us=1.0, gap_us=5.0)   # issued only after the sync returns
    b.stream_sync(stream=1)
    assert run(b)["iteration_time_ms"] == pytest.approx(0.506)


def test_event_sync_and_blocking_memcpy_block_the_host():
    b = builder()
    b.kernel(stream=1, duration_us=300.0)
    b.record(event=1, stream=1)
    b.event_sync(event=1)
    b.memcpy(1 << 10, direction="d2h", stream=1, blocking=True, duration_us=20.0)
    assert run(b)["iteration_time_ms"] == pytest.approx(0.320)


def test_host_speed_scales_host_gaps():
    b = builder()
    for _ in range(10):
        b.kernel(stream=1, duration_us=1.0, gap_us=20.0)
    report = run(b, host_speed=2.0)
    assert report["iteration_time_ms"] == pytest.approx(0.101)


def two_ranks(rank0_compute: float, rank1_compute: float, comm_us: tuple[float, float]) -> list[TraceBuilder]:
    out = []
    for rank, compute in enumerate((rank0_compute, rank1_compute)):
        b = builder(rank, world_size=2)
        b.kernel(stream=1, duration_us=compute)
        b.record(event=1, stream=1)
        b.wait(stream=2, event=1)
        b.collective(stream=2, comm_seq=0, duration_us=comm_us[rank])
        b.device_sync()
        out.append(b)
    return out


def test_collective_waits_for_the_late_rank():
    report = run(*two_ranks(100.0, 300.0, comm_us=(250.0, 50.0)))
    # Both start at 300 us (rank 1 arrives last) and run for the smaller recorded duration (the other one
    # includes rank 0's wait), so both end at 350 us.
    assert [r["iteration_time_ms"] for r in report["per_rank"]] == pytest.approx([0.350, 0.350])
    early = report["per_rank"][0]["breakdown_ms"]
    assert early["idle"] == pytest.approx(0.200)
    assert early["exposed_communication"] == pytest.approx(0.050)
    assert report["collectives_matched"] == 1


def test_rank_order_does_not_change_the_result():
    a = run(*two_ranks(100.0, 300.0, comm_us=(250.0, 50.0)))
    b_ranks = two_ranks(100.0, 300.0, comm_us=(250.0, 50.0))
    b = run(*reversed(b_ranks))
    assert [r["iteration_time_ms"] for r in a["per_rank"]] == [r["iteration_time_ms"] for r in b["per_rank"]]


def test_collectives_of_absent_ranks_run_alone_with_their_own_duration():
    ranks = []
    for rank in range(2):
        b = builder(rank, world_size=4)  # ranks 2 and 3 are not in the traces
        b.kernel(stream=1, duration_us=100.0 * (rank + 1))
        b.collective(stream=1, comm_seq=0, duration_us=30.0)
        b.device_sync()
        ranks.append(b)
    report = run(*ranks)
    assert [r["iteration_time_ms"] for r in report["per_rank"]] == pytest.approx([0.130, 0.230])
    assert report["collectives_matched"] == 0


def test_exposed_communication_is_what_compute_does_not_hide():
    b = builder(0, world_size=1)
    b.kernel(stream=1, duration_us=100.0)
    b.collective(stream=2, comm_seq=0, duration_us=150.0)
    b.device_sync()
    parts = run(b)["breakdown_ms"]
    assert parts["compute"] == pytest.approx(0.100)
    assert parts["communication"] == pytest.approx(0.150)
    assert parts["exposed_communication"] == pytest.approx(0.050)
    assert parts["host_bound"] == pytest.approx(0.0)


def test_inconsistent_collective_orders_are_a_deadlock():
    docs = []
    for rank in range(2):
        b = builder(rank, world_size=2)
        first, second = ("a", "b") if rank == 0 else ("b", "a")
        b.collective(stream=1, comm=first, comm_seq=0, duration_us=10.0)
        b.collective(stream=1, comm=second, comm_seq=0, duration_us=10.0)
        b.iteration(1, end=True)
        docs.append(b.doc())
    with pytest.raises(SimulationDeadlock, match="stuck"):
        simulate(docs, "h100-sxm", durations="measured")


def test_peak_memory_follows_malloc_and_free():
    b = builder()
    b.malloc(ptr=1, nbytes=100)
    b.malloc(ptr=2, nbytes=200)
    b.free(ptr=1)
    b.malloc(ptr=3, nbytes=50)
    b.kernel(stream=1, duration_us=1.0)
    report = run(b)
    assert report["peak_memory_bytes"] == 300
    assert report["per_rank"][0]["peak_memory_bytes"] == 300


def test_memcpy_is_timed_by_the_catalog_bandwidth():
    b = builder()
    b.memcpy(64 * 10**6, direction="h2d", stream=1)       # h100-sxm: PCIe 64 GB/s at 0.84 -> 1190 us (+1 us fixed)
    b.device_sync()
    assert run(b, durations="predicted")["iteration_time_ms"] == pytest.approx(1.0 / 0.84 + 0.001)


class CountingEstimator(KernelEstimator):
    """Predicts m*n*k/1e6 us for a GEMM row and counts its calls and rows."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self.rows = 0

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        self.calls += 1
        self.rows += len(frame)
        assert (frame["hardware"] == "h100-sxm").all()
        return (frame["m"] * frame["n"] * frame["k"] / 1e6).to_numpy(dtype=float)


GEMM = {"family": "gemm", "dtype": "bf16", "m": 100, "n": 100, "k": 1000, "batch": 1}   # -> 10 us


def test_predictions_come_from_one_batched_estimator_call():
    est = CountingEstimator()
    wide = dict(GEMM, n=200)                     # -> 20 us
    ranks = []
    for rank in range(2):
        b = builder(rank, world_size=2)
        for _ in range(5):
            b.kernel(stream=1, spec=GEMM)
            b.kernel(stream=1, spec=wide)
        b.kernel(stream=1)                       # no spec: launch floor, counted
        b.device_sync()
        ranks.append(b)
    report = run(*ranks, durations="predicted", estimator=est)
    assert est.calls == 1 and est.rows == 2      # 20 kernels, 2 distinct rows, one call
    assert report["iteration_time_ms"] == pytest.approx((5 * 30.0 + 2.0) / 1e3)
    assert report["fallback_kernels"] == 2
    assert report["fallback_reasons"] == {"no_spec_launch_floor": 2}


def test_measured_durations_win_over_predictions():
    est = CountingEstimator()
    b = builder()
    b.kernel(stream=1, spec=GEMM, duration_us=3.0)
    b.device_sync()
    assert run(b, durations="measured", estimator=est)["iteration_time_ms"] == pytest.approx(0.003)
    assert est.calls == 0


def test_malformed_trace_is_one_line_naming_file_and_field(tmp_path):
    path = write_trace(tmp_path / "rank0.json", rank=0, world_size=1, hardware="h100-sxm", events=[
        {"seq": 0, "kind": "kernel", "t_ns": 0, "gap_ns": 0, "stream": 1, "duration_us": 1.0},
        {"seq": 1, "kind": "kernel", "t_ns": 0, "gap_ns": 0, "duration_us": 1.0},
    ])
    with pytest.raises(TraceFormatError) as info:
        simulate_traces([path], "h100-sxm", durations="measured")
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and "events[1].stream" in message


def test_bad_gap_is_named(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"format": "stepcast-trace", "version": 1, "rank": 0, "world_size": 1,
                                "hardware": "h100-sxm", "events": [
                                    {"seq": 0, "kind": "device_sync", "t_ns": 0, "gap_ns": "soon"}]}))
    with pytest.raises(TraceFormatError, match=r"rank0.json: events\[0\].gap_ns"):
        simulate_traces([path], "h100-sxm", durations="measured")


def test_simulate_traces_writes_report_and_timeline(tmp_path):
    b = builder()
    b.kernel(stream=1, duration_us=10.0)
    b.device_sync()
    b.iteration(1, end=True)
    path = write_trace(tmp_path / "rank0.json.gz", rank=0, world_size=1, hardware="h100-sxm", events=b.events,
                       meta=b.meta)
    report = simulate_traces([path], "h100-sxm", report_path=tmp_path / "out" / "report.json",
                             timeline_path=tmp_path / "out" / "timeline.json", durations="measured")
    assert json.loads((tmp_path / "out" / "report.json").read_text())["iteration_time_ms"] == \
        report["iteration_time_ms"] == pytest.approx(0.010)
    assert json.loads((tmp_path / "out" / "timeline.json").read_text())["traceEvents"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.json", "timeline.json"]


class RecordingEstimator(KernelEstimator):
    """Remembers the last frame it was asked about; 5 us per row."""

    name = "recording"

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        self.frame = frame.copy()
        return np.full(len(frame), 5.0)


@pytest.mark.parametrize(("nodes", "ranks_per_node"), [(1, 8), (2, 8), (4, 4)])
def test_collective_rows_know_the_topology(nodes, ranks_per_node):
    est = RecordingEstimator()
    b = builder(0, world_size=16)                 # h100-sxm nodes hold 8 GPUs
    b.collective(stream=1, comm_seq=0, nbytes=1 << 20)
    b.device_sync()
    report = run(b, durations="predicted", estimator=est, nodes=nodes)
    row = est.frame.iloc[0]
    assert (row["family"], row["op"], row["bytes"], row["ranks"]) == ("collective", "all_reduce", 1 << 20, 16)
    assert row["ranks_per_node"] == ranks_per_node and row["hardware"] == "h100-sxm"
    assert report["iteration_time_ms"] == pytest.approx(0.005)


def test_an_op_part_kernel_adds_no_predicted_time_and_is_no_fallback():
    est = CountingEstimator()
    b = builder()
    b.kernel(stream=1, spec=GEMM)                # the op call's first kernel: the op's predicted 10 us
    b.add("kernel", 0.0, stream=1, name="splitKreduce_kernel", grid=[1, 1, 1], block=[128, 1, 1], shmem=0,
          lib=None, duration_us=4.0, spec=None, op_part=True)
    b.device_sync()
    predicted = run(b, durations="predicted", estimator=est)
    assert predicted["iteration_time_ms"] == pytest.approx(10.0 / 1e3) and predicted["fallback_kernels"] == 0


@pytest.mark.parametrize(("field", "value"), [("duration_us", -3.0), ("stall_us", -1.0), ("gap_ns", -5)])
def test_a_negative_duration_stall_or_gap_is_rejected_naming_the_event(tmp_path, field, value):
    ok = {"seq": 0, "kind": "kernel", "t_ns": 0, "gap_ns": 0, "stream": 1, "duration_us": 1.0}
    bad = {**ok, "seq": 1, field: value}
    path = write_trace(tmp_path / "rank0.json", rank=0, world_size=1, hardware="h100-sxm", events=[ok, bad])
    with pytest.raises(TraceFormatError, match=rf"rank0.json: events\[1\].{field}: expected a non-negative"):
        simulate_traces([path], "h100-sxm", durations="measured")


def test_an_allocation_the_device_refused_does_not_count_toward_peak_memory():
    b = builder()
    b.malloc(ptr=1, nbytes=60 << 30)
    b.add("malloc", ptr=None, bytes=40 << 30, failed=True)   # out of memory: torch raises, nothing allocated
    b.free(ptr=1)
    report = run(b)
    assert report["peak_memory_bytes"] == 60 << 30


def test_a_send_names_its_peer_within_the_communicator():
    """Pipeline stages {0, 2} and {1, 3} of a 4-rank job: NCCL numbers the peer within the stage communicator, so
    rank 0 sends to 'peer 1' (global rank 2) and rank 2 receives from 'peer 0'."""
    builders = []
    for rank in range(4):
        b = builder(rank, world_size=4)
        comm, first = ("pp-a", rank == 0) if rank in (0, 2) else ("pp-b", rank == 1)
        op, peer = ("send", 1) if first else ("recv", 0)
        b.add("collective", stream=2, op=op, comm=comm, ranks=2, peer=peer, comm_rank=0 if first else 1,
              bytes=1 << 20, dtype="bf16", duration_us=10.0)
        b.device_sync()
        builders.append(b)
    report = run(*builders)
    assert report["collectives_matched"] == 2
    assert report["iteration_time_ms"] == pytest.approx(0.010)


def test_a_split_communicators_members_are_numbered_by_global_rank_when_the_log_does_not_say():
    """ncclCommSplit's communicators carry no comm_rank in the capture log (Megatron's pipeline groups {0, 2} and
    {1, 3} are only ever used for send/recv): members are numbered as torch.distributed.new_group orders them."""
    builders = []
    for rank in range(4):
        b = builder(rank, world_size=4)
        comm, first = ("pp-a", rank == 0) if rank in (0, 2) else ("pp-b", rank == 1)
        op, peer = ("send", 1) if first else ("recv", 0)
        b.add("collective", stream=2, op=op, comm=comm, ranks=2, peer=peer, bytes=1 << 20, dtype="bf16",
              duration_us=10.0)
        b.device_sync()
        builders.append(b)
    assert run(*builders)["collectives_matched"] == 2


def test_traces_recorded_on_another_gpu_are_simulated_with_a_line_naming_both():
    """A capture holds the kernels the libraries chose for the GPU it ran on: simulated on another catalogued GPU,
    the result says so (and where a trace names no catalogued GPU, or the same one, it says nothing)."""
    def doc(hardware: str) -> dict:
        b = builder()
        b.kernel(stream=1, duration_us=100.0)
        b.device_sync()
        b.iteration(1, end=True)
        return b.doc() | {"hardware": hardware}

    elsewhere = simulate([doc("t4")], "h100-sxm", durations="measured").warnings
    assert any(w.startswith("traces recorded on t4, simulated on h100-sxm") for w in elsewhere)
    for same in ("h100-sxm", "NVIDIA H100 (a real profile's name)"):
        assert not any("recorded on" in w for w in simulate([doc(same)], "h100-sxm", durations="measured").warnings)
