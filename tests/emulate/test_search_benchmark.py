"""The search benchmark's spaces and its comparison with published runs (emulate/search_benchmark.py), and the FSDP2
search script it searches (examples/llama_fsdp2.py): its settings change what the GPU is asked to do."""
from __future__ import annotations

from collections import Counter

import pytest

from emulate.search.cli import load_config
from emulate.search.samplers import SearchOutcome
from emulate.search.space import Space
from emulate.search.trials import TrialResult
from emulate.search_benchmark import BENCHMARK_OVERRIDES, rank_agreement, torchtitan_published
from profiling.paths import REPO_ROOT, shared_data_root


def test_the_megatron_benchmark_space_searches_pipeline_stages():
    space = Space(load_config("megatron_gpt", BENCHMARK_OVERRIDES))
    staged = [c for c in space.all_configs() if c["pp"] > 1 and space.broken_constraint(c) is None]
    assert staged, "no configuration with two or more pipeline stages passes the constraints"


def result(config: dict, tokens_per_s: float | None) -> TrialResult:
    if tokens_per_s is None:
        return TrialResult(config=config, status="oom", reason="out of memory")
    return TrialResult(config=config, status="ok", iteration_time_ms=1.0, tokens_per_s=tokens_per_s)


def test_rank_agreement_is_spearman_over_published_configurations_the_search_found_feasible():
    outcome = SearchOutcome(sampler="grid", trials=[result({"x": 1}, 800.0), result({"x": 2}, 1600.0),
                                                    result({"x": 3}, 2400.0), result({"x": 4}, None)])
    published = [({"x": 1}, 30.0, "a"), ({"x": 2}, 10.0, "b"), ({"x": 3}, 20.0, "c"), ({"x": 4}, 5.0, "d")]
    pairs, rho = rank_agreement(outcome, published, gpus=8)
    assert [p["predicted"] for p in pairs] == [100.0, 200.0, 300.0, None]   # tokens/s per GPU
    assert rho == pytest.approx(-0.5)   # ranks (1, 2, 3) against (3, 1, 2)
    _, too_few = rank_agreement(outcome, published[:2], gpus=8)
    assert too_few is None


def test_the_published_torchtitan_run_is_a_configuration_of_the_fsdp2_search_space():
    published = torchtitan_published(shared_data_root())
    if not published:
        pytest.skip("torchtitan's published benchmarks are not under the shared data root (STEPCAST_SHARED_DATA)")
    space = Space(load_config("llama_fsdp2", []))
    for config, tps, _ in published:
        assert config in space.all_configs() and space.broken_constraint(config) is None
        assert tps > 0


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
