"""How well do the samplers search? CMA-ES, random and the exhaustive grid on the same space, emulator as evaluator.

    python -m benchmarks.emulate.search                          # conf/search/megatron_gpt.yaml, benchmark space
    python -m benchmarks.emulate.search --config megatron_gpt --override space.pp=[1,2] --seeds 0 1 2 --json out.json

The grid runs first and evaluates every configuration the exact checks allow (constraints, the memory lower
bound, dominance by an out-of-memory one; the learned memory model is off for it, so its optimum is the exhaustive
reference); CMA-ES and random then run on the same space with a budget of ``--budget-fraction`` of the grid's
emulations (default 40 %), over several seeds, with the learned memory model on. All share one trial cache, so
after the grid the others emulate nothing new: their cost is counted in ``emulations`` (distinct configurations
that needed an emulation's answer, out-of-memory ones included, pruned ones not; answered now or from the cache)
and in the emulation seconds those answers cost when they were emulated (``emulation s``), beside the wall time of
the run itself. The table reports, per sampler: emulations, best found, its gap to the grid's optimum, emulation
and wall seconds, cache hits, infeasible (out-of-memory) trials, configurations pruned (all, and by the learned
memory model) and ``mispruned``: those the model ruled out that the grid found feasible. Below it, the model's
error over every budgeted run (feasible trials it predicted before they ran; out-of-memory ones it predicted to
fit). Aim (the issue): within 2 % of the grid's optimum with at most 40 % of its emulations.

Three seeds sample a rate coarsely, so ``--replay-seeds N`` (default 100) then replays CMA-ES and random over
seeds 0..N-1 with the same budget, each answered from the grid's trials (the cache, and out of memory for what the
grid pruned as needing the memory of an out-of-memory configuration): seconds, no emulation; where the config
declares ``speed.monotone`` also without it. ``speed-pruned`` counts configurations a run ruled out as no faster
than a feasible one (the grid ignores the declaration) and ``speed-mispruned`` those of them the grid found more than
2 % faster than what ruled them out.

BENCHMARK_OVERRIDES narrows conf/search/megatron_gpt.yaml to what a 2-core machine emulates in well under an hour
(each 8-rank Megatron-core capture takes one to two minutes there); other configs run as they are unless
``--override`` says otherwise.

Against real runs: for a config with published measurements (:data:`PUBLISHED`: ``llama_fsdp2``, torchtitan's
Llama 3.1 benchmark file), every published run the config's script can express (same model, GPU count, no
context/tensor/pipeline parallelism: Table 1's eager, torch.compile and torch.compile + Float8 rows and Table 2's
FSDP 8 / CP 1 row at sequence 32768) is evaluated through the search's own evaluator and cache, its predicted
tokens/s per GPU printed beside the published one, with the Spearman rank correlation of predicted against
published over those (undefined, and said so, below three); the runs it cannot express are listed with why.
``--published-only`` does only this (no grid):

    python -m benchmarks.emulate.search --config llama_fsdp2 --published-only --jobs 2
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

#: the space the benchmark searches by default: TP x PP x micro-batch x recomputation on 8 H100s, a 2-layer, 0.5B GPT
#: at sequence 8192 with 64 heads (Megatron's local attention keeps the 8192^2 scores: micro-batch 2 without
#: recomputation does not fit at tp 1, nor micro-batch 4 at tp 2). Two layers and a global batch of 16 keep the
#: traces small enough that one 8-rank trial takes about a minute on a loaded 2-core machine (8 layers and a
#: batch of 32: 225 s); two layers allow two pipeline stages (the stages' grouped send/recv progress together in the
#: simulator, as NCCL runs them).
BENCHMARK_OVERRIDES = ["space.tp=[1,2,4,8]", "space.pp=[1,2]", "space.micro_batch=[1,2,4]",
                       "space.recompute=[full,none]", "fixed.layers=2", "fixed.heads=64", "fixed.seq=8192",
                       "fixed.global_batch=16"]


@dataclass(frozen=True)
class PublishedRun:
    """One published measurement as a configuration of a search config (space values plus any fixed values it
    changes, such as the sequence length), or the reason it is not one."""
    label: str
    tps_per_gpu: float
    config: dict | None
    why_not: str | None = None


def torchtitan_published(root: Path, gpus: int = 8) -> list[PublishedRun]:
    """Every row of torchtitan's Llama 3.1 benchmark file (``llama3_h100_202412_torchtitan.md``) as a configuration
    of conf/search/llama_fsdp2.yaml, or why it is not one. Read from each table's caption and row: model (8B), GPU
    count (``gpus``), local batch, sequence length (the row's, else torchtitan's default 8192), activation
    checkpointing (selective = the "op" policy, full), torch.compile and Float8 (in the caption or the row's
    techniques); torchtitan's resharding (every block but the last) and no gradient accumulation (micro-batch =
    local batch). Rows with context, tensor or pipeline parallelism are not expressible: the example is 1D FSDP2."""
    from benchmarks.emulate.e2e.torchtitan import BENCHMARK, SEQ, number, parse_tables

    path = root / BENCHMARK
    if not path.is_file():
        return []
    runs = []
    for table, (caption, rows) in parse_tables(path.read_text()).items():
        for row in rows:
            if not re.fullmatch(r"[\d,.]+", row.get("TPS/GPU", "")):
                continue   # a later table without a caption (the versions) runs on under the last one
            what = row.get("Techniques") or row.get("Parallelism") or row.get("Schedule") or ""
            label = f"Table {table}: {what}"
            text = f"{caption} {what}"
            tps = number(row["TPS/GPU"])
            model = re.search(r"Llama 3\.1 (\d+B)", caption)
            count = re.search(r"(\d+) GPUs", caption)
            batch = re.search(r"Local batch size (\d+)", caption)
            ac = re.search(r"(Selective|Full) activation checkpointing", caption)
            cp = re.search(r"CP (\d+)", what)
            why = ("not the 8B model" if not model or model[1] != "8B" else
                   f"{count[1] if count else '?'} GPUs, not {gpus}" if not count or int(count[1]) != gpus else
                   f"context parallel {cp[1]}" if cp and int(cp[1]) > 1 else
                   "tensor or pipeline parallel" if re.search(r"\b(TP|PP)\b|\dD parallelism", text) else
                   "no local batch or checkpointing stated" if not batch or not ac else None)
            if why is not None:
                runs.append(PublishedRun(label, tps, None, why))
                continue
            local = int(batch[1])
            seq = int(number(row["Sequence Length"])) if row.get("Sequence Length") else SEQ
            runs.append(PublishedRun(label, tps, {
                "reshard": "default", "ac": ac[1].lower(), "micro_batch": local, "compile": "torch.compile" in text,
                "float8": "Float8" in text, "batch": local, "seq": seq}))
    return runs


#: config name -> published runs under the shared data root
PUBLISHED = {"llama_fsdp2": torchtitan_published}


def rank_agreement(search, published: list[PublishedRun], gpus: int) -> tuple[list[dict], float | None]:
    """Each expressible published run's predicted tokens/s per GPU, through the search's own evaluator (its cache:
    what the grid already ran costs nothing; None where infeasible), and the Spearman rank correlation of predicted
    against published over the runs that have both (None below three)."""
    from concurrent.futures import ThreadPoolExecutor

    import pandas as pd

    expressible = [run for run in published if run.config is not None]
    with ThreadPoolExecutor(max(1, search.jobs)) as pool:   # each trial a subprocess: --jobs of them at once
        trials = list(pool.map(search.evaluate, [run.config for run in expressible]))
    pairs = []
    for run, trial in zip(expressible, trials):
        mine = trial.tokens_per_s / gpus if trial.feasible and trial.tokens_per_s else None
        pairs.append({"label": run.label, "config": run.config, "published": run.tps_per_gpu, "predicted": mine,
                      "status": trial.status if not trial.feasible else None})
    both = [p for p in pairs if p["predicted"] is not None]
    if len(both) < 3:
        return pairs, None
    ranks = pd.DataFrame({"predicted": [p["predicted"] for p in both], "published": [p["published"] for p in both]})
    return pairs, float(ranks.corr(method="spearman").loc["predicted", "published"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulate.search", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="megatron_gpt", help="search config (name under conf/search or path)")
    parser.add_argument("--override", nargs="*", default=None,
                        help="Hydra overrides (default for megatron_gpt: "
                             f"{' '.join(BENCHMARK_OVERRIDES)}; none otherwise)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds for CMA-ES and random")
    parser.add_argument("--budget-fraction", type=float, default=0.4,
                        help="CMA-ES/random evaluation budget as a fraction of the grid's (default 0.4)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--replay-seeds", type=int, default=100,
                        help="also replay CMA-ES and random over this many seeds from the grid's answers (no "
                             "emulation; 0: off)")
    parser.add_argument("--published-only", action="store_true",
                        help="only predict the config's published runs and their rank correlation (no grid)")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from stepcast.emulate.search.cli import load_config
    from stepcast.emulate.search.samplers import Search, cost
    from stepcast.emulate.search.space import SearchConfigError, format_config
    from stepcast.emulate.search.trials import Target, TrialCache, default_cache_dir
    from stepcast.profiling.hardware import lookup

    console = Console(width=200)
    try:
        default = BENCHMARK_OVERRIDES if args.config == "megatron_gpt" else []
        cfg = load_config(args.config, default if args.override is None else args.override)
    except SearchConfigError as exc:
        print(f"stepcast: {exc}", file=sys.stderr)
        return 2
    spec = lookup(cfg.hardware)
    target = Target(hardware=spec.id, spec_json=spec.model_dump_json(), nproc=cfg.nproc, nodes=cfg.nodes,
                    memory_gib=spec.memory_gib)
    cache = TrialCache(args.cache_dir or default_cache_dir())

    def progress(result) -> None:
        what = f"{result.iteration_time_ms:.2f} ms" if result.feasible else f"{result.status} ({result.reason})"
        if not result.cached and result.status != "pruned":
            console.print(f"[dim]  emulated {format_config(result.config)}: {what} in {result.emulation_s:.0f} s"
                          "[/dim]")

    def exact_search():   # only the exact checks: the published runs and the grid are references
        return Search(cfg, target, cache, jobs=args.jobs, progress=progress, learned_memory=False,
                      speed_pruning=False)

    def run(sampler: str, seed: int, max_evaluations: int | None, exact: bool = False):
        return Search(cfg, target, cache, jobs=args.jobs, progress=progress, learned_memory=not exact,
                      speed_pruning=not exact).run(sampler=sampler, seed=seed, max_evaluations=max_evaluations)

    if args.published_only:
        if cfg.name not in PUBLISHED:
            print(f"stepcast: --published-only: no published runs for {cfg.name} (known: {', '.join(PUBLISHED)})",
                  file=sys.stderr)
            return 2
        print_published(exact_search(), cfg, console)
        return 0
    console.print(f"grid over {Search(cfg, target, cache).space.size()} configurations of {cfg.name} on "
                  f"{cfg.gpus}x {spec.id}")
    grid = run("grid", 0, None, exact=True)
    if grid.best() is None:
        print("stepcast: the grid found no feasible configuration; nothing to compare", file=sys.stderr)
        return 1
    optimum = cost(grid.best())
    truth = {json.dumps(t.config, sort_keys=True): t for t in grid.distinct()}
    budget = max(1, math.floor(args.budget_fraction * grid.evaluations))
    space = Search(cfg, target, cache).space
    rows = [row("grid", "-", grid, optimum, truth, space)]
    budgeted = []
    for sampler in ("cmaes", "random"):
        for seed in args.seeds:
            console.print(f"{sampler} seed {seed}, budget {budget} emulations")
            outcome = run(sampler, seed, budget)
            budgeted.append(outcome)
            name = sampler if outcome.sampler == sampler else f"{sampler}: {outcome.sampler}"
            rows.append(row(name, str(seed), outcome, optimum, truth, space))

    table = Table(title=f"Search on {cfg.gpus}x {spec.id}: {cfg.name}, {grid.evaluations} grid emulations "
                        f"(budget {budget} = {args.budget_fraction:.0%}; emulations: distinct configurations "
                        "emulated, out-of-memory ones included, pruned ones not)")
    for col in ("sampler", "seed", "emulations", "best", "tokens/s", "gap to grid", "emulation s", "wall s",
                "cache hits", "infeasible", "pruned", "model-pruned", "mispruned", "speed-pruned",
                "speed-mispruned"):
        table.add_column(col, justify="left" if col in ("sampler", "best") else "right")
    for r in rows:
        table.add_row(r["sampler"], r["seed"], str(r["emulations"]), r["best"], f"{r['tokens_per_s']:,.0f}",
                      f"{r['gap'] * 100:+.2f}%", f"{r['emulation_s']:.0f}", f"{r['wall_s']:.0f}",
                      str(r["cache_hits"]), str(r["infeasible"]), str(r["pruned"]), str(r["model_pruned"]),
                      str(r["mispruned"]), str(r["speed_pruned"]), str(r["speed_mispruned"]))
    console.print(table)
    for sampler in ("cmaes", "random"):
        mine = [r for r in rows if r["sampler"].split(":")[0] == sampler]
        within = sum(r["gap"] <= 0.02 for r in mine)
        console.print(f"{sampler}: within 2 % of the grid's optimum in {within} of {len(mine)} seeds, median "
                      f"{statistics.median(r['emulations'] for r in mine):.0f} emulations "
                      f"({statistics.median(r['emulations'] for r in mine) / grid.evaluations:.0%} of the grid's)")
    print_model_errors(budgeted, target.memory_gib, console)
    if args.replay_seeds > 0:
        answers = replay_runner(space, grid)
        seeds = range(args.replay_seeds)
        for speed in (True, False) if cfg.speed.monotone else (True,):
            for sampler in ("cmaes", "random"):
                rates = replay_rate(lambda: Search(cfg, target, cache, runner=answers, speed_pruning=speed), sampler,
                                    seeds, budget, optimum)
                ran = sampler if rates["ran"] == sampler else f"{sampler} (ran {rates['ran']})"
                console.print(f"{ran}{'' if speed else ' without speed.monotone'}, replayed from the grid's "
                              f"answers over seeds 0-{seeds[-1]}: within 2 % of the optimum in {rates['within']} of "
                              f"{len(seeds)}, at it in {rates['found']}, median {rates['median_emulations']:.0f} "
                              "emulations")
    if cfg.name in PUBLISHED:
        print_published(exact_search(), cfg, console)
    if args.json:
        from stepcast.profiling.atomic import write_json_atomic

        write_json_atomic(args.json, rows)
    return 0


def print_published(search, cfg, console) -> float | None:
    """Each published run beside its prediction (or why the space cannot express it) and the rank correlation."""
    from stepcast.emulate.search.space import format_config
    from stepcast.profiling.paths import shared_data_root

    published = PUBLISHED[cfg.name](shared_data_root(), cfg.gpus)
    if not published:
        console.print(f"no published runs of {cfg.name} under {shared_data_root()} (STEPCAST_SHARED_DATA)")
        return None
    for run in published:
        if run.config is None:
            console.print(f"published {run.label}: {run.tps_per_gpu:,.0f} tokens/s per GPU; not expressible here "
                          f"({run.why_not})")
    pairs, rho = rank_agreement(search, published, cfg.gpus)
    for p in pairs:
        mine = f"{p['status']}" if p["predicted"] is None else f"{p['predicted']:,.0f}"
        console.print(f"published {p['label']} ({format_config(p['config'])}): {p['published']:,.0f} tokens/s "
                      f"per GPU; predicted {mine}")
    feasible = sum(p["predicted"] is not None for p in pairs)
    console.print("rank correlation (Spearman) of predicted vs published tokens/s: "
                  + (f"{rho:.3f} over {feasible} configurations" if rho is not None else
                     f"undefined: {feasible} of the {len(pairs)} expressible published configurations predicted "
                     "(three needed)"))
    return rho


def print_model_errors(outcomes, memory_gib: float, console) -> None:
    """The learned memory model's error over the budgeted runs' distinct trials."""
    from stepcast.emulate.search.memory_model import model_errors

    trials = [t for outcome in outcomes for t in outcome.distinct()]
    errors = model_errors(trials, memory_gib)
    if not errors.predicted and not errors.model_pruned:
        console.print("memory model: predicted no trial before it ran (no run had the trials to determine one)")
        return
    spread = (f"median |error| {errors.median_abs_error:.1%}, worst {errors.worst_error:+.1%}"
              if errors.predicted else "no error measured")
    console.print(f"memory model over the budgeted runs: {errors.predicted} feasible trials predicted before they "
                  f"ran ({spread}); {errors.oom_predicted_to_fit} out-of-memory trials it had predicted to fit; "
                  f"{errors.model_pruned} configurations it ruled out (checked against the grid: 'mispruned')")


def replay_runner(space, grid):
    """A runner that answers from the grid instead of emulating, for the configurations the trial cache lacks: those
    the grid pruned as needing the memory of an out-of-memory one (out of memory by the monotone declaration; a
    budgeted run that proposes one first would have emulated it). Answers are transient, so never cached."""
    by_args = {tuple(space.script_command(c)[0]): c for c in space.all_configs()}
    grid_status = {json.dumps(t.config, sort_keys=True): t for t in grid.distinct()}

    def runner(script, args, env, target, timeout_s=None) -> dict:
        config = by_args.get(tuple(args))
        known = grid_status.get(json.dumps(config, sort_keys=True)) if config is not None else None
        if known is None or known.status != "pruned":
            raise RuntimeError(f"replay: {' '.join(args)} is neither in the trial cache nor pruned by the grid")
        return {"status": "oom", "reason": f"replay: {known.reason}", "emulation_s": 0.0, "transient": True}

    return runner


def replay_rate(new_search, sampler: str, seeds, budget: int, optimum: float) -> dict:
    """How often ``sampler`` ends within 2 % of (and at) the grid's optimum over many seeds, each run answered from
    the cache and :func:`replay_runner` (seconds, no emulation): the rate the three benchmarked seeds sample.
    ``new_search`` makes a fresh :class:`~emulate.search.samplers.Search` (nothing seen, memory model empty)."""
    from stepcast.emulate.search.samplers import cost

    within = found = 0
    spent = []
    for seed in seeds:
        outcome = new_search().run(sampler=sampler, seed=seed, max_evaluations=budget)
        best = outcome.best()
        gap = cost(best) / optimum - 1.0 if best else math.inf
        within += gap <= 0.02
        found += gap <= 1e-9
        spent.append(outcome.evaluations)
        ran = outcome.sampler
    return {"within": within, "found": found, "median_emulations": statistics.median(spent) if spent else 0,
            "ran": ran if seeds else sampler}


def speed_contradicted(pruned, outcome, truth: dict, space) -> bool:
    """Whether the grid found a configuration this run ruled out as no faster than a feasible one
    (``speed.monotone``) more than 2 % faster than every feasible configuration of the run that ruled it out: the
    declaration contradicted where it mattered (within 2 % is a tie in the emulator's noise, as the aim counts)."""
    from stepcast.emulate.search.samplers import cost

    mine = truth.get(json.dumps(pruned.config, sort_keys=True))
    rulers = [t for t in outcome.distinct() if t.feasible and space.no_faster_than(pruned.config, t.config)]
    if mine is None or not mine.feasible or not rulers:
        return False
    return cost(mine) * 1.02 < min(cost(t) for t in rulers)


def row(sampler: str, seed: str, outcome, optimum: float, truth: dict, space) -> dict:
    """One table row; ``truth`` is the grid's trial per configuration (JSON key), to check the model's pruning and
    the speed declaration's."""
    from stepcast.emulate.search.samplers import cost
    from stepcast.emulate.search.space import SPEED_PRUNED, format_config

    best = outcome.best()
    distinct = [t for t in outcome.distinct() if t.status != "pruned"]
    model_pruned = [t for t in outcome.distinct() if t.status == "pruned" and t.predicted_peak_gib is not None]
    mispruned = [t for t in model_pruned if (truth.get(json.dumps(t.config, sort_keys=True)) or t).feasible]
    speed_pruned = [t for t in outcome.distinct() if t.status == "pruned" and t.reason.startswith(SPEED_PRUNED)]
    return {"sampler": sampler, "seed": seed, "emulations": outcome.evaluations,
            "model_pruned": len(model_pruned), "mispruned": len(mispruned), "speed_pruned": len(speed_pruned),
            "speed_mispruned": sum(speed_contradicted(t, outcome, truth, space) for t in speed_pruned),
            "best": format_config(best.config) if best else "none",
            "tokens_per_s": (best.tokens_per_s or 0.0) if best else 0.0,
            "gap": (cost(best) / optimum - 1.0) if best else math.inf,
            "emulation_s": sum(t.emulation_s for t in distinct), "wall_s": outcome.wall_s,
            "cache_hits": outcome.cache_hits, "infeasible": outcome.infeasible, "pruned": outcome.pruned}


if __name__ == "__main__":
    sys.exit(main())
