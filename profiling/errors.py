"""How the project's command-line tools report a user's mistake: one line on stderr, ``stepcast: <what>``, exit 2.

One place, so every CLI agrees (``python -m estimator.predict``, ``python -m estimator.train``,
``python -m estimator.bundle_checksums``, ``python -m profiling``, ``python -m profiling.summary``). Status 2 is
what argparse uses for bad usage; a traceback is kept for genuine bugs.

Hydra apps need a wrapper: Hydra prints its own errors (a mistyped override, an unknown config option) over several
lines and exits 1, and prints a traceback for any exception the task raises. :func:`run_hydra_app` lets those
exceptions reach it instead and reports the expected ones in one line.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, NoReturn

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
            kept.append(line.strip())
    return " ".join(kept)


def report(message: object) -> int:
    """Print ``stepcast: <message>`` on one line of stderr; return the exit status to use."""
    print(f"stepcast: {one_line(message)}", file=sys.stderr)
    return USAGE_ERROR


def fail(message: object) -> NoReturn:
    sys.exit(report(message))


def run_hydra_app(app: Callable[[], Any], user_errors: tuple[type[BaseException], ...]) -> Any:
    """Call a ``@hydra.main`` function; Hydra's own config errors and ``user_errors`` end in one line and exit 2.

    HYDRA_FULL_ERROR=1 makes Hydra re-raise instead of printing; a user who set it themselves keeps Hydra's full
    report of its own errors."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    user_wants_traces = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"
    config_errors: tuple[type[BaseException], ...] = () if user_wants_traces else (HydraException,
                                                                                   OmegaConfBaseException)
    try:
        return app()
    except user_errors as exc:
        fail(exc)
    except config_errors as exc:
        cause = exc.__cause__
        fail(f"{one_line(exc)}" + (f" ({one_line(cause).split(' full_key:')[0]})" if cause else ""))
    finally:
        if not user_wants_traces:
            os.environ.pop("HYDRA_FULL_ERROR", None)
