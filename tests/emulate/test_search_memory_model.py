"""The learned memory model (emulate/search/memory_model.py) and how the search uses it: it predicts only what the
trials so far determine, the search rules out what it predicts will not fit before emulating it, and its error is
measured against what the trials then showed."""
from __future__ import annotations

from pathlib import Path

import pytest

from stepcast.emulate.search.memory_model import GIB, MemoryModel, model_errors
from stepcast.emulate.search.samplers import Search
from stepcast.emulate.search.space import SearchConfigError, parse_config
from stepcast.emulate.search.trials import Target, TrialCache, TrialResult

TARGET = Target(hardware="h100-sxm", spec_json="{}", nproc=8, nodes=1, memory_gib=80.0)
STATIC = {"always": 20.0, "never": 40.0}
PER_SEQUENCE = {"full": 10.0, "none": 30.0}


def peak_gib(reshard: str, ac: str, mb: int) -> float:
    return STATIC[reshard] + mb * PER_SEQUENCE[ac]


class LinearMemoryRunner:
    """A stand-in emulator whose peak memory is exactly static[reshard] + mb * per_sequence[ac] GiB."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, script, args, env, target, timeout_s=None):
        self.calls.append(args)
        reshard, ac, mb = (a.split("=")[1] for a in args)
        peak = peak_gib(reshard, ac, int(mb))
        if peak > target.memory_gib:
            return {"status": "oom", "reason": "rank0: CUDA out of memory", "emulation_s": 1.0}
        return {"status": "ok", "iteration_time_ms": 100.0 / int(mb), "peak_memory_bytes": int(peak * GIB),
                "emulation_s": 1.0}


@pytest.fixture
def doc(tmp_path: Path) -> dict:
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    return {"name": "toy", "script": str(script), "gpus": 8,
            "space": {"reshard": ["always", "never"], "ac": ["full", "none"], "micro_batch": [1, 2, 3]},
            "memory": {"model": {"scale": "micro_batch", "static": ["reshard"], "per_unit": ["ac"], "margin": 0.0}},
            "args": ["--reshard={reshard}", "--ac={ac}", "--mb={micro_batch}"]}


def config(reshard: str, ac: str, mb: int) -> dict:
    return {"reshard": reshard, "ac": ac, "micro_batch": mb}


def test_the_model_predicts_only_configurations_the_trials_determine():
    model = MemoryModel("micro_batch", ["reshard"], ["ac"])
    model.observe(config("always", "full", 1), peak_gib("always", "full", 1) * GIB)
    assert model.predict(config("always", "full", 2)) is None       # one micro-batch: static and slope not apart
    model.observe(config("always", "full", 2), peak_gib("always", "full", 2) * GIB)
    assert model.predict(config("always", "full", 3)).peak_gib == pytest.approx(50.0)
    assert model.predict(config("always", "none", 1)) is None       # no trial with ac=none
    assert model.predict(config("never", "full", 1)) is None        # no trial with reshard=never
    model.observe(config("never", "full", 1), peak_gib("never", "full", 1) * GIB)
    model.observe(config("always", "none", 1), peak_gib("always", "none", 1) * GIB)
    assert model.predict(config("never", "none", 2)).peak_gib == pytest.approx(100.0)


def test_search_rules_out_what_the_model_predicts_will_not_fit_without_emulating_it(doc, tmp_path):
    runner = LinearMemoryRunner()
    search = Search(parse_config(doc, "toy.yaml"), TARGET, TrialCache(tmp_path / "cache"), runner=runner)
    for c in (config("always", "full", 1), config("always", "full", 2), config("never", "full", 1),
              config("always", "none", 1)):
        assert search.evaluate(c).feasible
    result = search.evaluate(config("never", "none", 2))             # 100 GiB predicted, 80 GiB on the target
    assert result.status == "pruned" and result.reason.startswith("memory model: predicted peak 100.0 GiB")
    assert len(runner.calls) == 4
    fits = search.evaluate(config("never", "full", 3))               # 70 GiB predicted: emulated, and it fits
    assert fits.feasible and fits.predicted_peak_gib == pytest.approx(70.0) and len(runner.calls) == 5


def test_the_exhaustive_reference_keeps_only_the_exact_checks(doc, tmp_path):
    runner = LinearMemoryRunner()
    outcome = Search(parse_config(doc, "toy.yaml"), TARGET, TrialCache(tmp_path / "cache"), runner=runner,
                     learned_memory=False).run(sampler="grid")
    assert outcome.model_pruned == 0 and len(runner.calls) == 12


def test_model_errors_compare_predictions_with_what_the_trials_showed():
    trials = [TrialResult(config={}, status="ok", peak_memory_bytes=50 * GIB, predicted_peak_gib=45.0),
              TrialResult(config={}, status="ok", peak_memory_bytes=40 * GIB, predicted_peak_gib=42.0),
              TrialResult(config={}, status="ok", peak_memory_bytes=40 * GIB),        # nothing predicted
              TrialResult(config={}, status="oom", predicted_peak_gib=70.0),          # said it fits: a miss
              TrialResult(config={}, status="pruned", predicted_peak_gib=95.0)]
    errors = model_errors(trials, memory_gib=80.0)
    assert errors.predicted == 2 and errors.worst_error == pytest.approx(-0.1)
    assert errors.median_abs_error == pytest.approx(0.075)
    assert errors.oom_predicted_to_fit == 1 and errors.model_pruned == 1


def test_a_model_over_a_name_outside_the_space_is_one_line(doc):
    doc["memory"]["model"]["per_unit"] = ["recompute"]
    with pytest.raises(SearchConfigError, match=r"memory.model.per_unit: recompute is not a parameter of the space"):
        parse_config(doc, "toy.yaml")
    doc["memory"]["model"] = {"scale": "ac"}
    with pytest.raises(SearchConfigError, match=r"memory.model.scale: ac choices must be numbers"):
        parse_config(doc, "toy.yaml")
