"""profiling.progress: one progress for every command; plain throttled lines off a terminal."""
import io

from rich.console import Console

from stepcast.profiling.progress import LineProgress, make_progress, stage_line


def _plain(out: io.StringIO) -> Console:
    return Console(file=out, force_terminal=False, width=40)


def test_line_progress_prints_at_most_one_line_per_interval():
    out = io.StringIO()
    progress = make_progress(_plain(out), enabled=True)
    task = progress.add_task("elementwise", total=1000, current="")
    with progress:
        for i in range(1000):
            progress.update(task, current=f"point {i} with a long description that would not fit 40 columns")
            progress.advance(task)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("elementwise: 0/1000 points") and "would not fit 40 columns" in lines[0]


def test_a_new_task_prints_its_first_line_at_once():
    out = io.StringIO()
    progress = make_progress(_plain(out), enabled=True, interval_s=3600.0, line=stage_line)
    with progress:
        for stage in ("reading", "converting", "simulating"):
            task = progress.add_task(stage, total=10)
            progress.update(task, completed=4)
    assert out.getvalue().splitlines() == ["stepcast: reading 40% (0 s)", "stepcast: converting 40% (0 s)",
                                           "stepcast: simulating 40% (0 s)"]


def test_a_short_run_says_nothing_within_its_quiet_period():
    out = io.StringIO()
    progress = make_progress(_plain(out), enabled=True, quiet_s=3600.0, line=stage_line)
    assert isinstance(progress, LineProgress)
    with progress:
        task = progress.add_task("simulating", total=1)
        progress.update(task, completed=1)
    assert out.getvalue() == ""


def test_a_disabled_progress_prints_nothing_even_off_a_terminal():
    out = io.StringIO()
    progress = make_progress(_plain(out), enabled=False)
    with progress:
        progress.update(progress.add_task("gemm", total=2, current=""), completed=2)
    assert out.getvalue() == ""
