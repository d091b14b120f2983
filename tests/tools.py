"""The checkout's ``tools/`` scripts as modules for the tests, loaded by their path: ``tools/`` is a folder of
scripts run as ``python tools/<name>.py``, not a package (an installed package of that name would shadow it)."""
from __future__ import annotations

import importlib.util
from types import ModuleType

from stepcast.profiling.paths import REPO_ROOT


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py``, executed once per call under the module name ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
