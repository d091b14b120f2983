"""The emulator against a real run of the same script: ``stepcast validate``.

    stepcast validate [--save-real FILE] [--report FILE] -- script.py [args]   # where the GPU is
    stepcast validate --real FILE [--report FILE] [--estimator SOURCE]          # anywhere: a stored run

1. The real run: the script on this machine's GPU (:mod:`emulate.measure_real`, in a child process, so neither
   run's CUDA state reaches the other), kept with ``--save-real`` (``datasets/<gpu>/real_runs/`` is where the
   project keeps them); or a stored one, with ``--real``, whose script, arguments and device it re-uses.
2. The emulated run of the same script and arguments on a virtual copy of that device (``stepcast run
   --capture-only`` in a child process), simulated here with ``--estimator`` (default: the shipped bundle).
3. A table, real against emulated: steady-state iteration time and peak memory (the caching allocator's reserved
   bytes; both runs count them the same way) and the error of each; ``--report`` writes it all as JSON.

Single-process scripts: a real multi-rank run needs as many GPUs, which a validation machine seldom has.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stepcast.emulate.measure_real import FORMAT, FORMAT_VERSION
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import REPO_ROOT
from stepcast.preflight import Preflight
from stepcast.errors import SCRIPT_FAILED, InputError, ScriptFailed, UnavailableError

console = Console()


class ValidationError(InputError):
    """A one-line reason validation cannot run on the input given (a bad stored run, no script)."""


def load_real(path: Path) -> dict[str, Any]:
    """A stored real run, checked: one-line errors name the file and field."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValidationError(f"{path}: field 'format': expected '{FORMAT}' "
                              "(python -m stepcast.emulate.measure_real writes it)")
    if doc.get("version") != FORMAT_VERSION:
        raise ValidationError(f"{path}: field 'version': {doc.get('version')!r}, expected {FORMAT_VERSION}")
    for field, kind in (("hardware", str), ("script", str), ("args", list)):
        if not isinstance(doc.get(field), kind):
            raise ValidationError(f"{path}: field '{field}': expected a {kind.__name__}")
    if not isinstance(doc.get("iteration_time_ms"), (int, float)):
        raise ValidationError(f"{path}: field 'iteration_time_ms': expected a number (the run made at least one "
                              "optimizer step?)")
    return doc


def script_path(real: dict[str, Any]) -> Path:
    """The stored script: relative paths are the repository's."""
    path = Path(real["script"])
    return path if path.is_absolute() else REPO_ROOT / path


def _child(args: list[str], what: str) -> None:
    """Run ``python args...``; its failure is the script's (:class:`ScriptFailed`, exit 3) when the real run failed
    or the emulated one says the script failed (exit 3), else bad input."""
    done = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        error = ScriptFailed if what == "real run" or done.returncode == SCRIPT_FAILED else ValidationError
        raise error(f"the {what} failed (exit {done.returncode}): {tail[0]}")


def measure_here(script: Path, args: list[str], out: Path) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise UnavailableError("a real run needs a CUDA GPU on this machine; pass --real FILE to compare against a "
                              "stored one")
    _child(["-m", "stepcast.emulate.measure_real", "--report", str(out), "--", str(script), *args], "real run")
    return load_real(out)


def emulate_run(real: dict[str, Any], workdir: Path, estimator: str | None) -> dict[str, Any]:
    from stepcast.emulate.simulate import simulate_traces

    capture_report = workdir / "capture.json"
    _child(["-m", "stepcast.emulate", "run", "--hardware", real["hardware"], "--capture-only", "--report",
            str(capture_report),
            "--trace-dir", str(workdir / "capture"), "--", str(script_path(real)), *real["args"]], "emulated run")
    capture = json.loads(capture_report.read_text())
    return simulate_traces([Path(t) for t in capture["traces"]], real["hardware"], estimator=estimator,
                           extra=capture, console=Console(quiet=True))


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return (predicted - measured) / measured * 100.0


def compare(real: dict[str, Any], emulated: dict[str, Any]) -> dict[str, Any]:
    """Real against emulated, per measure: both values and the signed error in % of the real value."""
    rows = {}
    for key in ("iteration_time_ms", "peak_memory_bytes"):
        rows[key] = {"real": real.get(key), "emulated": emulated.get(key),
                     "error_pct": error_pct(emulated.get(key), real.get(key))}
    return {"hardware": real["hardware"], "script": real["script"], "args": real["args"],
            "estimator": emulated.get("estimator"), "measures": rows,
            "iterations_ms": {"real": real.get("iterations_ms"), "emulated": emulated.get("iterations_ms")},
            "fallback_kernels": emulated.get("fallback_kernels")}


def print_comparison(result: dict[str, Any]) -> None:
    table = Table(title=f"{result['script']} {' '.join(result['args'])} on {result['hardware']}: real vs emulated "
                        f"({result['estimator']})")
    for column in ("measure", "real", "emulated", "error %"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for key, row in result["measures"].items():
        scale, unit = (1.0, "ms") if key.endswith("_ms") else (2.0 ** -30, "GiB")
        fmt = (lambda v: "-" if v is None else f"{v * scale:,.3f}")
        err = row["error_pct"]
        table.add_row(f"{key} ({unit})", fmt(row["real"]), fmt(row["emulated"]), "-" if err is None else f"{err:+.1f}")
    console.print(table)


def validate_command(ns: argparse.Namespace) -> int:
    check = Preflight()
    check.output_file("--report", ns.report)
    check.output_file("--save-real", ns.save_real)
    refused = check.refuse()
    if refused is not None:
        return refused
    with tempfile.TemporaryDirectory(prefix="stepcast-validate-") as tmp:
        work = Path(tmp)
        if ns.real:
            real = load_real(ns.real)
        else:
            if ns.script is None:
                raise ValidationError("give a script (-- script.py [args]) or a stored run (--real FILE)")
            args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
            if not ns.script.is_file():
                raise ValidationError(f"script {ns.script} not found")
            real = measure_here(ns.script.resolve(), args, work / "real.json")
            if ns.save_real:
                write_json_atomic(ns.save_real, real, indent=1)
        if not script_path(real).is_file():
            raise ValidationError(f"{ns.real}: field 'script': {real['script']} not found")
        result = compare(real, emulate_run(real, work, ns.estimator))
    print_comparison(result)
    if ns.report:
        write_json_atomic(ns.report, result, indent=1)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("validate", help="compare the emulator with a real run of the same script",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real", type=Path, help="a stored real run (python -m stepcast.emulate.measure_real) instead of "
                   "running the script on this machine's GPU")
    p.add_argument("--save-real", type=Path, help="keep the real run's measurement here")
    p.add_argument("--report", type=Path, help="write the comparison (JSON) here")
    p.add_argument("--estimator", default=None, help="stepcast.estimator.load source (default: the shipped bundle)")
    p.add_argument("script", type=Path, nargs="?", help="the training script (not with --real)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments (after --)")
    p.set_defaults(func=validate_command)
