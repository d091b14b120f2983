"""Shared fixtures: the third-party data folder (tests that need it are skipped with a message when it is absent),
running ``stepcast run --capture-only`` as a user would, and KernelBench's timing files and captures as the
KernelBench tests (the convolution-family training data, the KernelBench benchmarks) need them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest

from stepcast.emulate.trace import read_trace
from stepcast.profiling.paths import REPO_ROOT, shared_data_root


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


EmulateRun = Callable[...,
                      tuple[subprocess.CompletedProcess, dict[str, Any] | None, list[dict[str, Any]]]]


def _emulate_run(tmp: Path, script: Path, *args: str, nproc: int = 1, hardware: str = "h100-sxm",
                 options: tuple[str, ...] = ()):
    """Capture ``script`` on the emulated driver (``options``: more ``run`` options); returns (process, capture report
    or None, per-rank traces)."""
    tmp.mkdir(parents=True, exist_ok=True)  # the run refuses a report in a folder that does not exist
    report = tmp / "report.json"
    cmd = [sys.executable, "-m", "stepcast.emulate", "run", "--hardware", hardware, "--nproc", str(nproc),
           "--capture-only",
           *options,
           "--report", str(report), "--trace-dir", str(tmp / "traces"), "--", str(script), *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    doc = json.loads(report.read_text()) if report.is_file() else None
    traces = [read_trace(p) for p in doc["traces"]] if doc else []
    return proc, doc, traces


@pytest.fixture(scope="session")
def emulate_run() -> EmulateRun:
    return _emulate_run


WriteTimings = Callable[[str, dict[str, dict[str, float]]], Path]


@pytest.fixture
def kernelbench_timings(tmp_path: Path) -> WriteTimings:
    """Writes KernelBench timing files as the shared data lays them out: ``write(file, {folder: {problem.py:
    mean ms}})`` under ``tmp_path`` (returned, the data root)."""
    from stepcast.estimator.kernelbench import TIMINGS

    def write(file: str, timings: dict[str, dict[str, float]]) -> Path:
        for folder, times in timings.items():
            path = tmp_path / TIMINGS / folder / file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"level1": {p: {"mean": ms} for p, ms in times.items()}}))
        return tmp_path

    return write


StepTrace = Callable[[str, list[dict[str, Any]]], Path]


@pytest.fixture
def step_trace(tmp_path: Path) -> StepTrace:
    """Writes a one-rank trace of a KernelBench capture: ``write(hardware, kernels)`` puts an iteration marker
    before, between and after the kernels (one kernel a forward call) and returns the trace's path."""
    from stepcast.emulate.trace import write_trace

    def write(hardware: str, kernels: list[dict[str, Any]]) -> Path:
        events: list[dict[str, Any]] = [{"kind": "iteration", "step": 0}]
        for step, kernel in enumerate(kernels, start=1):
            events += [kernel, {"kind": "iteration", "step": step}]
        path = tmp_path / "rank0.trace.json"
        write_trace(path, rank=0, world_size=1, hardware=hardware,
                    events=[{**ev, "seq": i, "t_ns": i, "gap_ns": 0} for i, ev in enumerate(events)])
        return path

    return write
