"""emulate/import_hooks.py: a patch runs on a module now if imported, else right after its first import, once."""
from __future__ import annotations

import sys
import textwrap

from stepcast.emulate.import_hooks import after_import


def test_a_patch_runs_now_on_an_imported_module_and_after_import_on_a_later_one(tmp_path, monkeypatch):
    seen = []
    after_import("json", lambda module: seen.append(module.__name__))
    assert seen == ["json"]
    (tmp_path / "stepcast_later_module.py").write_text(textwrap.dedent("""
        VALUE = 1
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    after_import("stepcast_later_module", lambda module: seen.append(module.VALUE))
    after_import("stepcast_later_module", lambda module: setattr(module, "VALUE", 2))
    assert seen == ["json"]                       # nothing imported it yet
    import stepcast_later_module                  # noqa: F401
    assert seen == ["json", 1] and sys.modules["stepcast_later_module"].VALUE == 2
    del sys.modules["stepcast_later_module"]


def test_a_function_is_wrapped_once_and_a_missing_one_or_an_unchanged_wrap_is_left_alone():
    import functools
    import types

    from stepcast.emulate.import_hooks import wrap_once

    def library(x):
        return x

    @functools.wraps(library)
    def decorated(x):          # the library's own decorator: __wrapped__ is not our mark
        return library(x)

    owner = types.SimpleNamespace(f=decorated)
    wrap_once(owner, "f", lambda f: lambda x: f(x) + 1)
    first = owner.f
    wrap_once(owner, "f", lambda f: lambda x: f(x) + 1)
    assert owner.f is first and owner.f(1) == 2 and first.__stepcast__
    wrap_once(owner, "g", lambda f: f)          # no such function
    wrap_once(None, "f", lambda f: f)           # no owner
    kept = types.SimpleNamespace(f=library)
    wrap_once(kept, "f", lambda f: f)           # a wrap that gives it back: nothing replaced, nothing marked
    assert kept.f is library and not hasattr(library, "__stepcast__")
