"""The search benchmark's spaces and its comparison with published runs (benchmarks/emulate/search.py), and the FSDP2
search script it searches (examples/llama_fsdp2.py): its settings change what the GPU is asked to do."""
from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.emulate.search import (
    BENCHMARK_OVERRIDES,
    PublishedRun,
    rank_agreement,
    torchtitan_published,
)
from stepcast.emulate.search.cli import load_config
from stepcast.emulate.search.space import Space
from stepcast.emulate.search.trials import TrialResult
from stepcast.profiling.paths import REPO_ROOT, shared_data_root


def test_the_megatron_benchmark_space_searches_pipeline_stages():
    space = Space(load_config("megatron_gpt", BENCHMARK_OVERRIDES))
    staged = [c for c in space.all_configs() if c["pp"] > 1 and space.broken_constraint(c) is None]
    assert staged, "no configuration with two or more pipeline stages passes the constraints"


def result(config: dict, tokens_per_s: float | None) -> TrialResult:
    if tokens_per_s is None:
        return TrialResult(config=config, status="oom", reason="out of memory")
    return TrialResult(config=config, status="ok", iteration_time_ms=1.0, tokens_per_s=tokens_per_s)


class Answers:
    """Stands in for the search's evaluator: a fixed result per configuration, and what it was asked."""

    jobs = 2

    def __init__(self, answers: dict[int, float | None]) -> None:
        self.answers, self.asked = answers, []

    def evaluate(self, config: dict) -> TrialResult:
        self.asked.append(config)
        return result(config, self.answers[config["x"]])


def test_rank_agreement_is_spearman_over_published_runs_the_evaluator_found_feasible():
    evaluator = Answers({1: 800.0, 2: 1600.0, 3: 2400.0, 4: None})
    published = [PublishedRun("a", 30.0, {"x": 1}), PublishedRun("b", 10.0, {"x": 2}),
                 PublishedRun("c", 20.0, {"x": 3}), PublishedRun("d", 5.0, {"x": 4}),
                 PublishedRun("e", 50.0, None, "context parallel 2")]
    pairs, rho = rank_agreement(evaluator, published, gpus=8)
    assert [p["predicted"] for p in pairs] == [100.0, 200.0, 300.0, None]   # tokens/s per GPU
    assert pairs[-1]["status"] == "oom" and len(evaluator.asked) == 4   # the inexpressible run is not evaluated
    assert rho == pytest.approx(-0.5)   # ranks (1, 2, 3) against (3, 1, 2)
    _, too_few = rank_agreement(Answers({1: 800.0, 2: 1600.0}), published[:2], gpus=8)
    assert too_few is None


@pytest.fixture
def published() -> list[PublishedRun]:
    runs = torchtitan_published(shared_data_root())
    if not runs:
        pytest.skip("torchtitan's published benchmarks are not under the shared data root (STEPCAST_SHARED_DATA)")
    return runs


def test_every_published_8_gpu_8b_run_without_context_parallelism_is_a_configuration_of_the_fsdp2_space(published):
    cfg = load_config("llama_fsdp2", [])
    space = Space(cfg)
    expressible = {run.label: run for run in published if run.config is not None}
    assert set(expressible) == {"Table 1: FSDP", "Table 1: FSDP + torch.compile",
                                "Table 1: FSDP + torch.compile + Float8", "Table 2: FSDP 8, CP 1"}
    for run in expressible.values():
        assert all(run.config[name] in choices for name, choices in cfg.space.items())
        assert space.broken_constraint(run.config) is None and run.tps_per_gpu > 0
    args, _ = space.script_command(expressible["Table 2: FSDP 8, CP 1"].config)
    assert {"--batch=1", "--seq=32768", "--micro-batch=1", "--ac=full", "--compile", "--float8"} <= set(args)
    args, _ = space.script_command(expressible["Table 1: FSDP"].config)
    assert {"--batch=2", "--seq=8192", "--ac=selective"} <= set(args) and not {"--compile", "--float8"} & set(args)
    reasons = {run.why_not for run in published if run.config is None}
    assert reasons == {"context parallel 2", "context parallel 4", "context parallel 8", "128 GPUs, not 8",
                       "not the 8B model"}


TINY = ["--layers=2", "--dim=64", "--heads=4", "--kv-heads=2", "--ffn=128", "--vocab=256", "--seq=32", "--steps=2"]


def collectives(trace: dict) -> Counter:
    """Collective calls of the whole run (same number of steps in every run compared) by operation."""
    return Counter(ev["op"] for ev in trace["events"] if ev["kind"] == "collective")


@pytest.mark.slow
def test_fsdp2_search_settings_change_the_gathers_and_reductions(tmp_path, emulate_run):
    """Resharding every block after forward gathers each again in backward; never resharding gathers once; two
    micro-batches run forward and backward twice (each reducing its gradients)."""
    script = REPO_ROOT / "examples" / "llama_fsdp2.py"
    runs = {}
    for name, extra in {"always": ["--reshard-after-forward=always", "--batch=2"],
                        "never": ["--reshard-after-forward=never", "--batch=2"],
                        "accumulate": ["--reshard-after-forward=never", "--batch=2", "--micro-batch=1"]}.items():
        proc, _, traces = emulate_run(tmp_path / name, script, *TINY, *extra, nproc=2)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name] = collectives(traces[0])
    assert runs["always"]["all_gather"] > runs["never"]["all_gather"]
    assert runs["accumulate"]["reduce_scatter"] == 2 * runs["never"]["reduce_scatter"]


def kernels(trace: dict) -> list[dict]:
    return [ev for ev in trace["events"] if ev["kind"] == "kernel"]


def fp8_matmuls(run: list[dict]) -> list[dict]:
    return [k for k in run if "_scaled_mm" in (k.get("op") or "")]


def triton_kernels(run: list[dict]) -> list[dict]:
    return [k for k in run if k["name"].startswith("triton_")]


@pytest.mark.slow
def test_compile_and_float8_flags_change_the_kernels_the_gpu_runs(tmp_path, emulate_run):
    """--compile runs each block as Triton kernels; --float8 runs the block linears as fp8 _scaled_mm (torchao's
    Float8Linear), which the compiled run without it never does."""
    pytest.importorskip("torchao")
    script = REPO_ROOT / "examples" / "llama_fsdp2.py"
    runs = {}
    for name in ("compile", "float8"):
        proc, _, traces = emulate_run(tmp_path / name, script, *TINY, f"--{name}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name] = kernels(traces[0])
    assert triton_kernels(runs["compile"]) and not fp8_matmuls(runs["compile"])
    assert fp8_matmuls(runs["float8"]) and not triton_kernels(runs["float8"])


def toy_space(tmp_path):
    from stepcast.emulate.search.space import parse_config

    script = tmp_path / "train.py"
    script.write_text("print('a training script')\n")
    return Space(parse_config({"name": "toy", "script": str(script), "gpus": 8,
                               "space": {"ac": ["full", "none"], "micro_batch": [1, 2]},
                               "speed": {"monotone": {"ac": "increasing", "micro_batch": "increasing"}},
                               "args": ["--ac={ac}", "--mb={micro_batch}"]}, "toy.yaml"))


def test_replay_answers_only_what_the_grid_pruned_and_as_out_of_memory_never_cached(tmp_path):
    from benchmarks.emulate.search import replay_runner
    from stepcast.emulate.search.samplers import SearchOutcome

    space = toy_space(tmp_path)
    grid = SearchOutcome(sampler="grid", trials=[
        TrialResult(config={"ac": "none", "micro_batch": 2}, status="pruned", reason="needs at least the memory of x"),
        TrialResult(config={"ac": "none", "micro_batch": 1}, status="oom", reason="out of memory")])
    runner = replay_runner(space, grid)
    doc = runner(None, ["--ac=none", "--mb=2"], {}, None)
    assert doc["status"] == "oom" and doc["transient"] and "needs at least the memory of x" in doc["reason"]
    with pytest.raises(RuntimeError, match="neither in the trial cache nor pruned by the grid"):
        runner(None, ["--ac=none", "--mb=1"], {}, None)


def test_speed_declaration_counts_as_contradicted_only_beyond_2_percent(tmp_path):
    from benchmarks.emulate.search import speed_contradicted
    from stepcast.emulate.search.samplers import SearchOutcome

    space = toy_space(tmp_path)
    ruler = result({"ac": "none", "micro_batch": 1}, 1000.0)
    pruned = TrialResult(config={"ac": "full", "micro_batch": 1}, status="pruned", reason="speed.monotone: ...")
    run = SearchOutcome(sampler="cmaes", trials=[ruler, pruned])
    key = '{"ac": "full", "micro_batch": 1}'
    assert speed_contradicted(pruned, run, {key: result(pruned.config, 1030.0)}, space)     # 3 % faster
    assert not speed_contradicted(pruned, run, {key: result(pruned.config, 1010.0)}, space)  # a tie in the noise
    assert not speed_contradicted(pruned, run, {key: result(pruned.config, None)}, space)    # did not fit anyway
