"""The errors a user can cause, and how every command reports them: one line on stderr, ``stepcast: <what>``, and the
error's exit status.

Every exception class the product raises for a user to read derives from :class:`StepcastError`, which carries its
exit status (``exit_code``: 2 bad input, 3 the script failed, 128+N stopped by signal N, as ``stepcast --help``
says). A command catches that class alone (:func:`cli_main`, or :func:`exit_on_error` inside a Hydra task); any other
exception is a bug and keeps its traceback (exit 1), so a bug is never reported as bad input.

Each package keeps its own classes (``TraceFormatError``, ``KernelInputError``, ...) for the callers that handle one
kind of problem; they derive from the shared classes here, which say what kind of problem it is. Classes that are
also a ``ValueError`` (``KeyError``, ``RuntimeError``) keep the internal handlers that caught them working.

Only the standard library is imported, so every package (the capture layer inside the user's process included) can
raise these without pulling anything else in.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

PROG = "stepcast"
BAD_INPUT = 2
SCRIPT_FAILED = 3


class StepcastError(Exception):
    """Base of every error a user can cause or fix; its message is one line saying what and, where it helps, how
    to fix it. ``exit_code`` is the command's exit status for it (2: bad input)."""
    exit_code: int = BAD_INPUT


class InputError(StepcastError, ValueError):
    """Bad input: a file, an option, a setting, a config or a trace that cannot be used as given. The message names
    the file or field and what was expected."""


class UnknownNameError(InputError, KeyError):
    """A name that is not in a catalog (a hardware id, a model name); the message lists what the catalog holds.
    Also a ``KeyError``, for the lookups that treat it as a missing key."""

    def __str__(self) -> str:  # KeyError quotes its message; the one-line error is plain
        return str(self.args[0]) if self.args else ""


class MissingFileError(InputError, FileNotFoundError):
    """A file the command needs is not there (a file the user named, a wheel a command fetches); the message says
    which, and how to get it where there is a way."""

    def __str__(self) -> str:  # OSError's str() would show its errno fields; the message alone is the one line
        return str(self.args[0]) if self.args else ""


class UnavailableError(StepcastError, RuntimeError):
    """This machine lacks something the command needs (a CUDA build of torch, a compiler, a GPU, an optional
    package, a reachable Ray cluster or MLflow store) or the request is beyond what the emulator can do; the message
    says what and how to get it."""


class ScriptFailed(StepcastError):
    """The user's training script itself failed (a real run that exited non-zero); exit status 3."""
    exit_code = SCRIPT_FAILED


class Interrupted(StepcastError):
    """The command was stopped by signal ``signum`` (SIGINT, SIGTERM) and stopped what it ran; exit status
    128 + ``signum``, as a shell reports a process the signal killed."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        import signal

        self.signum = signum
        try:
            self.name = signal.Signals(signum).name
        except ValueError:  # an exit status above 128 that names no signal of this platform
            self.name = f"signal {signum}"
        self.exit_code = 128 + signum
        super().__init__(message or f"stopped by {self.name}")


def one_line(message: object) -> str:
    """``message`` as a single line: blank lines dropped, each line's runs of spaces squeezed, and text from a
    ``Config search path`` line on left out (Hydra ends its errors with it, which says nothing to a user who
    mistyped a value). An exception with no message gives its class name."""
    kept: list[str] = []
    for line in str(message).splitlines():
        if line.startswith("Config search path"):
            break
        if line.strip():
            kept.append(" ".join(line.split()))
    return " ".join(kept) or (type(message).__name__ if isinstance(message, BaseException) else "")


def report(error: StepcastError | str) -> int:
    """Print ``stepcast: <error>`` on one line of stderr; return the exit status for it (a message alone: 2)."""
    print(f"{PROG}: {one_line(error)}", file=sys.stderr)
    return error.exit_code if isinstance(error, StepcastError) else BAD_INPUT


def cli_main(command: Callable[..., int | None]) -> Callable[..., int]:
    """Decorate a command's entry point (``main``): it returns its exit status, a :class:`StepcastError` becoming
    one line (:func:`report`) and the error's ``exit_code``; anything else propagates with its traceback."""
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            return command(*args, **kwargs) or 0
        except StepcastError as exc:
            return report(exc)

    return run


def fail(error: StepcastError | str) -> NoReturn:
    """End the process now with ``error`` reported (:func:`report`)."""
    sys.exit(report(error))


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Inside a task that cannot return a status (a Hydra task: an exception that leaves it makes Hydra print an
    extra 'Error executing job' line first): a :class:`StepcastError` ends the process with one line and its
    ``exit_code``."""
    try:
        yield
    except StepcastError as exc:
        fail(exc)
