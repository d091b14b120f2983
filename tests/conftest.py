"""Shared fixtures: the third-party data folder (tests that need it are skipped with a message when it is absent)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import pytest

from profiling.paths import shared_data_root


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = shared_data_root()
    if not root.is_dir():
        pytest.skip(f"shared data folder {root} is absent (set STEPCAST_SHARED_DATA)")
    return root


OWN_MODULES_SCRIPT = textwrap.dedent('''\
    """A user's script whose own modules have the names of the project's folders (profiling, datasets)."""
    from pathlib import Path

    import datasets
    import profiling
    import torch

    here = Path(__file__).resolve().parent
    assert Path(profiling.__file__).resolve() == here / "profiling.py", profiling.__file__
    assert Path(datasets.__file__).resolve() == here / "datasets" / "__init__.py", datasets.__file__
    x = torch.ones(256, 256, device="cuda")
    print("own modules:", profiling.WHO, datasets.WHO, float((x @ x).sum()) >= 0)
''')


@pytest.fixture
def script_with_own_modules() -> Callable[[Path], Path]:
    """Writes, into a folder, a training script beside its own ``profiling.py`` and ``datasets/`` package, which it
    imports and checks it got (it prints ``own modules: profiling datasets True``); returns the script's path."""
    def write(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "profiling.py").write_text('WHO = "profiling"\n')
        (folder / "datasets").mkdir()
        (folder / "datasets" / "__init__.py").write_text('WHO = "datasets"\n')
        script = folder / "train.py"
        script.write_text(OWN_MODULES_SCRIPT)
        return script

    return write
