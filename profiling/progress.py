"""Progress of long work, one way for every command: a rich bar on a terminal, plain throttled lines elsewhere.

A live display in a log file, a pipe or CI prints every refresh and cuts long names to the default width, so off a
terminal progress is :class:`LineProgress`: a rich ``Progress`` whose display is disabled and which prints one
plain line when a task starts and then at most one every ``interval_s`` seconds. The profiler
(:mod:`profiling.runner`, one task per family, "N/M points") and the replay (:mod:`emulate.replay`, one task per
stage, "stepcast: stage 40% (12 s)") differ only in how a line reads (``line``) and in whether a short run says
anything at all (``quiet_s``).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, Task, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

#: how a line reads: (task, seconds since the progress began) -> text
LineFormat = Callable[[Task, float], str]


def points_line(task: Task, elapsed_s: float) -> str:
    """The profiler's line: ``gemm: 120/400 points, 35 s, about 80 s left; now <point>``."""
    eta = f", about {task.time_remaining:.0f} s left" if task.time_remaining is not None else ""
    current = task.fields.get("current") or ""
    return (f"{task.description}: {task.completed:.0f}/{task.total:.0f} points, {task.elapsed or 0:.0f} s{eta}"
            f"{'; now ' + current if current else ''}")


def stage_line(task: Task, elapsed_s: float) -> str:
    """A stage's line: ``stepcast: converting device ops 40% (12 s)`` (no share for a stage of one step)."""
    total = task.total or 1
    share = f" {100.0 * task.completed / total:.0f}%" if total > 1 else ""
    return f"stepcast: {task.description}{share} ({elapsed_s:.0f} s)"


class LineProgress(Progress):
    """A rich ``Progress`` without a live display: one plain line when a task starts, then at most one every
    ``interval_s`` seconds; nothing in the first ``quiet_s`` seconds (a short run says only its result)."""

    def __init__(self, *columns: Any, console: Console, interval_s: float = 5.0, quiet_s: float = 0.0,
                 line: LineFormat = points_line) -> None:
        super().__init__(*columns, console=console, disable=True)
        self.interval_s, self.quiet_s, self.line = interval_s, quiet_s, line
        self._t0 = time.monotonic()
        self._last_line = float("-inf")
        self._last_task: TaskID | None = None

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        self._maybe_print(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._maybe_print(task_id)

    def _maybe_print(self, task_id: TaskID) -> None:
        now = time.monotonic()
        if now - self._t0 < self.quiet_s:
            return
        if task_id == self._last_task and now - self._last_line < self.interval_s:
            return
        self._last_line, self._last_task = now, task_id
        task = next(t for t in self.tasks if t.id == task_id)
        self.console.print(self.line(task, now - self._t0), soft_wrap=True, markup=False, highlight=False)


def make_progress(console: Console, enabled: bool, *, interval_s: float = 5.0, quiet_s: float = 0.0,
                  line: LineFormat = points_line, transient: bool = False) -> Progress:
    """Rich progress bars on a terminal (with the fields ``line`` shows: the profiler's point counts and current
    point, or a stage's share); :class:`LineProgress` otherwise. ``enabled=False``: a progress that shows nothing."""
    if enabled and not console.is_terminal:
        return LineProgress(console=console, interval_s=interval_s, quiet_s=quiet_s, line=line)
    if line is points_line:
        columns: tuple[Any, ...] = (
            TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[current]}", style="dim"))
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                   TimeElapsedColumn())
    return Progress(*columns, console=console, disable=not enabled, transient=transient)
