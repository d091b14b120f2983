"""Configuration search (emulate/search): constraints and pruning, the trial cache and resuming, the samplers, the
no-feasible line. The evaluator is a stand-in runner here (an analytic step time), so these run in seconds; the
real emulations (out-of-memory trials, MLflow) are in test_search_emulated.py."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from stepcast.emulate.search.samplers import INFEASIBLE_COST, Search, no_feasible_reason
from stepcast.emulate.search.space import Space, SearchConfigError, parse_config
from stepcast.emulate.search.trials import Target, TrialCache, TrialInterrupted, trial_key

SCRIPT = "print('a training script')\n"
TARGET = Target(hardware="h100-sxm", spec_json="{}", nproc=8, nodes=1, memory_gib=80.0)


def config_doc(script: Path, **changes) -> dict:
    doc = {"name": "toy", "script": str(script), "gpus": 8,
           "fixed": {"global_batch": 16},
           "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "micro_batch": [1, 2, 4, 8]},
           "derived": {"dp": "gpus // (tp * pp)"},
           "constraints": ["tp * pp * dp == gpus", "global_batch % (micro_batch * dp) == 0"],
           "args": ["--tp={tp}", "--pp={pp}", "--mb={micro_batch}"],
           "tokens_per_step": "global_batch * 1024"}
    doc.update(changes)
    return doc


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


class FakeRunner:
    """Answers like the emulator would, from the script arguments: a step time with a unique optimum at
    tp=2, pp=2, micro_batch=4, and out of memory when micro_batch > tp x pp."""

    def __init__(self, interrupt_at: int | None = None, delay_s: float = 0.0) -> None:
        self.calls: list[list[str]] = []
        self.interrupt_at, self.delay_s = interrupt_at, delay_s
        self.lock = threading.Lock()

    def __call__(self, script, args, env, target, timeout_s=None):
        with self.lock:
            if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
                raise TrialInterrupted(15)
            self.calls.append(args)
        time.sleep(self.delay_s)
        tp, pp, mb = (int(a.split("=")[1]) for a in args)
        if mb > tp * pp:
            return {"status": "oom", "reason": "rank0: CUDA out of memory", "emulation_s": 1.0}
        ms = 10.0 + 3.0 * abs(tp - 2) + 4.0 * abs(pp - 2) + 2.0 * abs(mb - 4)
        return {"status": "ok", "iteration_time_ms": ms, "peak_memory_bytes": mb * 2**30, "emulation_s": 1.0}


def search(doc: dict, tmp_path: Path, runner: FakeRunner, jobs: int = 1) -> Search:
    return Search(parse_config(doc, "toy.yaml"), TARGET, TrialCache(tmp_path / "cache"), jobs=jobs, runner=runner)


def test_constraints_rule_configurations_out_before_emulation(script, tmp_path):
    runner = FakeRunner()
    outcome = search(config_doc(script), tmp_path, runner).run(sampler="grid")
    space = Space(parse_config(config_doc(script), "toy.yaml"))
    emulated = [dict(zip(("tp", "pp", "micro_batch"), (int(a.split("=")[1]) for a in args))) for args in runner.calls]
    assert emulated and all(space.broken_constraint(c) is None for c in emulated)
    pruned = [t for t in outcome.trials if t.status == "pruned"]
    assert {"tp": 4, "pp": 4, "micro_batch": 1} in [t.config for t in pruned]  # tp*pp = 16 > 8 GPUs
    assert all(t.reason.startswith(("constraint", "needs at least the memory")) for t in pruned)
    assert len(outcome.trials) == space.size()


def test_memory_lower_bound_prunes_without_emulating(script, tmp_path):
    doc = config_doc(script, memory={"lower_bound_gib": "120 / (tp * pp)"})  # fits only when tp * pp >= 2
    runner = FakeRunner()
    outcome = search(doc, tmp_path, runner).run(sampler="grid")
    assert all(not a[0].endswith("=1") or not a[1].endswith("=1") for a in runner.calls)
    assert any(t.reason and t.reason.startswith("memory lower bound 120.0 GiB > 80 GiB") for t in outcome.trials)


def test_configuration_needing_more_memory_than_an_oom_one_is_pruned(script, tmp_path):
    doc = config_doc(script, memory={"monotone": {"micro_batch": "increasing"}},
                     space={"tp": [1], "pp": [1], "micro_batch": [1, 2, 4, 8]},
                     constraints=[], derived={"dp": "8"})
    runner = FakeRunner()
    s = search(doc, tmp_path, runner)
    assert s.evaluate({"tp": 1, "pp": 1, "micro_batch": 4}).status == "oom"
    result = s.evaluate({"tp": 1, "pp": 1, "micro_batch": 8})
    assert result.status == "pruned" and "ran out of memory" in result.reason
    assert s.evaluate({"tp": 1, "pp": 1, "micro_batch": 2}).status == "oom"  # below: emulated, not assumed
    assert s.evaluate({"tp": 1, "pp": 1, "micro_batch": 1}).status == "ok"
    assert len(runner.calls) == 3


def test_a_configuration_changing_a_fixed_value_is_not_pruned_by_an_oom_one_without_the_change(script, tmp_path):
    """A published run evaluated beside the space (a longer sequence, a smaller batch) is its own workload: an
    out-of-memory configuration at the fixed values says nothing about it."""
    doc = config_doc(script, memory={"monotone": {"micro_batch": "increasing"}},
                     space={"tp": [1], "pp": [1], "micro_batch": [1, 2, 4, 8]}, constraints=[], derived={"dp": "8"})
    space = Space(parse_config(doc, "toy.yaml"))
    oom = {"tp": 1, "pp": 1, "micro_batch": 2}
    assert space.dominates_oom({"tp": 1, "pp": 1, "micro_batch": 4}, oom)
    assert not space.dominates_oom({"tp": 1, "pp": 1, "micro_batch": 4, "global_batch": 8}, oom)
    assert space.rule_out({"tp": 1, "pp": 1, "micro_batch": 4, "global_batch": 8}, 80.0, [oom]) is None


def test_configuration_no_faster_than_a_feasible_one_is_pruned_when_speed_is_declared_monotone(script, tmp_path):
    """speed.monotone: a smaller micro-batch than one that fits cannot be faster, so it is not emulated; a larger
    one, or one differing in an undeclared parameter, still is; the exhaustive reference ignores the declaration."""
    from stepcast.emulate.search.samplers import SearchOutcome
    from stepcast.emulate.search.space import SPEED_PRUNED

    doc = config_doc(script, speed={"monotone": {"micro_batch": "increasing"}},
                     space={"tp": [1, 2], "pp": [2], "micro_batch": [1, 2, 4]}, constraints=[], derived={"dp": "2"})
    runner = FakeRunner()
    s = search(doc, tmp_path, runner)
    outcome = SearchOutcome(sampler="test")
    assert s.evaluate({"tp": 2, "pp": 2, "micro_batch": 2}, outcome).status == "ok"
    below = s.evaluate({"tp": 2, "pp": 2, "micro_batch": 1}, outcome)
    assert below.status == "pruned" and below.reason == f"{SPEED_PRUNED} tp=2 pp=2 micro_batch=2, which fits"
    assert s.evaluate({"tp": 2, "pp": 2, "micro_batch": 4}, outcome).status == "ok"
    assert s.evaluate({"tp": 1, "pp": 2, "micro_batch": 1}, outcome).status == "ok"   # tp is not declared
    assert len(runner.calls) == 3 and (outcome.pruned, outcome.speed_pruned) == (1, 1)
    exact = Search(parse_config(doc, "toy.yaml"), TARGET, TrialCache(tmp_path / "exact"), runner=FakeRunner(),
                   speed_pruning=False)
    exact.evaluate({"tp": 2, "pp": 2, "micro_batch": 2})
    assert exact.evaluate({"tp": 2, "pp": 2, "micro_batch": 1}).status == "ok"
    with pytest.raises(SearchConfigError, match=r"toy.yaml: config: speed.monotone.ac: not a parameter of the space"):
        parse_config(config_doc(script, speed={"monotone": {"ac": "increasing"}}), "toy.yaml")


def test_flags_pass_their_switch_only_when_true(script):
    doc = config_doc(script, space={"tp": [1, 2], "pp": [1], "micro_batch": [1], "compile": [False, True]},
                     fixed={"global_batch": 16, "float8": True}, flags={"compile": "--compile", "float8": "--float8"})
    space = Space(parse_config(doc, "toy.yaml"))
    on, _ = space.script_command({"tp": 1, "pp": 1, "micro_batch": 1, "compile": True})
    off, _ = space.script_command({"tp": 1, "pp": 1, "micro_batch": 1, "compile": False})
    assert on == ["--tp=1", "--pp=1", "--mb=1", "--compile", "--float8"] and off == on[:3] + ["--float8"]
    with pytest.raises(SearchConfigError, match=r"toy.yaml: config: flags.tp: expected true/false choices"):
        parse_config(config_doc(script, flags={"tp": "--tp"}), "toy.yaml")
    with pytest.raises(SearchConfigError, match=r"flags.fp8: not a parameter of the space or a fixed value"):
        parse_config(config_doc(script, flags={"fp8": "--fp8"}), "toy.yaml")


def test_out_of_memory_trials_are_infeasible_and_never_best(script, tmp_path):
    outcome = search(config_doc(script), tmp_path, FakeRunner()).run(sampler="grid")
    assert outcome.infeasible > 0
    assert outcome.best().config == {"tp": 2, "pp": 2, "micro_batch": 4}
    assert outcome.best().tokens_per_s == pytest.approx(16 * 1024 / 0.010)


def test_repeated_search_emulates_nothing(script, tmp_path):
    first = FakeRunner()
    a = search(config_doc(script), tmp_path, first).run(sampler="grid")
    again = FakeRunner()
    b = search(config_doc(script), tmp_path, again).run(sampler="grid")
    assert first.calls and again.calls == []
    assert b.cache_hits == b.evaluations == a.evaluations and b.emulated == 0
    assert b.best().config == a.best().config


def test_cache_key_follows_script_content_and_estimator(script):
    key = trial_key(script, ["--tp=1"], {}, TARGET, "est-1")
    assert trial_key(script, ["--tp=1"], {}, TARGET, "est-2") != key
    assert trial_key(script, ["--tp=2"], {}, TARGET, "est-1") != key
    script.write_text(SCRIPT + "# changed\n")
    assert trial_key(script, ["--tp=1"], {}, TARGET, "est-1") != key


def test_interrupted_search_resumes_from_its_cache(script, tmp_path):
    doc = config_doc(script)
    broken = FakeRunner(interrupt_at=3)
    with pytest.raises(TrialInterrupted):
        search(doc, tmp_path, broken).run(sampler="grid")
    assert len(broken.calls) == 3
    resumed = FakeRunner()
    outcome = search(doc, tmp_path, resumed).run(sampler="grid")
    done_before = {tuple(c) for c in broken.calls}
    assert not done_before & {tuple(c) for c in resumed.calls}
    assert outcome.cache_hits == 3 and outcome.emulated == len(resumed.calls)
    full = search(doc, tmp_path / "fresh", FakeRunner()).run(sampler="grid")
    assert outcome.evaluations == full.evaluations


@pytest.mark.parametrize("sampler", ["cmaes", "random", "grid"])
def test_each_sampler_chooses_from_the_space(script, tmp_path, sampler):
    doc = config_doc(script)
    outcome = search(doc, tmp_path, FakeRunner()).run(sampler=sampler, max_trials=30)
    assert len(outcome.trials) == 30
    for t in outcome.trials:
        assert all(t.config[name] in choices for name, choices in doc["space"].items())
    if sampler == "grid":
        assert len(outcome.distinct()) == 30


def test_cmaes_finds_the_optimum_of_a_small_space_with_fewer_evaluations_than_the_grid(script, tmp_path):
    doc = config_doc(script)
    grid = search(doc, tmp_path / "g", FakeRunner()).run(sampler="grid")
    cma = search(doc, tmp_path / "c", FakeRunner()).run(sampler="cmaes", max_trials=60)
    assert cma.best().config == grid.best().config
    assert cma.evaluations < grid.evaluations


def test_parallel_jobs_emulate_each_configuration_once(script, tmp_path):
    runner = FakeRunner(delay_s=0.02)
    outcome = search(config_doc(script), tmp_path, runner, jobs=4).run(sampler="random", max_trials=40)
    assert len(runner.calls) == len({tuple(c) for c in runner.calls}) == outcome.emulated


def test_parallel_jobs_never_spend_more_than_the_evaluation_budget(script, tmp_path):
    runner = FakeRunner(delay_s=0.05)
    outcome = search(config_doc(script), tmp_path, runner, jobs=4).run(sampler="random", max_evaluations=5,
                                                                         max_trials=60)
    assert outcome.evaluations == 5
    assert len(runner.calls) == 5


def test_infeasible_and_pruned_proposals_are_not_told_to_the_sampler_as_values(script, tmp_path, monkeypatch):
    """CMA-ES resamples: an infeasible proposal ends PRUNED (left out of its update), a feasible one gets its cost;
    cost() still ranks an infeasible result last."""
    import optuna

    from stepcast.emulate.search.samplers import cost, propose

    studies = []
    create = optuna.create_study
    monkeypatch.setattr(optuna, "create_study", lambda **kw: studies.append(create(**kw)) or studies[-1])
    outcome = search(config_doc(script), tmp_path, FakeRunner()).run(sampler="cmaes", max_trials=40)
    states = [t.state for t in studies[0].trials]
    assert len(states) == len(outcome.trials) == 40
    space = Space(parse_config(config_doc(script), "toy.yaml"))
    by_config = {json.dumps(r.config, sort_keys=True): r.feasible for r in outcome.trials}
    for trial in studies[0].trials:
        feasible = by_config[json.dumps(propose(optuna.trial.FixedTrial(trial.params), space), sort_keys=True)]
        assert trial.state == (optuna.trial.TrialState.COMPLETE if feasible else optuna.trial.TrialState.PRUNED)
    assert optuna.trial.TrialState.PRUNED in states and optuna.trial.TrialState.COMPLETE in states
    assert all(cost(t) == INFEASIBLE_COST for t in outcome.trials if not t.feasible)


def test_every_parameter_spans_the_same_width_whatever_its_number_of_choices(script):
    """A position in [0, 1] picks choice i of n in [i / n, (i + 1) / n): CMA-ES's one step size is as wide for tp's
    four choices as for pp's three."""
    import optuna

    from stepcast.emulate.search.samplers import propose

    space = Space(parse_config(config_doc(script), "toy.yaml"))
    assert propose(optuna.trial.FixedTrial({"tp": 0.0, "pp": 0.5, "micro_batch": 1.0}), space) == {
        "tp": 1, "pp": 2, "micro_batch": 8}
    assert propose(optuna.trial.FixedTrial({"tp": 0.26, "pp": 0.33, "micro_batch": 0.74}), space) == {
        "tp": 2, "pp": 1, "micro_batch": 4}


def test_cmaes_starts_at_the_baseline_when_the_config_asks(script):
    from stepcast.emulate.search.samplers import make_sampler

    doc = config_doc(script, baseline={"tp": 8, "pp": 1, "micro_batch": 2},
                     search={"sampler": "cmaes", "cmaes_start": "baseline"})
    space = Space(parse_config(doc, "toy.yaml"))
    assert make_sampler("cmaes", space, 0)._x0 == {"tp": 7 / 8, "pp": 1 / 6, "micro_batch": 3 / 8}   # slice centres
    doc["search"]["cmaes_start"] = "middle"
    assert make_sampler("cmaes", Space(parse_config(doc, "toy.yaml")), 0)._x0 is None
    with pytest.raises(SearchConfigError, match="search.cmaes_start: baseline needs a baseline configuration"):
        parse_config(config_doc(script, search={"cmaes_start": "baseline"}), "toy.yaml")


def test_space_admitting_nothing_feasible_says_why_in_one_line(script, tmp_path, capsys):
    from stepcast.emulate.search.cli import main

    doc = config_doc(script, constraints=["tp * pp == 3"])
    path = tmp_path / "none.yaml"
    import yaml

    path.write_text(yaml.safe_dump(doc))
    code = main([str(path), "--no-mlflow", "--cache-dir", str(tmp_path / "cache"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert err[0].startswith("stepcast: no feasible configuration among the 48 tried (48 ruled out before emulation)")
    assert err[0].endswith("most common reason (48 of 48): constraint tp * pp == 3")
    assert json.loads((tmp_path / "out" / "trials.json").read_text())


def test_bad_config_is_one_line_naming_the_field(script, tmp_path, capsys):
    from stepcast.emulate.search.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(f"script: {script}\ngpus: 8\nspace: {{tp: []}}\n")
    assert main([str(path), "--no-mlflow"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("bad.yaml: space: tp: expected a non-empty list of choices")
    with pytest.raises(SearchConfigError, match=r"constraints: .*only min\(\) and max\(\) may be called"):
        parse_config(config_doc(script, constraints=["__import__('os')"]), "toy.yaml")


def test_unreachable_tracking_store_fails_fast_in_one_line(script, tmp_path, capsys, monkeypatch):
    from stepcast.emulate.search.cli import main

    import yaml

    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(config_doc(script)))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    started = time.perf_counter()
    assert main([str(path), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unreachable" in err[0] and time.perf_counter() - started < 10


def test_no_feasible_reason_counts_each_kind(script, tmp_path):
    doc = config_doc(script, space={"tp": [1], "pp": [1], "micro_batch": [4, 8]}, constraints=[],
                     derived={"dp": "8"})
    outcome = search(doc, tmp_path, FakeRunner()).run(sampler="grid")
    line = no_feasible_reason(outcome)
    assert outcome.best() is None
    assert line.startswith("no feasible configuration among the 2 tried (2 out of memory)")


class FakeRay:
    """Stands in for ``ray`` and ``ray.tune`` (the real ones need a cluster): Tuner.fit asks the search algorithm
    for trials until it says FINISHED or num_samples are done, runs the trainable in this process and reports
    each result back, as Tune does."""

    def __init__(self) -> None:
        import types

        self.address = None
        ray = types.ModuleType("ray")
        tune = types.ModuleType("ray.tune")
        search = types.ModuleType("ray.tune.search")

        class Searcher:
            FINISHED = "FINISHED"

            def __init__(self, metric=None, mode=None):
                self.metric, self.mode = metric, mode

        search.Searcher = Searcher
        ray.init = lambda address=None, **kw: setattr(self, "address", address)
        ray.tune = tune
        ray.exceptions = types.SimpleNamespace(RayError=type("RayError", (Exception,), {}))
        tune.TuneConfig = tune.RunConfig = lambda **kw: kw
        tune.Callback = object
        tune.Tuner = self.tuner
        self.modules = {"ray": ray, "ray.tune": tune, "ray.tune.search": search}
        self.progress: list[dict] = []

    def tuner(self, trainable, tune_config, run_config):
        class Result:
            def __init__(self, metrics):
                self.metrics, self.error = metrics, None

        class Tuner:
            def fit(_):
                alg, results = tune_config["search_alg"], []
                for i in range(tune_config["num_samples"]):
                    config = alg.suggest(str(i))
                    if config == "FINISHED":
                        break
                    metrics = trainable(config)
                    for callback in run_config["callbacks"]:
                        callback.on_trial_result(i, [], None, metrics)
                    alg.on_trial_complete(str(i), metrics)
                    results.append(Result(metrics))
                return results

        return Tuner()


def test_ray_adapter_runs_the_sampler_through_tune_with_the_cache(script, tmp_path, monkeypatch):
    """With a fake Ray (the adapter's wiring: proposals -> remote evaluation -> outcome), not a real cluster."""
    import sys

    from stepcast.emulate.search import ray_adapter, samplers
    from stepcast.emulate.search.ray_adapter import run_on_ray

    monkeypatch.setattr(ray_adapter, "reachable", lambda address: None)   # no head at ray://head:10001
    fake = FakeRay()
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    runner = FakeRunner()
    monkeypatch.setattr(samplers, "run_trial", runner)
    doc = config_doc(script, search={"sampler": "random", "max_trials": 25, "seed": 3})
    printed = []
    first = search(doc, tmp_path, None)
    first.progress = printed.append
    outcome = run_on_ray(first, "ray://head:10001")
    assert fake.address == "ray://head:10001" and len(outcome.trials) == 25
    assert len(printed) == 25   # a progress line per trial
    assert outcome.emulated == len(runner.calls) == len({tuple(c) for c in runner.calls})
    assert outcome.best() is not None and outcome.best().feasible
    again = run_on_ray(search(doc, tmp_path, None), "ray://head:10001")
    assert again.emulated == 0 and again.cache_hits == again.evaluations
    grid = run_on_ray(search({**doc, "search": {"sampler": "grid"}}, tmp_path, None), "ray://head:10001")
    assert len(grid.trials) == 48 and len(grid.distinct()) == 48


def test_emulator_failure_is_not_cached_but_a_script_failure_is(script, tmp_path):
    doc = config_doc(script, space={"tp": [1, 2], "pp": [1], "micro_batch": [1]}, constraints=[],
                     derived={"dp": "8"})
    answers = {"--tp=1": {"status": "error", "reason": "exit 1: AttributeError", "transient": True},
               "--tp=2": {"status": "error", "reason": "exit 3: ValueError in the script"}}
    calls: list[str] = []

    def runner(script, args, env, target, timeout_s=None):
        calls.append(args[0])
        return answers[args[0]]

    for _ in range(2):
        Search(parse_config(doc, "toy.yaml"), TARGET, TrialCache(tmp_path / "cache"), runner=runner).run(
            sampler="grid")
    assert sorted(calls) == ["--tp=1", "--tp=1", "--tp=2"]


def test_search_registers_as_a_subcommand_of_python_m_emulate():
    import argparse

    from stepcast.emulate.search.cli import register, run_command

    parser = argparse.ArgumentParser(prog="python -m stepcast.emulate")
    register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["search", "megatron_gpt", "search.sampler=grid", "--jobs", "2"])
    assert ns.func is run_command and ns.overrides == ["search.sampler=grid"] and ns.jobs == 2


def test_interrupted_cli_search_says_how_to_resume(script, tmp_path, capsys, monkeypatch):
    import yaml

    from stepcast.emulate.search import samplers
    from stepcast.emulate.search.cli import main

    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(config_doc(script, search={"sampler": "grid"})))
    argv = [str(path), "--no-mlflow", "--cache-dir", str(tmp_path / "cache"), "--output", str(tmp_path / "out")]
    monkeypatch.setattr(samplers, "run_trial", FakeRunner(interrupt_at=2))
    assert main(argv) == 130
    assert capsys.readouterr().err.strip() == ("stepcast: search interrupted; results so far are cached: run the same "
                                               "command again to resume")
    resumed = FakeRunner()
    monkeypatch.setattr(samplers, "run_trial", resumed)
    assert main(argv) == 0
    assert "(cached)" in capsys.readouterr().out and len(resumed.calls) > 0


def test_the_trial_cache_key_changes_with_the_host_model(monkeypatch):
    # a trial cached under one host model (or one set of counted costs) must not answer for another
    from stepcast.emulate.search.trials import estimator_version

    monkeypatch.delenv("STEPCAST_HOST_MODEL", raising=False)
    counted = estimator_version()
    monkeypatch.setenv("STEPCAST_HOST_MODEL", "measured")
    assert estimator_version() != counted


def test_cmaes_with_a_budget_below_its_population_runs_random_search(script, tmp_path):
    """Three parameters: CMA-ES's population is 7, so a budget of 5 ends before its first update."""
    from stepcast.emulate.search.samplers import cmaes_population

    assert cmaes_population(3) == 7 and cmaes_population(4) == 8
    short = search(config_doc(script), tmp_path / "a", FakeRunner()).run(sampler="cmaes", max_evaluations=5)
    assert short.sampler == "random" and short.evaluations == 5
    long = search(config_doc(script), tmp_path / "b", FakeRunner()).run(sampler="cmaes", max_evaluations=7)
    assert long.sampler == "cmaes"
