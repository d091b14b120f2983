"""The search on a Ray cluster (``--ray-address``): Ray Tune schedules the trials, the same Optuna sampler proposes.

A Ray Tune Searcher (:func:`make_searcher`) asks the sampler the config names (Optuna's CMA-ES or random, or the
grid) over the same choice indices as the local loop; each Tune trial evaluates one configuration on whichever worker Ray picks, through
:meth:`emulate.search.samplers.Search.evaluate` (cache, cheap checks, emulation), and reports its cost. Workers
must see the repository at the same path and the trial cache folder (a shared filesystem), which is how repeats
and resumed searches cost nothing there either. On Ray the budget is in proposals (``search.max_trials``, or
``search.max_evaluations`` when set); the grid proposes each configuration once. Ray is an optional extra
(``pip install 'stepcast[ray]'``).
"""
from __future__ import annotations

import math
import time
from typing import Any

from emulate.search.samplers import Search, SearchOutcome, cost, make_sampler
from emulate.search.space import SearchConfig
from emulate.search.trials import Target, TrialCache, TrialResult

METRIC = "cost"


def evaluate_remote(cfg_doc: dict[str, Any], target: Target, cache_dir: str, timeout_s: float | None,
                    indices: dict[str, int]) -> dict[str, Any]:
    """On a Ray worker: evaluate the configuration at ``indices`` and return its result and cost."""
    from pathlib import Path

    cfg = SearchConfig.model_validate(cfg_doc)
    search = Search(cfg, target, TrialCache(Path(cache_dir)), timeout_s=timeout_s)
    result = search.evaluate(search.space.from_index({k: int(v) for k, v in indices.items()}))
    return {METRIC: cost(result), "result": {**result.to_json(), "cached": result.cached}}


def make_searcher(cfg: SearchConfig):
    """A Ray Tune Searcher that asks the config's Optuna sampler for each trial and tells it the cost (Ray's own
    OptunaSearch needs optuna>=3, which the dev extra's hydra-optuna-sweeper rules out); the grid is the list of
    every configuration, proposed once each. Tune pickles its searcher, so the study is made on first use."""
    import optuna
    from ray.tune.search import Searcher

    from emulate.search.space import Space

    budget = cfg.search

    class SamplerSearcher(Searcher):
        def __init__(self) -> None:
            super().__init__(metric=METRIC, mode="min")
            space = Space(cfg)
            self.names = space.names
            self.grid = [space.index(c) for c in space.all_configs()] if budget.sampler == "grid" else None
            self.limit = min(budget.max_evaluations or budget.max_trials, len(self.grid or []) or math.inf)
            self.study = None
            self.pending: dict[str, Any] = {}
            self.proposed = 0

        def suggest(self, trial_id: str) -> dict[str, int] | str:
            if self.proposed >= self.limit:
                return Searcher.FINISHED
            self.proposed += 1
            if self.grid is not None:
                return dict(zip(self.names, self.grid[self.proposed - 1]))
            if self.study is None:
                optuna.logging.set_verbosity(optuna.logging.WARNING)
                self.study = optuna.create_study(direction="minimize",
                                                 sampler=make_sampler(budget.sampler, Space(cfg), budget.seed))
            trial = self.study.ask()
            self.pending[trial_id] = trial
            return {name: trial.suggest_int(name, 0, len(choices) - 1) for name, choices in cfg.space.items()}

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            trial = self.pending.pop(trial_id, None)
            if trial is None:
                return
            if error or not result or METRIC not in result:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, result[METRIC])

    return SamplerSearcher()


def run_on_ray(search: Search, address: str) -> SearchOutcome:
    """Run ``search`` through Ray Tune on the cluster at ``address``; the outcome as the local loop gives it."""
    import ray
    from ray import tune

    cfg = search.cfg
    budget = cfg.search
    n = budget.max_evaluations or budget.max_trials
    if budget.sampler == "grid":
        n = min(n, search.space.size())
    cfg_doc = cfg.model_dump()
    cache_dir = str(search.cache.root)
    target, timeout_s = search.target, search.timeout_s

    def trainable(config: dict[str, Any]) -> dict[str, Any]:
        return evaluate_remote(cfg_doc, target, cache_dir, timeout_s, config)

    started = time.perf_counter()
    ray.init(address=address, ignore_reinit_error=True)
    tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(search_alg=make_searcher(cfg), num_samples=n,
                                                              max_concurrent_trials=search.jobs))
    grid = tuner.fit()
    outcome = SearchOutcome(sampler=budget.sampler)
    seen: set[str] = set()
    for i in range(len(grid)):
        doc = dict(grid[i].metrics["result"])
        cached = doc.pop("cached", False)
        result = TrialResult(**doc, cached=cached)
        outcome.trials.append(result)
        ident = repr(sorted(result.config.items()))
        if ident in seen:
            continue
        seen.add(ident)
        if result.status == "pruned":
            outcome.pruned += 1
            continue
        outcome.evaluations += 1
        outcome.cache_hits += cached
        outcome.emulated += not cached
        outcome.infeasible += result.status == "oom"
        outcome.errors += result.status == "error"
    outcome.wall_s = time.perf_counter() - started
    if cfg.baseline is not None:
        outcome.baseline = search.evaluate(dict(cfg.baseline))
    return outcome
