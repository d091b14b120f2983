"""MLflow bookkeeping for trained estimators: tracking URI, model logging, registration, champion alias.

Tracking store: ``mlflow.tracking_uri`` in the config, else MLFLOW_TRACKING_URI, else sqlite:///<repo>/mlflow.db.
Registered name: ``kernel-runtime-<family>``. The alias ``champion`` moves to a new version only when that version's
error on the fixed evaluation split (:func:`estimator.splits.fixed_eval`) is lower than the current champion's on the
same rows; the run records both figures (``fixed_eval_mean_ape``, ``champion_fixed_eval_mean_ape``) and a
``promoted`` tag.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from profiling.paths import REPO_ROOT

CHAMPION = "champion"
MODEL_FILE = Path(__file__).with_name("mlflow_model.py")


def tracking_uri(configured: str | None = None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{REPO_ROOT / 'mlflow.db'}"


def use_experiment(name: str, uri: str) -> None:
    """Point MLflow at ``uri`` and select experiment ``name``, creating it if needed. With a SQLite store the
    experiment's artifacts go beside the database (``<db folder>/mlartifacts/<name>``) rather than into ``./mlruns``
    of whatever folder the command happened to run from."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(name) is None:
        location = None
        if uri.startswith("sqlite:///"):
            location = (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts" / name).as_uri()
        mlflow.create_experiment(name, artifact_location=location)
    mlflow.set_experiment(name)


def registered_name(family: str) -> str:
    return f"kernel-runtime-{family}"


@dataclass
class Promotion:
    version: str
    new_error: float
    champion_error: float | None  # None when there was no champion
    promoted: bool


def log_bundle(bundle_dir: Path, family: str, example: pd.DataFrame, predicted_us: pd.Series) -> str:
    """Log the bundle as a pyfunc model (with its signature) in the active run, register it, return the version."""
    import mlflow
    from mlflow.models import infer_signature

    signature = infer_signature(example, pd.DataFrame({"predicted_us": predicted_us.to_numpy()}))
    info = mlflow.pyfunc.log_model(
        name="model", python_model=str(MODEL_FILE), artifacts={"bundle": str(bundle_dir)}, signature=signature,
        input_example=example,
        registered_model_name=registered_name(family), pip_requirements=["stepcast"],
    )
    return str(info.registered_model_version)


def champion_error(family: str, eval_rows: pd.DataFrame, error_of) -> float | None:
    """Error of the current champion on ``eval_rows`` (``error_of(estimator) -> float``); None without a champion."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from estimator.registry import load_mlflow

    try:
        MlflowClient().get_model_version_by_alias(registered_name(family), CHAMPION)
    except MlflowException:
        return None
    return float(error_of(load_mlflow(f"models:/{registered_name(family)}@{CHAMPION}")))


def promote_if_better(family: str, version: str, new_error: float, old_error: float | None) -> Promotion:
    """Move the champion alias to ``version`` only when it wins (or when there is no champion yet)."""
    import mlflow
    from mlflow import MlflowClient

    promoted = old_error is None or new_error < old_error
    if promoted:
        MlflowClient().set_registered_model_alias(registered_name(family), CHAMPION, version)
    mlflow.log_metric("fixed_eval_mean_ape", new_error)
    if old_error is not None:
        mlflow.log_metric("champion_fixed_eval_mean_ape", old_error)
    mlflow.set_tags({"promoted": str(promoted).lower(), "registered_version": version})
    return Promotion(version, new_error, old_error, promoted)
