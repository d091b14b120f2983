"""Where the project's files live. One place, so every package agrees.

Two layouts hold the same tree. In a checkout, ``emulate/``, ``estimator/``, ``profiling/``, ``conf/``, ``models/``
and ``examples/`` are top-level folders of the repository; installed from a wheel, they sit inside the ``stepcast``
package (setup.py maps them). :data:`PACKAGE_ROOT` is the folder holding them in either case, and the data that
ships (the hardware catalog and Hydra configs, the estimator bundles, the example scripts) is found through the
import system as ``stepcast.conf``, ``stepcast.models`` and ``stepcast.examples``, never beside a working directory.
What the user adds (profiled datasets, a described CPU, the MLflow store) goes to a user folder, a setting: in a
checkout the repository itself (as it always was), installed ``$XDG_DATA_HOME/stepcast`` (STEPCAST_DATA_DIR)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import stepcast
from stepcast import settings

#: the folder holding emulate/, estimator/, profiling/ and the shipped data: a checkout's root, or the installed
#: ``stepcast`` package
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: True when run from a source checkout (benchmarks, docs/results and tests exist only there)
IN_CHECKOUT = stepcast.CHECKOUT is not None
#: kept for the modules (benchmarks, tests) that read the checkout's own files: the same folder as PACKAGE_ROOT
REPO_ROOT = PACKAGE_ROOT


def shipped_dir(name: str) -> Path:
    """The folder of the shipped data ``stepcast.<name>`` (conf, models, examples), as the import system finds it:
    a checkout's top-level folder or the installed package's data."""
    spec = importlib.util.find_spec(f"stepcast.{name}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"stepcast.{name}: the shipped data folder is missing from this installation")
    return Path(next(iter(spec.submodule_search_locations)))


CONF_DIR = shipped_dir("conf")
HARDWARE_DIR = CONF_DIR / "hardware"
MODELS_DIR = shipped_dir("models")
EXAMPLES_DIR = shipped_dir("examples")


def user_data_root() -> Path:
    """Where data the user adds goes. Setting: STEPCAST_DATA_DIR; default the checkout (run from one), else
    $XDG_DATA_HOME/stepcast, else ~/.local/share/stepcast."""
    configured = settings.get("STEPCAST_DATA_DIR")
    if configured is not None:
        return configured
    if IN_CHECKOUT:
        return PACKAGE_ROOT
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "stepcast"


def datasets_dir() -> Path:
    """Where the profiler writes and the estimators read measured datasets: ``<user data>/datasets``."""
    return user_data_root() / "datasets"


def bundle_dirs() -> list[Path]:
    """Where an estimator bundle named by its folder name is looked for, first match wins: the user's bundles
    (``<user data>/models``, e.g. ``stepcast train export=~/.local/share/stepcast/models/mine``), then the shipped
    ones (in a checkout both are the repository's models/)."""
    return list(dict.fromkeys([user_data_root() / "models", MODELS_DIR]))


def user_hardware_dir() -> Path:
    """Where a described device is written: ``<user data>/hardware``, read beside the shipped catalog
    (:func:`profiling.hardware.load_catalog`); in a checkout with no STEPCAST_DATA_DIR, the shipped catalog itself
    (the repository's)."""
    if IN_CHECKOUT and settings.get("STEPCAST_DATA_DIR") is None:
        return HARDWARE_DIR
    return user_data_root() / "hardware"


def shared_data_root() -> Path:
    """Root of the third-party measurements (read-only). Setting: STEPCAST_SHARED_DATA, default ../shared/data."""
    return settings.get("STEPCAST_SHARED_DATA") or PACKAGE_ROOT.parent / "shared" / "data"


def cache_root() -> Path:
    """Where built and parsed artefacts are cached (the emulated driver, parsed measurements). Setting:
    STEPCAST_CACHE_DIR, default $XDG_CACHE_HOME/stepcast, else ~/.cache/stepcast."""
    configured = settings.get("STEPCAST_CACHE_DIR")
    if configured is not None:
        return configured
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepcast"
