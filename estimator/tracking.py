"""Where MLflow runs and registered models live: MLFLOW_TRACKING_URI when set, else sqlite:///<repo>/mlflow.db."""
from __future__ import annotations

import os

from profiling.paths import REPO_ROOT


def tracking_uri(configured: str | None = None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{REPO_ROOT / 'mlflow.db'}"
