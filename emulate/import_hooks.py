"""Patching a library's module right after its first import, for the capture layer's wrappers of library code
(emulate/triton_bytes.py: Inductor's and Triton's launchers; emulate/quick_bench.py: Triton's benchmark loop), so
that a script which never imports the library pays nothing; and the one way those wrappers replace a library's
function (:func:`wrap_once`).

Loaded by its path inside the script's process (emulate/capture.py), like those modules: standard library only.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

Patch = Callable[[ModuleType], None]


class AfterImport(importlib.abc.MetaPathFinder):
    """One finder for every patch: each module's patches run, in the order added, right after it executes."""

    def __init__(self) -> None:
        self.patches: dict[str, list[Patch]] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        patches = self.patches.get(fullname)
        if not patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                for patch in patches:
                    patch(module)

        spec.loader = Loader()
        return spec


_FINDER = AfterImport()


def after_import(name: str, patch: Patch) -> None:
    """Run ``patch(module)`` on module ``name`` now if it is imported, else right after its first import."""
    if name in sys.modules:
        patch(sys.modules[name])
        return
    _FINDER.patches.setdefault(name, []).append(patch)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def wrap_once(owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace ``owner.<name>`` by ``wrap(it)``, marked ``__stepcast__``, unless the owner or the attribute is missing,
    it is ours already (the mark: ``__wrapped__`` alone is any ``functools.wraps`` decorator's, which would leave it
    unwrapped), or ``wrap`` gives it back as it was."""
    current = getattr(owner, name, None) if owner is not None else None
    if current is None or getattr(current, "__stepcast__", False):
        return
    wrapped = wrap(current)
    if wrapped is current:
        return
    wrapped.__stepcast__ = True
    setattr(owner, name, wrapped)
