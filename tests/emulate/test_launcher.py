"""emulate.launcher: how rank processes are started (the lifecycle faults are in test_launcher_lifecycle.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulate.launcher import ADDR_NO_RANDOMIZE

REPO = Path(__file__).resolve().parents[2]


def child_personality(setup: str) -> int:
    """The personality flags of a program executed by a Python process after ``setup`` ran in it."""
    code = (f"{setup}\nimport subprocess\n"
            "print(subprocess.run(['cat', '/proc/self/personality'], capture_output=True, text=True).stdout)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return int(done.stdout.strip(), 16)


@pytest.mark.skipif(not Path("/proc/self/personality").exists(), reason="needs Linux /proc")
def test_programs_started_after_fixed_layout_run_without_address_randomisation():
    assert child_personality("from emulate.launcher import fixed_layout; fixed_layout()") & ADDR_NO_RANDOMIZE
    assert not child_personality("pass") & ADDR_NO_RANDOMIZE


def test_a_fixed_layout_is_the_default_and_the_variable_turns_it_off():
    read = "import emulate.config as c; print(c.FIXED_LAYOUT)"
    on = subprocess.run([sys.executable, "-c", read], cwd=REPO, capture_output=True, text=True, check=True)
    off = subprocess.run([sys.executable, "-c", read], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "STEPCAST_FIXED_LAYOUT": "0"})
    assert (on.stdout.strip(), off.stdout.strip()) == ("True", "False")
