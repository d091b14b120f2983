"""Run a Python program in a child process on the emulated driver and collect what the driver logged.

The child finds the driver through ``LD_LIBRARY_PATH`` (no preload); ``CUBLAS_WORKSPACE_CONFIG`` is pinned so
torch's cuBLAS workspace equals the one :mod:`emulate.driver.gemm_choice` offers the heuristic (the workspace size
changes cuBLAS's choice)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stepcast.emulate.driver.build import driver_path
from stepcast.emulate.driver.device import driver_environment
from stepcast.emulate.driver.launchlog import read_events
from stepcast.profiling.hardware import lookup

#: torch's cuBLAS workspace under CUBLAS_WORKSPACE_CONFIG=:4096:8, and what the heuristic query offers: 32 MiB
WORKSPACE_BYTES = 4096 * 1024 * 8
CHILD_TIMEOUT_S = 600


def environment(hardware: str, log_prefix: Path) -> dict[str, str]:
    """The environment of a process that runs on the emulated ``hardware`` and logs to ``log_prefix``."""
    env = dict(os.environ)
    env.update(driver_environment(lookup(hardware)))
    lib = driver_path()
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib.parent), env.get("LD_LIBRARY_PATH", "")) if p)
    env["STEPCAST_DRIVER_LOG"] = str(log_prefix)
    env["CUBLAS_WORKSPACE_CONFIG"] = f":{WORKSPACE_BYTES // 8 // 1024}:8"
    env.pop("LD_PRELOAD", None)
    return env


@dataclass
class ChildRun:
    returncode: int
    stdout: str
    stderr: str
    events: dict[int, list[dict]]  # the driver's log records, per process id

    def launched(self) -> list[str]:
        """Names of every kernel launched, all processes together."""
        return [e["name"] for per in self.events.values() for e in per if e.get("event") == "launch"]


def run_python(args: list[str], hardware: str, *, stdin: str = "", extra_env: dict[str, str] | None = None,
               timeout: float = CHILD_TIMEOUT_S) -> ChildRun:
    """``python <args>`` on the emulated ``hardware`` (``extra_env`` added to its environment)."""
    with tempfile.TemporaryDirectory(prefix="stepcast-driver-") as tmp:
        prefix = Path(tmp) / "driver"
        env = environment(hardware, prefix)
        env.update(extra_env or {})
        proc = subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True, env=env,
                              timeout=timeout)
        events = {int(p.name.split(".")[-2]): read_events(p) for p in Path(tmp).glob("driver.*.jsonl")}
    return ChildRun(proc.returncode, proc.stdout, proc.stderr, events)
