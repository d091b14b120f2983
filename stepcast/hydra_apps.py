"""What the two Hydra apps (``stepcast profile`` = ``python -m stepcast.profiling``, ``stepcast train`` =
``python -m stepcast.estimator.train``) share: where Hydra's own output goes, how the console command hands them its
arguments, and how their errors end in one line.

Hydra writes a folder per run (the composed config under ``.hydra/`` and a log). Left to its default that folder
is ``./outputs/...`` in whatever directory the user stands in; the configs put it under the stepcast cache instead
(``${stepcast_cache:outputs/profiling}``), next to the emulator's captures, so one documented place holds both."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from stepcast.profiling.paths import cache_root
from stepcast.errors import fail, one_line

RESOLVER = "stepcast_cache"


def cache_path(sub: str = "") -> str:
    """``<cache>/<sub>``: the stepcast cache (STEPCAST_CACHE_DIR, else $XDG_CACHE_HOME/stepcast, else
    ~/.cache/stepcast) as Hydra configs see it through ``${stepcast_cache:sub}``."""
    return str(cache_root() / sub) if sub else str(cache_root())


def register_resolvers() -> None:
    """Make ``${stepcast_cache:...}`` available to configs (idempotent: Hydra apps and tests may both call it)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, cache_path)


def run_hydra_main(app: Callable[[], Any], prog: str, argv: list[str]) -> int:
    """Run a ``@hydra.main`` function as if ``prog argv...`` had been typed: Hydra reads ``sys.argv`` itself."""
    register_resolvers()
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        run_hydra_app(app)
    finally:
        sys.argv = saved
    return 0


def run_hydra_app(app: Callable[[], Any]) -> Any:
    """Call a ``@hydra.main`` function so that Hydra's own config errors (a mistyped override, an unknown option
    of a config group) end in one line and exit 2, as the task's own errors do (the task reports those itself,
    inside :func:`stepcast.errors.exit_on_error`: an exception that leaves a Hydra task makes Hydra print an extra
    'Error executing job' line first).

    Hydra prints its errors over several lines and exits 1; HYDRA_FULL_ERROR=1 makes it re-raise them instead. A
    user who set it themselves keeps Hydra's full report. A bad ``STEPCAST_*`` variable ends it before Hydra
    composes anything (:mod:`stepcast.preflight`)."""
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
    except (HydraException, OmegaConfBaseException) as exc:  # Hydra's config errors are the user's
        cause = exc.__cause__
        fail(one_line(exc) + (f" ({one_line(cause).split(' full_key:')[0]})" if cause else ""))
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)
