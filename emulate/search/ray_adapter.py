"""The search on a Ray cluster (``--ray-address``): Ray Tune schedules the trials, the same Optuna sampler proposes.

A Ray Tune Searcher (:func:`make_searcher`) asks the sampler the config names (Optuna's CMA-ES or random, or the
grid) over the same choice indices as the local loop; each Tune trial evaluates one configuration on whichever
worker Ray picks, through :meth:`emulate.search.samplers.Search.evaluate` (cache, cheap checks, emulation), and
reports its cost (an infeasible one ends PRUNED in the sampler's study, as in the local loop); each finished trial
prints the local loop's progress line. ``--jobs`` trials run at once.

Workers run this checkout (its path is put first on their ``PYTHONPATH``, and the driver's ``STEPCAST_*``
variables are passed on, so a worker computes the same cache keys and emulates with the same settings); on several
machines they must see the repository at the same path and the trial cache folder (a shared filesystem), which is
how repeats and resumed searches cost nothing there either. On Ray the budget is in proposals
(``search.max_trials``, or ``search.max_evaluations`` when set); the grid proposes each configuration once. Ray is
an optional extra (``pip install 'stepcast[ray]'``).

Connecting: ``--ray-address auto`` finds the cluster ``ray start --head`` started on this machine (or the one
``RAY_ADDRESS`` names); Ray 2.5x clusters use token authentication by default, which Ray sends on its own only
to a cluster it found itself: with an explicit address, set ``RAY_AUTH_MODE=token`` (the token is read from
``~/.ray/auth_token`` or ``RAY_AUTH_TOKEN``). A cluster that cannot be reached is one line
(:class:`RayUnavailable`).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from stepcast.emulate.search.samplers import INFEASIBLE_COST, Search, SearchOutcome, cost, make_sampler, propose
from stepcast.emulate.search.space import SearchConfig
from stepcast.emulate.search.trials import Target, TrialCache, TrialResult
from stepcast.errors import UnavailableError

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

    from stepcast.emulate.search.space import Space

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
            space = Space(cfg)
            return dict(zip(space.names, space.index(propose(trial, space))))

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            trial = self.pending.pop(trial_id, None)
            if trial is None:
                return
            if error or not result or METRIC not in result:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            elif result[METRIC] >= INFEASIBLE_COST:   # infeasible: not a value, as in the local loop
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                self.study.tell(trial, result[METRIC])

    return SamplerSearcher()


class RayUnavailable(UnavailableError):
    """The Ray cluster at the given address could not be reached: one line saying why and what to check."""


def connect(address: str) -> None:
    """Connect this process to the cluster at ``address``; workers get this checkout and the STEPCAST_ settings."""
    import os

    import ray

    import stepcast

    reachable(address)
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("STEPCAST_")}
    importable = Path(stepcast.__file__).resolve().parents[1]  # a checkout's root, or the site-packages holding it
    env_vars["PYTHONPATH"] = os.pathsep.join(p for p in (str(importable), os.environ.get("PYTHONPATH")) if p)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": env_vars})
    except (ConnectionError, RuntimeError, ray.exceptions.RayError) as exc:
        cause = exc.__cause__ or exc
        first = next((line for line in str(cause).splitlines() if line.strip()), type(cause).__name__)
        hint = ("; a cluster with token authentication needs RAY_AUTH_MODE=token here when the address is given "
                "explicitly" if "auth" in str(cause).lower() and os.environ.get("RAY_AUTH_MODE") != "token" else "")
        raise RayUnavailable(f"--ray-address {address}: cannot connect to the Ray cluster ({first[:200]}){hint}"
                             ) from None


def reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail in seconds, not after Ray's own connection retries (minutes), when the cluster's ``host:port`` (the
    address, or ``RAY_ADDRESS`` for ``auto``) accepts no connection; ``auto`` without RAY_ADDRESS is Ray's to find."""
    import os
    import socket

    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or "auto"
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(f"--ray-address {address}: cannot connect to the Ray cluster ({exc.strerror or exc}); "
                             "is it started (ray start --head)?") from None


def progress_callback(search: Search):
    """A Tune callback printing each finished trial as the local loop does (``search.progress``; the search itself,
    which holds locks, stays out of it: Tune pickles its callbacks)."""
    from ray.tune import Callback

    class Progress(Callback):
        def __init__(self, show) -> None:
            self.show = show

        def __getstate__(self) -> dict[str, Any]:   # Tune pickles its callbacks with the experiment's state
            return {"show": None}

        def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
            if self.show and "result" in result:
                self.show(result_of(result["result"]))

    return Progress(search.progress)


def result_of(doc: dict[str, Any]) -> TrialResult:
    doc = dict(doc)
    cached = doc.pop("cached", False)
    return TrialResult(**doc, cached=cached)


def run_on_ray(search: Search, address: str) -> SearchOutcome:
    """Run ``search`` through Ray Tune on the cluster at ``address``; the outcome as the local loop gives it.
    :class:`RayUnavailable` when Ray Tune is not installed (the optional 'ray' extra)."""
    try:
        from ray import tune
    except ImportError as exc:
        raise RayUnavailable(f"--ray-address needs Ray Tune (pip install 'stepcast[ray]'): {exc}") from None

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
    connect(address)
    tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(search_alg=make_searcher(cfg), num_samples=n,
                                                              max_concurrent_trials=search.jobs),
                       run_config=tune.RunConfig(name=f"stepcast-search-{cfg.name}-{budget.sampler}", verbose=0,
                                                 callbacks=[progress_callback(search)]))
    grid = tuner.fit()
    outcome = SearchOutcome(sampler=budget.sampler)
    seen: set[str] = set()
    for i in range(len(grid)):
        if grid[i].error is not None or "result" not in grid[i].metrics:
            raise RayUnavailable(f"--ray-address {address}: a trial failed on the cluster: "
                                 f"{str(grid[i].error).strip().splitlines()[-1][:300]}")
        result = result_of(grid[i].metrics["result"])
        outcome.trials.append(result)
        ident = repr(sorted(result.config.items()))
        if ident in seen:
            continue
        seen.add(ident)
        if result.status == "pruned":
            outcome.pruned += 1
            continue
        outcome.evaluations += 1
        outcome.cache_hits += result.cached
        outcome.emulated += not result.cached
        outcome.infeasible += result.status == "oom"
        outcome.errors += result.status == "error"
    outcome.wall_s = time.perf_counter() - started
    if cfg.baseline is not None:
        outcome.baseline = search.evaluate(dict(cfg.baseline))
    return outcome
