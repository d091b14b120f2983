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
