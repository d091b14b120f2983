"""What a search leaves behind: the MLflow run, the plot of its trials and the terminal summary.

MLflow (the project's tracking store, :func:`estimator.tracking.tracking_uri`; checked first with
:func:`estimator.tracking.connect`, so an unreachable store fails in seconds with one line): one run per search in
the experiment ``stepcast-search``, with the search's settings as parameters, one metric step per proposal
(``iteration_time_ms``, ``tokens_per_s``, ``peak_memory_gib``, ``feasible``), the table of every distinct
configuration (``trials.json``: configuration, status, iteration time, tokens/s, peak memory, reason), the best
configuration as ``best.<param>`` parameters with ``best_iteration_time_ms``, ``best_tokens_per_s`` and
``speedup_vs_baseline``, and the plot (``trials.png``).

The plot: each proposal's objective (iteration time, or tokens/s when the config gives tokens per step) in trial
order, infeasible ones marked at the bottom edge, and the best-so-far curve.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from stepcast.emulate.search.samplers import SearchOutcome, cost
from stepcast.emulate.search.space import format_config
from stepcast.emulate.search.trials import TrialResult

EXPERIMENT = "stepcast-search"


def objective_value(result: TrialResult) -> float | None:
    """What the plot and summary show: tokens/s when known, else iteration time in ms (None when infeasible)."""
    if not result.feasible:
        return None
    return result.tokens_per_s if result.tokens_per_s else result.iteration_time_ms


def objective_label(outcome: SearchOutcome) -> str:
    return "tokens/s" if any(t.tokens_per_s for t in outcome.trials) else "iteration time (ms)"


def best_so_far(outcome: SearchOutcome) -> list[float | None]:
    """After each proposal, the best objective so far (None until one is feasible)."""
    curve: list[float | None] = []
    best: TrialResult | None = None
    for t in outcome.trials:
        if t.feasible and (best is None or cost(t) < cost(best)):
            best = t
        curve.append(objective_value(best) if best else None)
    return curve


def speedup(outcome: SearchOutcome) -> float | None:
    best = outcome.best()
    if best is None or outcome.baseline is None or not outcome.baseline.feasible:
        return None
    return cost(outcome.baseline) / cost(best)


def plot_trials(outcome: SearchOutcome, path: Path, title: str) -> Path:
    """Objective per proposal and the best-so-far curve, as a PNG (written to a temporary name, then renamed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stepcast.profiling.atomic import atomic_path

    xs = list(range(1, len(outcome.trials) + 1))
    values = [objective_value(t) for t in outcome.trials]
    fig, ax = plt.subplots(figsize=(7, 4))
    ok = [(x, v) for x, v in zip(xs, values) if v is not None]
    if ok:
        ax.scatter(*zip(*ok), s=18, label="feasible trial")
    bad = [x for x, t in zip(xs, outcome.trials) if not t.feasible]
    if bad:
        ax.scatter(bad, [0] * len(bad), marker="x", color="tab:red", transform=ax.get_xaxis_transform(),
                   clip_on=False, label="infeasible / pruned")
    curve = [(x, v) for x, v in zip(xs, best_so_far(outcome)) if v is not None]
    if curve:
        ax.step(*zip(*curve), where="post", color="tab:green", label="best so far")
    ax.set_xlim(0.5, len(xs) + 0.5)
    ax.set_xlabel("trial")
    ax.set_ylabel(objective_label(outcome))
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return path


def text_curve(outcome: SearchOutcome, width: int = 40) -> list[str]:
    """The best-so-far curve as text lines for the terminal: one line per proposal that improved it."""
    lines = []
    curve = best_so_far(outcome)
    finite = [v for v in curve if v is not None]
    if not finite:
        return lines
    top = max(finite)
    previous = None
    for i, v in enumerate(curve, start=1):
        if v is None or v == previous:
            continue
        bar = "#" * max(1, round(width * v / top))
        lines.append(f"trial {i:4d} {bar} {v:,.1f}")
        previous = v
    return lines


def trials_table(outcome: SearchOutcome) -> list[dict[str, Any]]:
    rows = []
    for t in outcome.distinct():
        rows.append({**t.config, "status": t.status, "iteration_time_ms": t.iteration_time_ms,
                     "tokens_per_s": t.tokens_per_s,
                     "peak_memory_gib": t.peak_memory_bytes / 2**30 if t.peak_memory_bytes else None,
                     "cached": t.cached, "reason": t.reason})
    return rows


def log_to_mlflow(outcome: SearchOutcome, uri: str, params: dict[str, Any], plot: Path) -> str:
    """Log the search as one MLflow run; returns the run id. TrackingError (one line) if the store fails."""
    import mlflow

    from stepcast.estimator.tracking import tracking_errors, use_experiment

    use_experiment(EXPERIMENT, uri)
    with tracking_errors(uri), mlflow.start_run(run_name=f"search-{params.get('name')}-{outcome.sampler}") as run:
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        for step, t in enumerate(outcome.trials):
            metrics = {"feasible": float(t.feasible)}
            if t.feasible:
                metrics["iteration_time_ms"] = float(t.iteration_time_ms)
                if t.tokens_per_s:
                    metrics["tokens_per_s"] = t.tokens_per_s
            if t.peak_memory_bytes:
                metrics["peak_memory_gib"] = t.peak_memory_bytes / 2**30
            mlflow.log_metrics(metrics, step=step)
        mlflow.log_metrics({"evaluations": outcome.evaluations, "cache_hits": outcome.cache_hits,
                            "infeasible": outcome.infeasible, "pruned": outcome.pruned, "wall_s": outcome.wall_s})
        best = outcome.best()
        if best is not None:
            mlflow.log_params({f"best.{k}": v for k, v in best.config.items()})
            mlflow.log_metric("best_iteration_time_ms", best.iteration_time_ms)
            if best.tokens_per_s:
                mlflow.log_metric("best_tokens_per_s", best.tokens_per_s)
        gain = speedup(outcome)
        if gain is not None:
            mlflow.log_metric("speedup_vs_baseline", gain)
        mlflow.log_dict(trials_table(outcome), "trials.json")
        mlflow.log_artifact(str(plot))
        return run.info.run_id


def print_summary(outcome: SearchOutcome, hardware: str, plot: Path | None, console=None) -> None:
    """The terminal summary: counts, the best configuration and its speed-up, the best-so-far curve."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"Search ({outcome.sampler}) on {hardware}", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("proposals", str(len(outcome.trials)))
    table.add_row("evaluations (emulated / cache hits)",
                  f"{outcome.evaluations} ({outcome.emulated} / {outcome.cache_hits})")
    table.add_row("infeasible (out of memory)", str(outcome.infeasible))
    table.add_row("pruned before emulation", str(outcome.pruned))
    if outcome.errors:
        table.add_row("failed", str(outcome.errors))
    table.add_row("wall time", f"{outcome.wall_s:.1f} s")
    best = outcome.best()
    if best is not None:
        table.add_row("best", format_config(best.config))
        table.add_row("  iteration time", f"{best.iteration_time_ms:.3f} ms")
        if best.tokens_per_s:
            table.add_row("  tokens/s", f"{best.tokens_per_s:,.0f}")
        if best.peak_memory_bytes:
            table.add_row("  peak memory", f"{best.peak_memory_bytes / 2**30:.2f} GiB")
    if outcome.baseline is not None:
        base = outcome.baseline
        shown = f"{base.iteration_time_ms:.3f} ms" if base.feasible else f"{base.status}: {base.reason}"
        table.add_row("baseline", f"{format_config(base.config)}: {shown}")
        gain = speedup(outcome)
        if gain is not None:
            table.add_row("speed-up over baseline", f"{gain:.2f}x")
    if plot is not None:
        table.add_row("plot", str(plot))
    console.print(table)
    for line in text_curve(outcome):
        console.print(line, markup=False, highlight=False)
