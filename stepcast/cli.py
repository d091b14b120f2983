"""``stepcast <command> ...``: parse the command line and hand each subcommand to the module that owns it.

argparse subcommands (run, replay, validate, search, predict) are registered from their owners' own parser
builders, so ``stepcast run`` and ``python -m stepcast.emulate run`` accept the same arguments; the Hydra apps (profile,
train), which parse ``sys.argv``, get everything after their name. The benchmarks are not commands of the product:
they run from a checkout as ``python -m benchmarks.<package>.<name>``."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from stepcast.errors import cli_main

PROG = "stepcast"

EPILOG = """\
examples:
  stepcast run -- examples/gpt.py --layers 4 --d-model 1024 --heads 16 --seq 512 --batch 8 --steps 6
  stepcast run --help                    each command's settings, defaults and where its output goes

Captures and Hydra run records go under the cache: STEPCAST_CACHE_DIR, else ~/.cache/stepcast.
Exit codes: 0 done, 2 bad input (one line saying why), 3 the script failed, 128+N stopped by signal N."""

# epilogs for subcommands whose parsers other modules build: each --help ends with an example
REPLAY_EPILOG = """\
The report and the timeline are written only where --report / --trace say.
example:
  stepcast replay rank0.json.gz rank1.json.gz --durations predicted --hardware h100-sxm --report r.json"""
VALIDATE_EPILOG = """\
The comparison is printed; --report / --save-real write files only where they say.
examples:
  stepcast validate -- examples/gpt.py --steps 8          (on a GPU: real vs emulated)
  stepcast validate --real datasets/<gpu>/real_runs/gpt-1.3b.json   (anywhere: a stored run)"""
SEARCH_EPILOG = """\
example:
  stepcast search megatron_gpt search.sampler=grid search.max_evaluations=4 --no-mlflow"""

# commands that parse their own argv (Hydra reads sys.argv)
PASSTHROUGH_HELP = {
    "profile": "measure kernels on this machine into a dataset (Hydra app: key=value settings)",
    "train": "train, evaluate and export kernel-runtime estimators (Hydra app: key=value settings)",
}


def run_profile(argv: list[str]) -> int:
    from stepcast.profiling.__main__ import main as profile_main
    from stepcast.hydra_apps import run_hydra_main

    return run_hydra_main(profile_main, f"{PROG} profile", argv)


def run_train(argv: list[str]) -> int:
    from stepcast.estimator.train import main as train_main
    from stepcast.hydra_apps import run_hydra_main

    return run_hydra_main(train_main, f"{PROG} train", argv)


PASSTHROUGH: dict[str, Callable[[list[str]], int]] = {
    "profile": run_profile, "train": run_train,
}


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; the pass-through commands appear in the listing and parse their own arguments."""
    from stepcast.emulate import replay, validate
    from stepcast.emulate.cli import add_run_parser
    from stepcast.estimator.predict import register as register_predict
    from stepcast.bundled_examples import register as register_examples

    parser = argparse.ArgumentParser(
        prog=PROG, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Predict the step time and peak memory of unmodified PyTorch training scripts on GPUs you do "
                    "not have, on a machine with no GPU.")
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    add_run_parser(sub)
    with_epilog(replay.register(sub), REPLAY_EPILOG)
    validate.register(sub)
    with_epilog(sub.choices["validate"], VALIDATE_EPILOG)
    register_search(sub)
    register_predict(sub)
    register_examples(sub)
    for name, text in PASSTHROUGH_HELP.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def package_version() -> str:
    """The installed distribution's version (a checkout run without installing it says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROG)
    except PackageNotFoundError:
        return "(not installed: run from a checkout)"


def register_search(sub: argparse._SubParsersAction) -> None:
    """``stepcast search`` when :mod:`emulate.search` is installed (it needs the optional 'search' extra)."""
    try:
        from stepcast.emulate.search.cli import register
    except ImportError:
        return
    with_epilog(register(sub), SEARCH_EPILOG)


def with_epilog(parser: argparse.ArgumentParser, epilog: str) -> argparse.ArgumentParser:
    parser.epilog = epilog
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


@cli_main
def main(argv: list[str] | None = None) -> int:
    """A :class:`stepcast.errors.StepcastError` is one line, ``stepcast: <what>``, and its exit status; anything else
    is a bug and keeps its traceback."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PASSTHROUGH:
        from stepcast.preflight import refuse_bad_environment

        refused = refuse_bad_environment()  # the argparse commands check in dispatch
        return refused if refused is not None else PASSTHROUGH[argv[0]](argv[1:])
    from stepcast.emulate.cli import dispatch

    return dispatch(build_parser().parse_args(argv))
