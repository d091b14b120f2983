"""MLflow bookkeeping for trained estimators: tracking URI, model logging, registration, champion alias.

Tracking store: ``mlflow.tracking_uri`` in the config, else MLFLOW_TRACKING_URI, else sqlite:///<repo>/mlflow.db.
Registered name: ``kernel-runtime-<family>``. The alias ``champion`` moves to a new version only when that version's
error on the fixed evaluation split (:func:`estimator.splits.fixed_eval`) is lower than the current champion's on the
same rows; the run records both figures (``fixed_eval_mean_ape``, ``champion_fixed_eval_mean_ape``) and a
``promoted`` tag.

Failing fast: left to itself MLflow retries an unreachable server for minutes (7 retries with exponential backoff,
120 s per request) and a SQLite file it cannot open for about 100 s (a fixed retry loop in its SQLAlchemy store,
with a warning and a traceback each time). :func:`connect` checks the store first (a TCP connection to a server, a
write transaction on a SQLite file, seconds at most) and bounds MLflow's HTTP retries; every failure becomes a
:class:`TrackingError`, one line naming the tracking URI.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import pandas as pd

from stepcast.profiling.paths import user_data_root
from stepcast.errors import UnavailableError

CHAMPION = "champion"
MODEL_FILE = Path(__file__).with_name("mlflow_model.py")

#: MLflow's HTTP client settings used unless the environment sets them: a few retries a second apart and 15 s per
#: request, so a server that stops answering fails a command within a minute rather than after many
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
#: seconds allowed for the reachability check (a TCP connect, or SQLite's wait for a lock)
CONNECT_TIMEOUT_S = 3.0
#: port of each server scheme when the URI gives none
DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}


class TrackingError(UnavailableError):
    """The MLflow tracking store cannot be reached or written; one line naming the tracking URI."""


def tracking_uri(configured: str | None = None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{user_data_root() / 'mlflow.db'}"


def shown(uri: str) -> str:
    """The URI as error messages show it: any password replaced by ***."""
    parts = urlsplit(uri)
    if parts.password:
        return uri.replace(f":{parts.password}@", ":***@", 1)
    return uri


def connect(uri: str) -> str:
    """Check that the tracking store at ``uri`` answers (and, for SQLite, can be written), bound MLflow's HTTP
    retries, and point MLflow at it; raise TrackingError within seconds otherwise."""
    import mlflow

    for name, value in HTTP_SETTINGS.items():
        os.environ.setdefault(name, value)
    scheme = urlsplit(uri).scheme.split("+")[0]
    if scheme == "sqlite":
        _check_sqlite(uri)
    elif scheme in DEFAULT_PORTS:
        _check_server(uri, scheme)
    mlflow.set_tracking_uri(uri)
    return uri


def _check_sqlite(uri: str) -> None:
    database = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
    if not database or database == ":memory:":
        return
    path = Path(database)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(path, timeout=CONNECT_TIMEOUT_S)) as db:
            db.execute("BEGIN IMMEDIATE")  # takes the write lock: fails on a read-only file, folder or database
            db.rollback()
    except (OSError, sqlite3.Error) as exc:
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TrackingError(f"MLflow tracking store {uri}: cannot write the SQLite database {path} ({reason}); "
                            "set mlflow.tracking_uri or MLFLOW_TRACKING_URI to a writable store") from None


def _check_server(uri: str, scheme: str) -> None:
    parts = urlsplit(uri)
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise TrackingError(f"MLflow tracking URI {shown(uri)}: not a valid port") from None
    if not parts.hostname:
        raise TrackingError(f"MLflow tracking URI {shown(uri)}: no host name")
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or "timed out"
        raise TrackingError(f"MLflow tracking server {shown(uri)} is unreachable ({reason} within "
                            f"{CONNECT_TIMEOUT_S:g} s); start it, or set mlflow.tracking_uri or MLFLOW_TRACKING_URI"
                            ) from None


@contextlib.contextmanager
def tracking_errors(uri: str) -> Iterator[None]:
    """Turn MLflow's failures to read or write the store (after its bounded retries) into one-line TrackingErrors."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        first = next((line.strip() for line in str(exc.message).splitlines() if line.strip()), "failed")
        raise TrackingError(f"MLflow tracking store {shown(uri)}: {first[:300]}") from None


def use_experiment(name: str, uri: str) -> None:
    """Point MLflow at ``uri`` (checked by :func:`connect`) and select experiment ``name``, creating it if needed.
    With a SQLite store the experiment's artifacts go beside the database (``<db folder>/mlartifacts/<name>``)
    rather than into ``./mlruns`` of whatever folder the command happened to run from."""
    import mlflow

    connect(uri)
    with tracking_errors(uri):
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

    from stepcast.estimator.registry import load_mlflow

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
