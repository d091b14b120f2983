"""Shared fixtures: the third-party data folder (tests that need it are skipped with a message when it is absent)."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiling.paths import shared_data_root


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = shared_data_root()
    if not root.is_dir():
        pytest.skip(f"shared data folder {root} is absent (set STEPCAST_SHARED_DATA)")
    return root
