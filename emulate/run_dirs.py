"""Capture folders of ``stepcast run``: one per run, locked while the run uses it.

Two runs that shared a folder would read each other's ``rank0.log`` and report a mix of both scripts with exit 0.
So by default each run captures into a folder of its own, ``<cache>/runs/<YYYYmmdd-HHMMSS>-<pid>/``
(:func:`profiling.paths.cache_root`), and the report names it (``capture_dir``); a folder given with
``--trace-dir`` is locked (``fcntl.flock`` on ``<folder>/.stepcast.lock``) and refused while another run holds it.
Old run folders are pruned when a run starts: the newest ``KEEP_RUNS`` (setting ``STEPCAST_KEEP_RUNS``) are kept,
and a folder a live run holds is never removed.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

from stepcast.profiling.paths import cache_root
from stepcast import settings
from stepcast.errors import InputError

KEEP_RUNS: int = settings.SETTINGS["STEPCAST_KEEP_RUNS"].default
LOCK_NAME = ".stepcast.lock"


class CaptureDirBusy(InputError):
    """Another run holds the capture folder; the message (one line) names it and what to do."""


def runs_root() -> Path:
    return cache_root() / "runs"


def keep_runs() -> int:
    """How many run folders to keep (``STEPCAST_KEEP_RUNS``, at least 1: the one this run is about to make)."""
    return settings.get("STEPCAST_KEEP_RUNS")


class CaptureDir:
    """An exclusive hold on a capture folder for the life of a run (released on close or when the process ends,
    however it ends: the lock is the kernel's)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise CaptureDirBusy(f"capture folder {self.path} is in use by another run (pid {holder}): pass another "
                                 "--trace-dir, or none for a folder of this run's own") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def clear_previous_capture(self) -> None:
        """A folder reused by a later run: remove the earlier run's logs and traces so none is read as this one's."""
        for stale in [*self.path.glob("rank*.log*"), *self.path.glob("rank*.trace.json*")]:
            stale.unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "CaptureDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def new_run_dir() -> CaptureDir:
    """A fresh, locked folder for this run under :func:`runs_root`, after pruning old ones."""
    root = runs_root()
    prune_runs(root, keep_runs() - 1)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = root / f"{stamp}-{os.getpid()}"
    n = 1
    while path.exists():  # the same second and pid: only after pid reuse, but never share a folder
        path = root / f"{stamp}-{os.getpid()}-{n}"
        n += 1
    return CaptureDir(path)


def prune_runs(root: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` run folders under ``root`` (newest by name: they start with their start
    time; a modification time would move whenever a lock is taken), skipping any that a live run holds; returns
    the folders removed."""
    if not root.is_dir():
        return []
    folders = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)
    removed = []
    for folder in folders[keep:]:
        try:
            held = CaptureDir(folder)
        except CaptureDirBusy:
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            held.close()
        removed.append(folder)
    return removed
