"""How the project's command-line tools report a user's mistake: one line on stderr, ``stepcast: <what>``, exit 2.

One place, so every CLI agrees (``python -m estimator.predict``, ``python -m estimator.train``,
``python -m estimator.bundle_checksums``, ``python -m profiling``, ``python -m profiling.summary``). Status 2 is
what argparse uses for bad usage; a traceback is kept for genuine bugs.

Hydra apps need more: Hydra prints its own errors (a mistyped override, an unknown config option) over several lines
and exits 1, and a traceback for any exception the task raises. The task reports its users' errors itself
(:func:`exit_on`), and :func:`run_hydra_app` reports Hydra's in one line.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Iterator, NoReturn

USAGE_ERROR = 2


def one_line(message: object) -> str:
    """``message`` as a single line: Hydra's messages list options on tab-indented lines and end with the config
    search path, which says nothing to a user who mistyped a value."""
    lines = str(message).splitlines()
    kept: list[str] = []
    for line in lines:
        if line.startswith("Config search path"):
            break
        if line.strip():
            kept.append(" ".join(line.split()))
    return " ".join(kept) or (type(message).__name__ if isinstance(message, BaseException) else "")


def report(message: object) -> int:
    """Print ``stepcast: <message>`` on one line of stderr; return the exit status to use."""
    print(f"stepcast: {one_line(message)}", file=sys.stderr)
    return USAGE_ERROR


def fail(message: object) -> NoReturn:
    sys.exit(report(message))


@contextlib.contextmanager
def exit_on(errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Inside a command (a Hydra task included): ``errors`` end it with one line and exit 2. A Hydra task must exit
    itself: an exception that leaves it makes Hydra print an extra 'Error executing job' line first."""
    try:
        yield
    except errors as exc:
        fail(exc)


def run_hydra_app(app: Callable[[], Any]) -> Any:
    """Call a ``@hydra.main`` function so that Hydra's own config errors (a mistyped override, an unknown option
    of a config group) end in one line and exit 2.

    HYDRA_FULL_ERROR=1 makes Hydra re-raise instead of printing; a user who set it themselves keeps Hydra's full
    report. A bad ``STEPCAST_*`` variable ends it before Hydra composes anything (:mod:`stepcast.preflight`)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from stepcast.preflight import refuse_bad_environment

    refused = refuse_bad_environment()
    if refused is not None:
        sys.exit(refused)

    if os.environ.get("HYDRA_FULL_ERROR"):
        return app()
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        return app()
    except (HydraException, OmegaConfBaseException) as exc:
        cause = exc.__cause__
        fail(one_line(exc) + (f" ({one_line(cause).split(' full_key:')[0]})" if cause else ""))
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)
