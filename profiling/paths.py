"""Where the project's files live. One place, so every package agrees."""
from __future__ import annotations

import os
from pathlib import Path

from stepcast import settings

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
HARDWARE_DIR = CONF_DIR / "hardware"
DATASETS_DIR = REPO_ROOT / "datasets"
MODELS_DIR = REPO_ROOT / "models"


def shared_data_root() -> Path:
    """Root of the third-party measurements (read-only). Setting: STEPCAST_SHARED_DATA, default ../shared/data."""
    return settings.get("STEPCAST_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data"


def cache_root() -> Path:
    """Where built and parsed artefacts are cached (the shim, parsed measurements). Setting: STEPCAST_CACHE_DIR,
    default $XDG_CACHE_HOME/stepcast, else ~/.cache/stepcast."""
    configured = settings.get("STEPCAST_CACHE_DIR")
    if configured is not None:
        return configured
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepcast"
