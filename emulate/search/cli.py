"""``stepcast search CONFIG [key=value ...]``: search a training script's configurations on virtual GPUs.

CONFIG is a config name under conf/search (``megatron_gpt``) or a path to a YAML file; ``key=value`` arguments are
Hydra overrides of it (``search.sampler=grid gpus=16 search.max_evaluations=20``). Exit codes: 0 a best
configuration was found, 1 no configuration is feasible (one line says why), 2 bad input (config, hardware,
tracking store), 130 interrupted (run the same command again: it resumes from the cache).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stepcast.profiling import paths
from stepcast.profiling.paths import cache_root
from stepcast import settings
from stepcast.errors import cli_main
from stepcast.preflight import Preflight, refuse_bad_environment

CONF_DIR = paths.CONF_DIR / "search"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="config name under conf/search, or a path to a search YAML file")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the config (key=value)")
    parser.add_argument("--jobs", type=int, default=1, help="trials emulated at once on this machine (default 1)")
    parser.add_argument("--ray-address", default=None,
                        help="run the trials on a Ray cluster at this address (needs the 'ray' extra)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="trial cache (default <stepcast cache>/search; shared by every search)")
    parser.add_argument("--output", type=Path, default=None,
                        help="folder for trials.json and trials.png (default <stepcast cache>/search/<name>-<sampler>)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to the MLflow tracking store")
    parser.add_argument("--trial-timeout", default=None, help="seconds one emulation may take")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``search`` subcommand to ``python -m stepcast.emulate``'s subparsers."""
    parser = subparsers.add_parser("search", help="search training configurations with the emulator as evaluator",
                                   description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.set_defaults(func=run_command)
    return parser


def load_config(config: str, overrides: list[str]):
    """The validated :class:`~emulate.search.space.SearchConfig` of a config name or file, with Hydra overrides."""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from stepcast.emulate.search.space import SearchConfigError, parse_config

    path = Path(config)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise SearchConfigError(f"{config}: no such config file")
        directory, name = path.resolve().parent, path.stem
    else:
        directory, name = CONF_DIR, config
        if not (CONF_DIR / f"{name}.yaml").is_file():
            known = ", ".join(sorted(p.stem for p in CONF_DIR.glob("*.yaml")))
            raise SearchConfigError(f"{config}: no config of that name in {CONF_DIR} (known: {known})")
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            raw = OmegaConf.to_container(compose(config_name=name, overrides=overrides), resolve=True)
    except (HydraException, OmegaConfBaseException) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise SearchConfigError(f"{directory / name}.yaml: {first}") from None
    except yaml.YAMLError as exc:  # Hydra lets the YAML parser's own error through
        raise SearchConfigError(yaml_problem(exc, directory / f"{name}.yaml")) from None
    raw.setdefault("name", name)
    return parse_config(raw, f"{directory / name}.yaml")


def yaml_problem(exc: Exception, path: Path) -> str:
    """A YAML syntax error in one line: the file and where in it, then the parser's words (``while parsing a flow
    sequence: expected ',' or ']', but got '<stream end>'``)."""
    mark = getattr(exc, "problem_mark", None)
    source = mark.name if mark is not None and not mark.name.startswith("<") else str(path)
    where = f": line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = ": ".join(part for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part)
    return f"{source}{where}: {what or type(exc).__name__}"


def run_command(ns: argparse.Namespace) -> int:
    from stepcast.emulate.search.samplers import Search, TrialInterrupted
    from stepcast.emulate.search.space import SearchConfigError
    from stepcast.emulate.search.trials import Target, TrialCache, default_cache_dir
    from stepcast.estimator.tracking import connect, tracking_uri

    check = Preflight()  # every mistake before the first trial (stepcast.preflight)
    if ns.jobs < 1:
        check.add("--jobs: expected at least 1")
    if ns.trial_timeout is not None:
        ns.trial_timeout = check.value("--trial-timeout", ns.trial_timeout, settings.POSITIVE_NUMBER)
    if ns.output is not None:
        check.output_folder("--output", ns.output)
    check.output_folder("--cache-dir" if ns.cache_dir else "STEPCAST_CACHE_DIR", ns.cache_dir or default_cache_dir())
    cfg = spec = None
    try:
        cfg = load_config(ns.config, ns.overrides)
    except SearchConfigError as exc:
        check.add(str(exc))
    else:
        spec = check.gpu("hardware", cfg.hardware)
    refused = check.refuse()
    if refused is not None:
        return refused
    uri = None
    if not ns.no_mlflow:
        uri = connect(tracking_uri())
    target = Target(hardware=spec.id, spec_json=spec.model_dump_json(), nproc=cfg.nproc, nodes=cfg.nodes,
                    memory_gib=spec.memory_gib)
    cache = TrialCache(ns.cache_dir or default_cache_dir())
    search = Search(cfg, target, cache, jobs=ns.jobs, timeout_s=ns.trial_timeout, progress=print_progress)
    try:
        if ns.ray_address:
            from stepcast.emulate.search.ray_adapter import run_on_ray

            outcome = run_on_ray(search, ns.ray_address)
        else:
            outcome = search.run()
    except (TrialInterrupted, KeyboardInterrupt):
        print("stepcast: search interrupted; results so far are cached: run the same command again to resume",
              file=sys.stderr)
        return 130
    return finish(cfg, outcome, spec.id, ns, uri)


def finish(cfg, outcome, hardware: str, ns: argparse.Namespace, uri: str | None) -> int:
    """Write trials.json and the plot, log to MLflow, print the summary; exit 1 with one line if nothing fits."""
    from stepcast.profiling.atomic import write_json_atomic
    from stepcast.emulate.search.samplers import no_feasible_reason
    from stepcast.emulate.search.tracking import log_to_mlflow, plot_trials, print_summary, trials_table

    out = ns.output or cache_root() / "search" / f"{cfg.name}-{outcome.sampler}"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "trials.json", trials_table(outcome))
    plot = plot_trials(outcome, out / "trials.png", f"{cfg.name}: {outcome.sampler} on {cfg.gpus}x {hardware}")
    if uri is not None:
        params: dict[str, Any] = {"name": cfg.name, "script": cfg.script, "hardware": hardware, "gpus": cfg.gpus,
                                  "nodes": cfg.nodes, "sampler": outcome.sampler, "seed": cfg.search.seed,
                                  "space": cfg.space, "fixed": cfg.fixed}
        run_id = log_to_mlflow(outcome, uri, params, plot)
        print(f"MLflow run {run_id} in experiment stepcast-search ({uri})")
    if outcome.best() is None:
        print(f"stepcast: {no_feasible_reason(outcome)}", file=sys.stderr)
        return 1
    print_summary(outcome, hardware, plot)
    return 0


def print_progress(result) -> None:
    from stepcast.emulate.search.space import format_config

    if result.feasible:
        what = f"{result.iteration_time_ms:.3f} ms" + (f", {result.tokens_per_s:,.0f} tokens/s"
                                                       if result.tokens_per_s else "")
    else:
        what = f"{result.status}: {result.reason}"
    source = " (cached)" if result.cached else ""
    print(f"  {format_config(result.config)}: {what}{source}", flush=True)


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepcast search", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    refused = refuse_bad_environment()
    return refused if refused is not None else run_command(ns)
