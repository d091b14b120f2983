"""One error base: every exception class of the product derives from StepcastError (or says why it is internal);
no command handler turns a builtin exception (ValueError, KeyError, OSError, ...) into a message or an exit status;
bad input is one ``stepcast: ...`` line and exit 2; any other exception is a bug and keeps its traceback."""
from __future__ import annotations

import ast
import builtins
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepcast.profiling.paths import REPO_ROOT
from stepcast.errors import (
    InputError, Interrupted, MissingFileError, ScriptFailed, UnavailableError, UnknownNameError,
    cli_main, exit_on_error, report,
)

PRODUCT = ("emulate", "estimator", "profiling", "stepcast")
#: benchmark and diagnosis modules leaving the product for benchmarks/ (issue #35); their handlers are theirs
INTERNAL_MARK = "Internal:"  # the docstring of an exception class that never reaches a user starts so, saying why
BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, BaseException)}
#: builtin exceptions a command may end on by name: Ctrl-C, and the exit it asks for
CLI_MAY_CATCH = {"KeyboardInterrupt", "SystemExit"}
#: calls that end a command with a message or a status
REPORTING_CALLS = {"print", "report", "fail", "exit", "error"}


def product_files() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (REPO_ROOT / package).rglob("*.py"))


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def classes_outside_the_base(files: list[Path]) -> list[str]:
    """``file:line Class`` for each exception class defined in ``files`` that does not derive from StepcastError
    and whose docstring does not start with :data:`INTERNAL_MARK`. Bases are resolved by name over all ``files``
    and the builtins; an unknown base named ``*Error``/``*Exception`` (a library's) counts as an exception."""
    defs: dict[str, list[tuple[Path, ast.ClassDef]]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                defs.setdefault(node.name, []).append((path, node))

    def reaches(name: str, targets: set[str], seen: frozenset[str] = frozenset()) -> bool:
        if name in targets:
            return True
        if name in seen or name not in defs:
            return False
        return any(reaches(_base_name(b), targets, seen | {name}) for _, node in defs[name] for b in node.bases)

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in BUILTIN_ERRORS:
            return True
        if name not in defs:
            return name.endswith(("Error", "Exception"))
        return name not in seen and any(is_exception(_base_name(b), seen | {name})
                                        for _, node in defs[name] for b in node.bases)

    found = []
    for name, places in defs.items():
        for path, node in places:
            bases = [_base_name(b) for b in node.bases]
            if not any(is_exception(b) for b in bases) or any(reaches(b, {"StepcastError"}) for b in bases):
                continue
            if name == "StepcastError" or (ast.get_docstring(node) or "").startswith(INTERNAL_MARK):
                continue
            found.append(f"{path.relative_to(path.parents[1]) if len(path.parents) > 1 else path}:{node.lineno} "
                         f"{name}")
    return found


def _caught(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {_base_name(t) for t in types}


def command_handlers_of_builtin_errors(files: list[Path]) -> list[str]:
    """``file:line caught`` for each ``except`` that catches a builtin exception (ValueError, KeyError, OSError,
    Exception, a bare except; not Ctrl-C or SystemExit) and ends the command with it: its body raises nothing and
    reports (``print``, ``report``, ``fail``, ``sys.exit``, ``parser.error``) or returns 2, the bad-input status.
    What ``grep "except ValueError"`` looks for, without the handlers that translate a library's error into a
    :class:`StepcastError` (they raise) or recover from it (they neither report nor return 2: a C callback's
    0 or 1 included)."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ExceptHandler):
                continue
            builtin = sorted(n for n in _caught(node) if n in BUILTIN_ERRORS and n not in CLI_MAY_CATCH)
            if not builtin:
                continue
            inner = [n for stmt in node.body for n in ast.walk(stmt)]
            if any(isinstance(n, ast.Raise) for n in inner):
                continue
            reports = any(isinstance(n, ast.Call) and _base_name(n.func) in REPORTING_CALLS for n in inner)
            status = any(isinstance(n, ast.Return) and isinstance(n.value, ast.Constant) and n.value.value == 2
                         for n in inner)
            if reports or status:
                found.append(f"{path.name}:{node.lineno} {', '.join(builtin)}")
    return found


def test_every_exception_class_of_the_product_derives_from_the_base():
    assert classes_outside_the_base(product_files()) == []


def test_a_planted_exception_class_outside_the_base_is_found(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(textwrap.dedent('''
        from stepcast.errors import InputError

        class BadConfig(ValueError):
            """A config that cannot be used."""

        class WorseConfig(BadConfig):
            pass

        class GoodConfig(InputError):
            pass

        class Kept(RuntimeError):
            """Internal: the retry loop catches it; it never leaves the module."""

        class NotAnError:
            pass
    '''))
    found = classes_outside_the_base([REPO_ROOT / "stepcast" / "errors.py", planted])
    assert [f.split()[-1] for f in found] == ["BadConfig", "WorseConfig"]


def test_no_command_handler_of_the_product_catches_a_builtin_error():
    assert command_handlers_of_builtin_errors(product_files()) == []


def test_a_planted_command_handler_of_value_error_is_found(tmp_path):
    planted = tmp_path / "cli.py"
    planted.write_text(textwrap.dedent('''
        import sys

        def main():
            try:
                run()
            except (KeyError, ValueError) as exc:
                print(f"stepcast: {exc}", file=sys.stderr)
                return 2
            try:
                run()
            except OSError as exc:
                return report(exc)
            try:
                value = int(text)
            except ValueError:
                value = None            # a recovery: no report, no status
            try:
                value = parse(text)
            except ValueError as exc:   # a translation: raises a StepcastError
                raise InputError(f"--x: {exc}") from None
            try:
                run()
            except LookupError:
                return 2
            except KeyboardInterrupt:
                return 130

        def callback():
            try:
                run()
            except Exception:           # a C callback's status, not a command's
                return 1
            return 0
    '''))
    assert command_handlers_of_builtin_errors([planted]) == ["cli.py:7 KeyError, ValueError", "cli.py:12 OSError",
                                                             "cli.py:24 LookupError"]


#: entry points that are no command: the rank process runs the user's script and exits as it does; the KernelBench
#: script is a training script itself, run under stepcast run
NOT_COMMANDS = ("emulate/capture.py", "estimator/kernelbench_eager.py")


def entry_points_outside_the_shared_handler(files: list[Path]) -> list[str]:
    """``file`` for each module-level ``main`` that is neither decorated with ``cli_main`` nor a Hydra task
    (``@hydra.main``) whose body runs inside ``with exit_on_error():``."""
    found = []
    for path in files:
        for node in ast.parse(path.read_text(), str(path)).body:
            if not (isinstance(node, ast.FunctionDef) and node.name == "main"):
                continue
            decorators = {_base_name(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
            withs = {_base_name(item.context_expr.func) for stmt in ast.walk(node) if isinstance(stmt, ast.With)
                     for item in stmt.items if isinstance(item.context_expr, ast.Call)}
            if "cli_main" not in decorators and not ("main" in decorators and "exit_on_error" in withs):
                found.append(path.name)
    return found


def test_every_command_entry_point_ends_through_the_shared_handler():
    commands = [p for p in product_files() if not any(p == REPO_ROOT / n for n in NOT_COMMANDS)]
    assert entry_points_outside_the_shared_handler(commands) == []


def test_an_entry_point_with_its_own_handler_is_found(tmp_path):
    planted = tmp_path / "tool.py"
    planted.write_text("def main(argv=None):\n    try:\n        return run(argv)\n    except Error:\n"
                       "        return 2\n")
    assert entry_points_outside_the_shared_handler([planted]) == ["tool.py"]


def test_each_shared_class_carries_its_exit_status():
    assert InputError("x").exit_code == UnavailableError("x").exit_code == 2
    assert ScriptFailed("x").exit_code == 3
    assert Interrupted(signal.SIGTERM).exit_code == 128 + signal.SIGTERM
    assert str(Interrupted(signal.SIGINT)) == "stopped by SIGINT"
    assert str(UnknownNameError("unknown gpu 'z100'")) == "unknown gpu 'z100'"  # not KeyError's quoted repr
    assert str(MissingFileError("x.csv not found")) == "x.csv not found"
    assert isinstance(InputError("x"), ValueError) and isinstance(UnknownNameError("x"), KeyError)


def test_a_multi_line_message_is_reported_on_one_line(capsys):
    assert report(ScriptFailed("the real run failed\n\n   Traceback:   boom")) == 3
    assert capsys.readouterr().err == "stepcast: the real run failed Traceback: boom\n"


def test_cli_main_returns_the_status_and_lets_other_errors_through(capsys):
    @cli_main
    def command(error: BaseException | None) -> int | None:
        if error is not None:
            raise error
        return None

    assert command(None) == 0
    assert command(ScriptFailed("the script failed")) == 3
    assert capsys.readouterr().err == "stepcast: the script failed\n"
    with pytest.raises(ValueError, match="a bug"):
        command(ValueError("a bug"))
    assert capsys.readouterr().err == ""


def test_exit_on_error_ends_a_task_with_the_status(capsys):
    with pytest.raises(SystemExit) as done, exit_on_error():
        raise InputError("train.yaml: field 'seed': expected a whole number")
    assert done.value.code == 2
    assert capsys.readouterr().err == "stepcast: train.yaml: field 'seed': expected a whole number\n"
    with pytest.raises(RuntimeError), exit_on_error():
        raise RuntimeError("a bug")


def test_the_stepcast_command_reports_bad_input_in_one_line_with_exit_2(tmp_path, capsys):
    from stepcast.cli import main

    kernels = tmp_path / "kernels.csv"
    kernels.write_text("family,hardware,dtype,m,n,k,batch\ngemm,h100-sxm,bf16,64,64,wide,1\n")
    assert main(["predict", "--input", str(kernels), "--output", str(tmp_path / "o.csv"), "--model",
                 "roofline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stepcast: {kernels}:2: column 'k'"), err
    assert main(["replay", str(tmp_path / "absent.json")]) == 2
    assert capsys.readouterr().err == f"stepcast: traces: no file {tmp_path / 'absent.json'}\n"


def test_an_unexpected_error_in_a_command_is_a_traceback_not_bad_input(tmp_path, monkeypatch):
    import stepcast.estimator.predict
    from stepcast import estimator
    from stepcast.cli import main

    def broken(*args, **kwargs):
        raise ValueError("a bug in the estimator")

    monkeypatch.setattr(estimator.predict, "predict_file", broken)
    kernels = tmp_path / "kernels.csv"
    kernels.write_text("family,hardware,dtype,m,n,k,batch\ngemm,h100-sxm,bf16,64,64,64,1\n")
    with pytest.raises(ValueError, match="a bug in the estimator"):
        main(["predict", "--input", str(kernels), "--output", str(tmp_path / "o.csv")])


def test_a_bug_in_a_command_process_exits_1_with_its_traceback(tmp_path):
    kernels = tmp_path / "kernels.csv"
    kernels.write_text("family,hardware,dtype,m,n,k,batch\ngemm,h100-sxm,bf16,64,64,64,1\n")
    code = textwrap.dedent(f'''
        import sys
        import stepcast.estimator.predict
        from stepcast import estimator
        from stepcast.cli import main

        def broken(*args, **kwargs):
            raise RuntimeError("a bug in the estimator")

        estimator.predict.predict_file = broken
        sys.exit(main(["predict", "--input", {str(kernels)!r}, "--output", {str(tmp_path / "o.csv")!r}]))
    ''')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr and "RuntimeError: a bug in the estimator" in done.stderr
    assert "stepcast: a bug" not in done.stderr
