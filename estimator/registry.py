"""``estimator.load(source)``: one way to get an estimator, whatever it is and wherever it lives.

``source`` may be
- ``None``: the shipped default bundle (``models/xgboost``; a fresh clone predicts with no registry configured),
  falling back to the roofline for families the bundle does not cover, or to the roofline alone when no bundle is
  present. The environment variable STEPCAST_ESTIMATOR, when set, replaces ``None`` with its value;
- a name: a bundle folder of that name among the user's bundles (``STEPCAST_DATA_DIR``'s ``models/``) or the
  shipped ones (``models/<name>``: "xgboost", "mlp"), or an entry point of the group ``stepcast.estimators``
  ("roofline" and any third-party estimator);
- a local path: a bundle folder (``manifest.json``) or a single estimator folder (``meta.json``);
- an MLflow URI: ``models:/kernel-runtime-gemm@champion``, ``models:/kernel-runtime-gemm/3``, ``runs:/<id>/model``.

Whatever is loaded is wrapped so that it takes a frame of mixed families: families it does not cover go to the
roofline, and the ``estimator`` / ``in_range`` columns of ``predict_frame`` show it.

Registering a third-party estimator: in the package's pyproject.toml::

    [project.entry-points."stepcast.estimators"]
    my-estimator = "my_package.module:MyEstimator"

where ``MyEstimator`` is a :class:`estimator.base.KernelEstimator` subclass (or any callable returning one, called
with the keyword arguments given to ``load``). An optional ``families`` attribute (tuple of family names) says which
families it covers; without one it is trusted with every family. After ``pip install``,
``estimator.load("my-estimator")``
and ``stepcast predict --model my-estimator`` use it.
"""
from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.bundle import is_bundle, is_estimator_dir, load_estimator_dir
from stepcast.estimator.router import FamilyRouter
from stepcast.profiling.families import FAMILIES
from stepcast.profiling.paths import MODELS_DIR, bundle_dirs
from stepcast import settings
from stepcast.errors import InputError

ENTRY_POINT_GROUP = "stepcast.estimators"
DEFAULT_BUNDLE = "xgboost"
MLFLOW_SCHEMES = ("models:/", "runs:/", "mlflow-artifacts:/")


def load(source: str | Path | None = None, **kwargs) -> KernelEstimator:
    """Load an estimator (see the module docstring for what ``source`` may be)."""
    if source is None:
        source = settings.get("STEPCAST_ESTIMATOR")
    if source is None:
        default = MODELS_DIR / DEFAULT_BUNDLE
        return _wrap(FamilyRouter.load(default)) if is_bundle(default) else _wrap(RooflineEstimator())
    text = str(source)
    if text.startswith(MLFLOW_SCHEMES):
        return _wrap(load_mlflow(text))
    path = Path(text).expanduser()
    if path.exists():
        return _wrap(load_path(path))
    named = next((folder / text for folder in bundle_dirs() if is_bundle(folder / text)), None)
    if named is not None:
        return _wrap(FamilyRouter.load(named))
    return _wrap(load_entry_point(text, **kwargs))


def load_path(path: Path) -> KernelEstimator:
    if is_bundle(path):
        return FamilyRouter.load(path)
    if is_estimator_dir(path):
        return load_estimator_dir(path)
    raise InputError(f"{path}: not an estimator bundle (expected manifest.json or meta.json inside)")


def available_names() -> list[str]:
    """Bundle names (the user's and the shipped ones) and entry-point names, for error messages and --help."""
    bundles = sorted({p.name for folder in bundle_dirs() if folder.is_dir() for p in folder.glob("*") if is_bundle(p)})
    points = sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | {"roofline"})
    return bundles + [p for p in points if p not in bundles]


def load_entry_point(name: str, **kwargs) -> KernelEstimator:
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if matches:
        factory = matches[0].load()
    elif name == "roofline":  # also without an installed distribution (a plain checkout on sys.path)
        factory = RooflineEstimator
    else:
        raise InputError(f"unknown estimator '{name}': expected a path, an MLflow URI (models:/...) or one of "
                         f"{', '.join(available_names())}")
    model = factory(**kwargs)
    if not isinstance(model, KernelEstimator):
        raise TypeError(f"entry point '{name}' ({matches[0].value if matches else name}) returned "
                        f"{type(model).__name__}, expected a KernelEstimator")
    return model


def load_mlflow(uri: str) -> KernelEstimator:
    """Download a registered model's artifacts and load the bundle inside (never unpickles anything)."""
    import mlflow

    from stepcast.estimator.tracking import connect, tracking_errors, tracking_uri

    store = connect(tracking_uri())
    with tracking_errors(store):
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    for candidate in [local, *sorted(p.parent for p in local.rglob("manifest.json")),
                      *sorted(p.parent for p in local.rglob("meta.json"))]:
        if is_bundle(candidate) or is_estimator_dir(candidate):
            return load_path(candidate)
    raise InputError(f"{uri}: the model's artifacts hold no estimator bundle (manifest.json or meta.json)")


def _wrap(model: KernelEstimator) -> KernelEstimator:
    """Give every loaded estimator the mixed-family behaviour of a router."""
    if isinstance(model, FamilyRouter):
        return model
    families = getattr(model, "families", None)
    if isinstance(model, RooflineEstimator) or families is None:
        return FamilyRouter({f: model for f in FAMILIES}, fallback=RooflineEstimator(), fallback_rule="never",
                            version=model.version)
    return FamilyRouter({f: model for f in families}, version=model.version)
