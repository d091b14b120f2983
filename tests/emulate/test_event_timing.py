"""Event timing under the capture: elapsed times between recorded events are the predicted device time of the work
between them (emulate/event_timing.py), so autotuners choose as the estimator predicts; else the nominal clock."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from stepcast.emulate.event_timing import KEEP_WORK, EventTiming, WorkLog, _ranks_per_node, gemm_row
from stepcast.emulate.report import predicted_event_timings

# ---- the log reader ---------------------------------------------------------------------------------------------

def _record(event: str, **fields) -> dict:
    return {"event": event, "t": 0, "gap": 0, "thread": 0, "op": -1, "call": 0, **fields}


def _launch(grid: list[int], stream: int) -> dict:
    return _record("launch", name="gemm_kernel", grid=grid, block=[128, 1, 1], smem=0, cluster=[1, 1, 1],
                   stream=stream, device=0, via="cuLaunchKernel")


RECORDS = [
    _record("event_record", handle=1, stream=1),          # event 1 recorded on the legacy stream
    _launch([1, 1, 1], 1),
    _launch([1, 1, 1], 5),                                 # another stream: not timed
    _record("memset", stream=1, bytes=4096, blocking=0),
    _record("event_record", handle=2, stream=1),          # event 2
    _launch([2, 1, 1], 1),
    _record("event_record", handle=1, stream=1),          # event 1 again
]


def _text(records: list[dict]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


def _log(tmp_path: Path, text: str) -> WorkLog:
    path = tmp_path / "rank0.log.driver.1.jsonl"
    path.write_text(text)
    log = WorkLog(path)
    log.read()
    return log


def test_work_between_two_events_is_the_device_work_on_the_start_events_stream(tmp_path):
    log = _log(tmp_path, _text(RECORDS[:-1]))
    records, sign = log.between(1, 2)
    assert [(r["event"], r["stream"]) for r in records] == [("launch", 1), ("memset", 1)]
    assert sign == 1


def test_an_event_recorded_again_is_timed_from_its_latest_record(tmp_path):
    log = _log(tmp_path, _text(RECORDS))
    records, sign = log.between(2, 1)      # 2 at its only record, 1 at its second: one kernel between
    assert [r["grid"] for r in records] == [[2, 1, 1]]
    assert sign == 1
    assert log.between(1, 2)[1] == -1      # end recorded before start: a negative interval, as CUDA gives


def test_lines_arriving_in_pieces_are_read_once_complete(tmp_path):
    path = tmp_path / "rank0.log.driver.1.jsonl"
    text = _text(RECORDS)
    path.write_text(text[:100])   # the writer stopped inside a line
    log = WorkLog(path)
    log.read()
    path.write_text(text)
    log.read()
    assert len(log.work) == 4
    assert log.between(2, 1)[0][0]["grid"] == [2, 1, 1]


def test_an_unrecorded_event_or_forgotten_work_gets_no_answer(tmp_path):
    log = _log(tmp_path, _text(RECORDS))
    assert log.between(1, 99) is None
    log.base = 10   # the work before these records left memory
    assert log.between(2, 1) is None


def test_the_reader_keeps_a_bounded_window_of_work(tmp_path):
    fill = _record("memset", stream=1, bytes=64, blocking=0)
    records = [_record("event_record", handle=1, stream=1), *[fill] * (KEEP_WORK + 10),
               _record("event_record", handle=2, stream=1)]
    log = _log(tmp_path, _text(records))
    assert len(log.work) <= KEEP_WORK
    assert 1 not in log.latest and log.between(1, 2) is None


def test_collectives_and_their_communicators_are_read_too(tmp_path):
    records = [{"event": "comm", "comm": "nccl-1", "nranks": 2, "rank": 1},
               _record("event_record", handle=7, stream=3),
               _record("collective", stream=3, coll="all_reduce", comm="nccl-1", seq=0, nranks=2, peer=-1,
                       count=16, dtype=7, group=0),
               _record("event_record", handle=8, stream=3)]
    log = _log(tmp_path, _text(records))
    found, sign = log.between(7, 8)
    assert [r["event"] for r in found] == ["collective"] and sign == 1
    assert log.comms == {"nccl-1": (2, 1)}


class _Driver:
    def stepcast_pause(self) -> None: ...
    def stepcast_resume(self) -> None: ...


def test_a_failing_prediction_leaves_the_nominal_answer_and_warns_once(tmp_path, capsys):
    timing = EventTiming(_Driver(), _log(tmp_path, _text(RECORDS)), None)

    def broken(events):
        raise RuntimeError("no estimator here")

    timing._assign = broken
    out = [-1.0]
    assert timing.answer(2, 1, 0.001, out) == 1 and out == [-1.0]
    assert timing.answer(2, 1, 0.001, out) == 1
    assert capsys.readouterr().err.count("no estimator here") == 1
    assert timing.summary()["nominal"] == 2 and timing.summary()["predicted"] == 0


def test_the_report_sums_the_ranks_event_timings(tmp_path):
    programs = []
    for rank in (0, 1):
        trace = tmp_path / f"rank{rank}.trace.json"
        trace.write_text("{}")
        (tmp_path / f"rank{rank}.log.events.json").write_text(json.dumps(
            {"queries": 3, "predicted": 2, "nominal": 1, "callers": {"triton.autotune": 3},
             "choices": [{"tuner": "triton.autotune", "kernel": "k", "chosen": "BLOCK: 1024"}]}))
        programs.append(SimpleNamespace(source=str(trace), rank=rank))
    got = predicted_event_timings(programs)
    assert (got["queries"], got["predicted"], got["nominal"]) == (6, 4, 2)
    assert got["callers"] == {"triton.autotune": 6}
    assert got["choices"] == [{"tuner": "triton.autotune", "kernel": "k", "chosen": "BLOCK: 1024"}]
    assert predicted_event_timings([SimpleNamespace(source="<trace 0>", rank=0)]) is None


# ---- scripts under the capture ----------------------------------------------------------------------------------

GEMMS = textwrap.dedent("""
    import torch
    big = torch.randn(4096, 4096, device="cuda")
    small = torch.randn(256, 256, device="cuda")

    def timed(x):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(x, x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    print("ELAPSED", timed(big), timed(small))
""")


def _elapsed(proc) -> list[float]:
    line = next(line for line in proc.stdout.splitlines() if line.startswith("ELAPSED"))
    return [float(v) for v in line.split()[1:]]


def _simulated_between_records(trace: dict) -> list[float]:
    """The simulator's own predicted time (ms) of the device work between consecutive pairs of event records on
    the start record's stream, from the whole collated trace."""
    from stepcast import estimator
    from stepcast.emulate.sim.durations import assign_durations
    from stepcast.emulate.sim.program import build_program
    from stepcast.profiling.hardware import lookup

    events = list(trace["events"])
    times = assign_durations([build_program(trace, "<trace>")], lookup("h100-sxm"), "predicted",
                             estimator.load(None), 1).us[0]
    records = [i for i, ev in enumerate(events) if ev["kind"] == "event_record"]
    out = []
    for a, b in zip(records[0::2], records[1::2]):
        stream = events[a]["stream"]
        out.append(sum(times[i] for i in range(a + 1, b) if events[i]["kind"] in ("kernel", "memcpy", "memset")
                       and events[i]["stream"] == stream) / 1e3)
    return out


@pytest.mark.slow
def test_event_timed_gemms_get_the_simulators_predicted_times(emulate_run, tmp_path):
    script = tmp_path / "gemms.py"
    script.write_text(GEMMS)
    proc, doc, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    big, small = _elapsed(proc)
    assert [big, small] == pytest.approx(_simulated_between_records(traces[0]), rel=1e-4)
    assert big > 50 * small   # 4096^3 against 256^3: not one nominal microsecond a launch
    summary = json.loads((tmp_path / "traces" / "rank0.log.events.json").read_text())
    assert (summary["queries"], summary["predicted"]) == (2, 2)
    assert summary["callers"] == {"gemms.py:timed": 2}


@pytest.mark.slow
def test_with_event_timing_off_elapsed_times_are_nominal(emulate_run, tmp_path, monkeypatch):
    monkeypatch.setenv("STEPCAST_EVENT_TIMING", "nominal")
    script = tmp_path / "gemms.py"
    script.write_text(GEMMS)
    proc, _, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = traces[0]["events"]
    records = [i for i, ev in enumerate(events) if ev["kind"] == "event_record"]
    pieces = [sum(1 for ev in events[a + 1:b] if ev["kind"] in ("kernel", "memcpy", "memset"))
              for a, b in zip(records[0::2], records[1::2])]
    assert pieces[0] >= 1 and pieces[1] >= 1  # the GEMM's kernels (cuBLASLt may add a split-K reduction)
    assert _elapsed(proc) == pytest.approx([n * 1e-3 for n in pieces])   # a nominal microsecond a piece
    assert not (tmp_path / "traces" / "rank0.log.events.json").exists()


AUTOTUNE = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    # the config the estimator times slower comes first: on a tie (the nominal clock) the autotuner keeps it
    CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 1024}, num_warps=4)]

    # named as Inductor names a pointwise kernel, so that the simulator times it from its grid
    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit
    def triton_poi_fused_add_0(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

    x = torch.randn(1 << 24, device="cuda")
    out = torch.empty_like(x)
    triton_poi_fused_add_0[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    torch.cuda.synchronize()
    print("CHOSEN", triton_poi_fused_add_0.best_config.kwargs["BLOCK"])
""")


@pytest.mark.slow
def test_triton_autotune_keeps_the_config_the_estimator_predicts_faster(emulate_run, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from stepcast import estimator
    from stepcast.emulate.sim.durations import assign_durations
    from stepcast.emulate.sim.program import build_program
    from stepcast.profiling.hardware import lookup

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    script = tmp_path / "autotune.py"
    script.write_text(AUTOTUNE)
    proc, _, traces = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    chosen = int(next(line for line in proc.stdout.splitlines() if line.startswith("CHOSEN")).split()[1])
    events = list(traces[0]["events"])
    times = assign_durations([build_program(traces[0], "<trace>")], lookup("h100-sxm"), "predicted",
                             estimator.load(None), 1).us[0]
    by_block = {(1 << 24) // ev["grid"][0]: times[i] for i, ev in enumerate(events)
                if ev["kind"] == "kernel" and ev["name"] == "triton_poi_fused_add_0"}
    assert set(by_block) == {64, 1024} and by_block[64] != by_block[1024]
    assert chosen == min(by_block, key=by_block.get)
    # emulate/quick_bench.py: each configuration's loop is its first call, five estimate runs, one warm-up and one
    # timed repeat (hundreds of each, sized by the estimate, before); then the chosen configuration's launch
    launches = sum(1 for ev in events if ev["kind"] == "kernel" and ev["name"] == "triton_poi_fused_add_0")
    assert launches == 2 * 8 + 1
    summary = json.loads((tmp_path / "traces" / "rank0.log.events.json").read_text())
    assert summary["predicted"] == summary["queries"] > 0
    assert set(summary["callers"]) == {"triton.autotune"}
    assert [(c["tuner"], c["kernel"], f"BLOCK: {chosen}," in c["chosen"]) for c in summary["choices"]] == \
        [("triton.autotune", "triton_poi_fused_add_0", True)]


def _tensor(*shape: int, dtype: str = "torch.float16") -> SimpleNamespace:
    return SimpleNamespace(shape=shape, dtype=dtype)


def test_a_gemm_templates_benchmark_is_timed_as_the_gemm_it_computes():
    row = gemm_row((_tensor(64, 32), _tensor(32, 16)), _tensor(64, 16))
    assert row == {"family": "gemm", "dtype": "fp16", "m": 64, "n": 16, "k": 32, "batch": 1}
    batched = gemm_row((_tensor(8, 16), _tensor(4, 64, 32), _tensor(4, 32, 16)), _tensor(4, 64, 16))
    assert (batched["m"], batched["k"], batched["batch"]) == (64, 32, 4)
    assert gemm_row((_tensor(64, 32), _tensor(16, 16)), _tensor(64, 16)) is None   # no B [K, N]
    assert gemm_row((_tensor(64, 16),), _tensor(64, 16)) is None


def test_the_emulated_gpus_name_finds_the_hardware_the_run_targets():
    """The predictor knows the target only by the name the launcher gives the virtual GPU (STEPCAST_GPU_NAME)."""
    from stepcast.emulate.driver.device import driver_environment
    from stepcast.profiling.hardware import lookup
    from stepcast.profiling.paths import REPO_ROOT

    gpus = [lookup(p.stem) for p in sorted((REPO_ROOT / "conf" / "hardware").glob("*.yaml"))]
    gpus = [spec for spec in gpus if spec.kind == "gpu" and spec.compute_capability is not None]
    assert len(gpus) > 5
    for spec in gpus:
        assert lookup(driver_environment(spec, 1)["STEPCAST_GPU_NAME"]).id == spec.id


@pytest.mark.parametrize(("gpu_name", "domain"), [("NVIDIA GB200", 72), ("NVIDIA H100 80GB HBM3", 4)])
def test_event_timing_places_collectives_on_the_nvlink_domain_of_the_emulated_gpu(monkeypatch, gpu_name, domain):
    # what the launcher sets for --nproc 4 --nodes 2 (torchrun's sizes) and the driver for the target
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("STEPCAST_GPU_NAME", gpu_name)
    assert _ranks_per_node() == domain  # two GB200 trays are one rack's domain; two H100 hosts are two


@pytest.mark.slow
def test_inductors_autotuning_asks_one_estimation_and_one_timed_run_a_configuration(emulate_run, tmp_path,
                                                                                    monkeypatch):
    """emulate/quick_bench.py on Inductor's own loop: the compiled MLP's kernels are tuned on two queries a
    configuration (2,730 queries for its 13 choices before, about 105 a configuration). Fresh caches: a cached
    choice would ask nothing."""
    from stepcast.profiling.paths import REPO_ROOT

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    proc, _, _ = emulate_run(tmp_path, REPO_ROOT / "examples" / "compat" / "compiled_mlp.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "traces" / "rank0.log.events.json").read_text())
    tuned = [c for c in summary["choices"] if c["tuner"] == "inductor.triton_configs"]
    assert tuned and summary["predicted"] == summary["queries"] <= 2 * 4 * len(tuned)  # up to 4 configs a kernel
