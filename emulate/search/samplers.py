"""The search loop: an Optuna sampler proposes configurations, :class:`Search` evaluates them.

Samplers come from Optuna (``search.sampler``): ``cmaes`` (CmaEsSampler: CMA-ES over each parameter's position in
its ordered list of choices, so tp 1 < 2 < 4 keeps its order), ``random`` and ``grid`` (every configuration once)
as baselines. Each parameter is suggested as a position in [0, 1] whose equal slices are its choices
(:func:`propose`), so every sampler can only choose from the space and every parameter spans the same width
whatever its number of choices: CMA-ES's one initial step size (a sixth of the width) is then as wide, relative to
its choices, for a parameter of four choices as for one of two, as CMA-ES assumes of scaled variables (with integer
indices, Optuna's step size is a sixth of the narrowest parameter's range, too small to leave the middle choice of
a wider one). The grid proposes each slice's centre.

What a proposal costs: a configuration seen before in this search is answered from memory; one the cache holds
is answered from the cache (``cache hit``); one a cheap check rules out (:meth:`emulate.search.space.Space.rule_out`)
is ``pruned`` without emulation (as is one ``speed.monotone`` says is no faster than a feasible one already
answered: ``speed_pruned``), and so is one the learned memory model (``memory.model``,
:mod:`emulate.search.memory_model`, fitted to the peaks of the trials so far) predicts will not fit (``pruned``
with a ``memory model:`` reason, counted in ``model_pruned``); only the rest are emulated. ``evaluations`` counts
the distinct configurations that needed an emulation's answer (emulated now or found in the cache; out-of-memory
ones included, pruned ones not): the search's real cost, independent of what an earlier run left in the cache.

An infeasible proposal (pruned, or out of memory) is not told to the sampler as a value: its Optuna trial ends
PRUNED, which CMA-ES leaves out of its update (resampling, the usual way CMA-ES handles a constraint), so a
configuration next to out-of-memory ones is not pushed away from by its neighbours' penalty; random and the grid
ignore values anyway. :data:`INFEASIBLE_COST` is what :func:`cost` gives such a result (a best never picks it).
With ``search.cmaes_start: baseline`` CMA-ES starts its mean at the baseline configuration the config names
instead of the middle of the space. A budget (``max_evaluations``) below CMA-ES's population
(:func:`cmaes_population`: 8 for five parameters) ends before its first update, so CMA-ES would only sample its
initial Gaussian, concentrated at the start, where the optimum of a frontier (the fastest that fits) seldom lies:
random search runs instead (the outcome's ``sampler`` says so; measured on the FSDP2 space's 6-emulation budget,
100 seeds: within 2 % in 82 against CMA-ES's 75).

Local parallelism: ``jobs`` proposals are evaluated at once (Optuna's thread pool, each trial a subprocess); a
configuration being emulated by one thread is waited for, not emulated again, by another.
"""
from __future__ import annotations

import json
import math
from collections import Counter
import threading
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from stepcast.emulate.search.memory_model import MemoryModel
from stepcast.emulate.search.space import SPEED_PRUNED, Config, SearchConfig, Space, format_config
from stepcast.emulate.search.trials import (
    Target, TrialCache, TrialInterrupted, TrialResult, estimator_version, run_trial, trial_key,
)

#: the cost told to the sampler for an infeasible or pruned configuration (ms per step, or per token)
INFEASIBLE_COST = 1e12

Runner = Callable[..., dict[str, Any]]


def cmaes_population(dimensions: int) -> int:
    """CMA-ES's default population (Hansen's 4 + 3 ln n, as cmaes and Optuna use): proposals per generation."""
    return 4 + math.floor(3 * math.log(dimensions))


def make_sampler(kind: str, space: Space, seed: int):
    """The Optuna sampler named ``kind`` over the space's choice indices."""
    import optuna

    if kind == "cmaes":
        cfg = space.cfg
        start = ({name: (i + 0.5) / len(cfg.space[name]) for name, i in zip(space.names, space.index(cfg.baseline))}
                 if cfg.search.cmaes_start == "baseline" and cfg.baseline is not None else None)
        return optuna.samplers.CmaEsSampler(x0=start, seed=seed, n_startup_trials=1 if start is None else 0,
                                            warn_independent_sampling=False)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "grid":
        return optuna.samplers.GridSampler({name: [(i + 0.5) / len(c) for i in range(len(c))]
                                            for name, c in space.cfg.space.items()})
    raise ValueError(f"search.sampler: expected cmaes, random or grid, got {kind!r}")


def propose(trial, space: Space) -> Config:
    """The configuration an Optuna trial proposes: each parameter a position in [0, 1], choice i of n its slice
    [i / n, (i + 1) / n)."""
    return space.from_index({name: min(int(trial.suggest_float(name, 0.0, 1.0) * len(choices)), len(choices) - 1)
                             for name, choices in space.cfg.space.items()})


@dataclass
class SearchOutcome:
    sampler: str
    trials: list[TrialResult] = field(default_factory=list)   # one per proposal, in order (repeats included)
    evaluations: int = 0        # distinct configurations answered by an emulation (now or from the cache)
    emulated: int = 0           # of those, emulated in this run
    cache_hits: int = 0
    pruned: int = 0             # distinct configurations ruled out by a cheap check or the memory model
    model_pruned: int = 0       # of those, ruled out by the learned memory model
    speed_pruned: int = 0       # of those, ruled out as no faster than a feasible one (speed.monotone)
    infeasible: int = 0         # distinct configurations that ran out of memory
    errors: int = 0
    wall_s: float = 0.0
    baseline: TrialResult | None = None

    def best(self) -> TrialResult | None:
        feasible = [t for t in self.trials if t.feasible]
        return min(feasible, key=cost) if feasible else None

    def distinct(self) -> list[TrialResult]:
        seen: dict[str, TrialResult] = {}
        for t in self.trials:
            seen.setdefault(json.dumps(t.config, sort_keys=True), t)
        return list(seen.values())


def cost(result: TrialResult) -> float:
    """What the search minimises: milliseconds per token when the config says how many tokens a step trains, else
    milliseconds per step."""
    if not result.feasible:
        return INFEASIBLE_COST
    if result.tokens_per_s:
        return 1e3 / result.tokens_per_s
    return float(result.iteration_time_ms)


class Search:
    """Evaluates configurations of one search config against the cache and the emulator."""

    def __init__(self, cfg: SearchConfig, target: Target, cache: TrialCache, jobs: int = 1,
                 runner: Runner | None = None, timeout_s: float | None = None,
                 progress: Callable[[TrialResult], None] | None = None, learned_memory: bool = True,
                 speed_pruning: bool = True) -> None:
        """``learned_memory=False`` turns the learned memory model off and ``speed_pruning=False`` the
        ``speed.monotone`` declaration (an exhaustive reference keeps only the exact checks)."""
        self.cfg, self.space, self.target, self.cache = cfg, Space(cfg), target, cache
        self.jobs, self.runner, self.timeout_s, self.progress = jobs, runner or run_trial, timeout_s, progress
        self.estimator = estimator_version()
        self._lock = threading.Lock()
        self._known: dict[str, Future] = {}
        self._oom: list[Config] = []
        self._feasible: list[Config] = []
        self.speed_pruning = speed_pruning
        learned = cfg.memory.model
        self.learned_memory = learned_memory and learned is not None
        self._memory = MemoryModel(learned.scale, learned.static, learned.per_unit) if self.learned_memory else None

    def evaluate(self, config: Config, outcome: SearchOutcome | None = None) -> TrialResult:
        """The result for ``config``: from this search's memory, the cache, a cheap check or an emulation."""
        ident = json.dumps(config, sort_keys=True)
        with self._lock:
            future = self._known.get(ident)
            mine = future is None
            if mine:
                future = self._known[ident] = Future()
        if not mine:
            return future.result()
        try:
            result = self._evaluate_new(config, outcome)
        except BaseException as exc:
            with self._lock:
                del self._known[ident]
            future.set_exception(exc)
            raise
        future.set_result(result)
        if self.progress:
            self.progress(result)
        return result

    def _evaluate_new(self, config: Config, outcome: SearchOutcome | None) -> TrialResult:
        with self._lock:
            ooms = list(self._oom)
            feasible = list(self._feasible) if self.speed_pruning else []
        why = self.space.rule_out(config, self.target.memory_gib, ooms, feasible)
        if why is not None:
            self._count(outcome, "pruned", "speed_pruned" if why.startswith(SPEED_PRUNED) else None)
            return TrialResult(config=config, status="pruned", reason=why)
        predicted = self._predicted_peak(config)
        if predicted is not None and predicted.peak_gib > self.target.memory_gib * (1 + self.cfg.memory.model.margin):
            self._count(outcome, "pruned", "model_pruned")
            return TrialResult(config=config, status="pruned", predicted_peak_gib=predicted.peak_gib,
                               reason=f"memory model: predicted peak {predicted.peak_gib:.1f} GiB > "
                                      f"{self.target.memory_gib:g} GiB (fitted to {predicted.trials} trials)")
        args, env = self.space.script_command(config)
        key = trial_key(self.cfg.script_path(), args, env, self.target, self.estimator)
        doc = self.cache.get(key)
        cached = doc is not None
        if doc is None:
            doc = self.runner(self.cfg.script_path(), args, env, self.target, timeout_s=self.timeout_s)
            if not doc.get("transient"):
                self.cache.put(key, {**doc, "config": config, "args": args, "env": env})
        result = TrialResult(config=config, status=doc["status"], iteration_time_ms=doc.get("iteration_time_ms"),
                             peak_memory_bytes=doc.get("peak_memory_bytes"), reason=doc.get("reason"),
                             emulation_s=float(doc.get("emulation_s", 0.0)), cached=cached, key=key,
                             warnings=list(doc.get("warnings", [])),
                             predicted_peak_gib=predicted.peak_gib if predicted is not None else None)
        tokens = self.space.tokens_per_step(config)
        if result.feasible and tokens and result.iteration_time_ms:
            result.tokens_per_s = tokens / (result.iteration_time_ms / 1e3)
        if result.status == "oom":
            with self._lock:
                self._oom.append(config)
        elif result.feasible:
            with self._lock:
                self._feasible.append(config)
        if result.feasible and result.peak_memory_bytes and self._memory is not None:
            with self._lock:
                self._memory.observe(config, result.peak_memory_bytes)
        self._count(outcome, "evaluations", "cache_hits" if cached else "emulated",
                    {"oom": "infeasible", "error": "errors"}.get(result.status))
        return result

    def _predicted_peak(self, config: Config):
        if self._memory is None:
            return None
        with self._lock:
            return self._memory.predict(config)

    def _count(self, outcome: SearchOutcome | None, *names: str | None) -> None:
        if outcome is None:
            return
        with self._lock:
            for name in names:
                if name:
                    setattr(outcome, name, getattr(outcome, name) + 1)

    def run(self, sampler: str | None = None, max_evaluations: int | None = None,
            max_trials: int | None = None, seed: int | None = None) -> SearchOutcome:
        """Propose and evaluate until the budget (distinct evaluations, proposals) or the grid is spent."""
        import optuna

        budget = self.cfg.search
        kind = sampler or budget.sampler
        max_evaluations = max_evaluations or budget.max_evaluations
        max_trials = max_trials or budget.max_trials
        if kind == "grid":
            max_trials = min(max_trials, self.space.size())
        if (kind == "cmaes" and max_evaluations is not None
                and max_evaluations < cmaes_population(len(self.space.names))):
            kind = "random"   # no generation would complete (module docstring)

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="minimize",
                                    sampler=make_sampler(kind, self.space, budget.seed if seed is None else seed))
        outcome = SearchOutcome(sampler=kind)
        started = time.perf_counter()
        if not any(self.space.rule_out(c, self.target.memory_gib, []) is None for c in self.space.all_configs()):
            for config in self.space.all_configs():  # nothing passes the cheap checks: no sampler, no emulation
                outcome.trials.append(self.evaluate(config, outcome))
            outcome.wall_s = time.perf_counter() - started
            return outcome

        in_flight = [0]   # configurations new to this search being evaluated now (parallel jobs)

        def objective(trial) -> float:
            config = propose(trial, self.space)
            with self._lock:
                new = json.dumps(config, sort_keys=True) not in self._known
                if new and max_evaluations is not None and outcome.evaluations + in_flight[0] >= max_evaluations:
                    # the budget is spoken for by evaluations done or running: with --jobs N, a proposal made
                    # while the last ones run would overspend it
                    raise optuna.TrialPruned()
                in_flight[0] += new
            try:
                result = self.evaluate(config, outcome)
            finally:
                with self._lock:
                    in_flight[0] -= new
            with self._lock:
                outcome.trials.append(result)
            if not result.feasible:
                raise optuna.TrialPruned()   # not a value: CMA-ES resamples instead (module docstring)
            return cost(result)

        def stop_when_spent(study, trial) -> None:
            if max_evaluations is not None and outcome.evaluations >= max_evaluations:
                study.stop()

        try:
            with warnings.catch_warnings():
                # n_jobs (a thread per job; each trial is a subprocess, so the emulations run in parallel) is
                # marked deprecated in Optuna 2.7-2.10, which the dev extra's hydra-optuna-sweeper pins, not in 3.x
                warnings.filterwarnings("ignore", message=".*n_jobs.*", category=FutureWarning)
                study.optimize(objective, n_trials=max_trials, n_jobs=self.jobs, callbacks=[stop_when_spent],
                               catch=())
        finally:
            outcome.wall_s = time.perf_counter() - started
        if self.cfg.baseline is not None:
            outcome.baseline = self.evaluate(dict(self.cfg.baseline))
        return outcome


def no_feasible_reason(outcome: SearchOutcome) -> str:
    """One line saying why a search found nothing feasible."""
    distinct = outcome.distinct()
    counts = {s: sum(t.status == s for t in distinct) for s in ("pruned", "oom", "error")}
    parts = [f"{n} {label}" for n, label in ((counts["pruned"], "ruled out before emulation"),
                                           (counts["oom"], "out of memory"), (counts["error"], "failed"))
             if n]
    example = next((t for t in distinct if t.status in ("oom", "error")), None)
    if example is not None:
        detail = f"; e.g. {format_config(example.config)}: {example.reason}"
    elif distinct:
        reasons = Counter(t.reason for t in distinct)
        reason, n = reasons.most_common(1)[0]
        detail = f"; most common reason ({n} of {len(distinct)}): {reason}"
    else:
        detail = ""
    return (f"no feasible configuration among the {len(distinct)} tried ({', '.join(parts) or 'none evaluated'})"
            f"{detail}")


__all__ = ["INFEASIBLE_COST", "Search", "SearchOutcome", "TrialInterrupted", "cost", "make_sampler", "propose",
           "no_feasible_reason"]
