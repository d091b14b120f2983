"""What the two Hydra apps (``stepcast profile`` = ``python -m profiling``, ``stepcast train`` =
``python -m estimator.train``) share: where Hydra's own output goes, and how the console command hands them its
arguments.

Hydra writes a folder per run (the composed config under ``.hydra/`` and a log). Left to its default that folder
is ``./outputs/...`` in whatever directory the user stands in; the configs put it under the stepcast cache instead
(``${stepcast_cache:outputs/profiling}``), next to the emulator's captures, so one documented place holds both."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from profiling.paths import cache_root

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
    from profiling.errors import run_hydra_app

    register_resolvers()
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        run_hydra_app(app)
    finally:
        sys.argv = saved
    return 0
