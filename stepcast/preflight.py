"""What a command checks before it starts any work (a build, a capture, a search): its options, the ``STEPCAST_*``
settings they override (:mod:`stepcast.settings`), the hardware it targets, and that the files and folders it
will write can be written. A mistake found after minutes of work, or as a traceback, costs the user those
minutes; found here it is one line, ``stepcast: <setting>: expected <what>, found <value>``, and exit status 2.

    check = Preflight()
    speed = check.option("STEPCAST_HOST_SPEED", "--host-speed", ns.host_speed)
    check.output_file("--report", ns.report)
    if (status := check.refuse()) is not None:
        return status
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepcast import settings
from stepcast.errors import BAD_INPUT, report

if TYPE_CHECKING:
    from stepcast.profiling.hardware import HardwareSpec


class Preflight:
    """Collects every problem found (each one line) and the values parsed on the way, so a user with several
    mistakes hears of all of them at once. A method whose input is bad records why and returns None."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, problem: str) -> None:
        if problem not in self.problems:  # a bad variable is found by environment() and by option() alike
            self.problems.append(problem)

    def environment(self) -> None:
        """Every user-facing ``STEPCAST_*`` variable of this process's environment
        (:func:`stepcast.settings.check_environment`)."""
        for problem in settings.check_environment():
            self.add(problem)

    def option(self, name: str, option: str, given: Any) -> Any:
        """The value of setting ``name`` for this run: ``given`` (the option's text) when given, else the
        variable's."""
        try:
            return settings.parse_option(name, option, given)
        except settings.SettingError as exc:
            self.add(str(exc))
            return None

    def value(self, option: str, given: str | None, kind: settings.Kind) -> Any:
        """An option of no setting of its own (``--nproc``), parsed as ``kind`` takes it."""
        if given is None:
            return None
        try:
            return kind.parse(given, option)
        except settings.SettingError as exc:
            self.add(str(exc))
            return None

    def gpu(self, option: str, hardware: str) -> HardwareSpec | None:
        """The catalog's GPU ``hardware`` (an id or a vendor name); a CPU entry or an unknown name is a problem."""
        from stepcast.profiling.hardware import UnknownHardwareError, lookup

        try:
            spec = lookup(hardware)
        except UnknownHardwareError as exc:
            self.add(f"{option}: {exc}")
            return None
        if spec.kind != "gpu" or spec.compute_capability is None:
            self.add(f"{option}: expected a GPU of the hardware catalog, found {hardware} (a {spec.kind})")
            return None
        return spec

    def input_file(self, option: str, path: Path | None) -> None:
        """``path`` (None: not given) will be read: it must be a file this process can open."""
        if path is None:
            return
        if not Path(path).exists():
            self.add(f"{option}: no file {path}")
        elif Path(path).is_dir():
            self.add(f"{option}: expected a file, found the folder {path}")
        else:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                self.add(f"{option}: cannot read {path} ({exc.strerror or type(exc).__name__})")

    def output_file(self, option: str, path: Path | None) -> None:
        """``path`` (None: not asked for) will be written: its folder must exist and take new files, and it must
        not itself be a folder."""
        if path is None:
            return
        folder = Path(path).absolute().parent
        if Path(path).is_dir():
            self.add(f"{option}: expected a file, found the folder {path}")
        elif not folder.is_dir():
            self.add(f"{option}: expected a file in an existing folder, found {path} (no folder {folder})")
        elif (why := unwritable(folder)) is not None:
            self.add(f"{option}: expected a file in a writable folder, found {path} (cannot create a file in "
                     f"{folder}: {why})")

    def output_folder(self, option: str, path: Path) -> None:
        """``path`` will be written into, and made if it does not exist: it must be a folder that takes new files,
        or be creatable (its nearest existing parent a folder that does)."""
        path = Path(path).absolute()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            what = "" if existing == path else f" ({existing} is a file)"
            self.add(f"{option}: expected a folder, found {path}{what}")
        elif (why := unwritable(existing)) is not None:
            self.add(f"{option}: expected a writable folder, found {path} (cannot create a file in {existing}: "
                     f"{why})")

    def refuse(self) -> int | None:
        """Print each problem as ``stepcast: <problem>`` and return exit status 2; None when there is none."""
        for problem in self.problems:
            report(problem)
        return BAD_INPUT if self.problems else None


def refuse_bad_environment() -> int | None:
    """For a command's entry point: ``stepcast: <problem>`` for each bad ``STEPCAST_*`` variable and exit status
    2, or None when all are good."""
    check = Preflight()
    check.environment()
    return check.refuse()


def unwritable(folder: Path) -> str | None:
    """Why no file can be made in ``folder`` (None: one can). Found by making one (and removing it at once):
    permission bits do not tell for root, read-only mounts or network file systems."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".stepcast-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__
