"""Run one emulation through the public CLI (``stepcast run --report --trace --trace-dir``) and read back
what it wrote: the report, and each iteration's predicted kernel time by kernel family.

Going through the CLI (not the simulator's functions) means a caller (the search's trials, the host-cost fit, the
benchmarks) gets what a user gets, and picks up changes to how iterations are measured without edits here.

Kernel time per iteration: the captured trace (``--trace-dir``, format ``stepcast-trace`` v1) gives every event's
``seq``, each kernel's ``spec.family`` and the ``seq`` of each iteration marker (iteration k runs from the k-th
marker to the next); the predicted timeline (``--trace``) gives each device slice's duration under ``args.seq``.
"""
from __future__ import annotations

import bisect
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from stepcast.emulate.trace import read_trace
from stepcast.profiling.paths import REPO_ROOT

DEVICE_CATEGORIES = ("kernel", "memcpy", "memset", "collective")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b[^:]*:")
OTHER = "other"  # kernels with no estimator spec (embedding, index, RNG...), copies and memsets


def failure_line(stderr: str) -> str:
    """The most telling line of a failed run: the exception line (``torch.AcceleratorError: ...``), else the CLI's
    own ``stepcast:`` line, else the last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if EXCEPTION_LINE.match(ln)]
    own = [ln for ln in lines if ln.startswith("stepcast:")]
    picked = errors[-1] if errors else (own[-1] if own else (lines[-1] if lines else "no output"))
    return picked[:300]


def emulate_script(script: Path, args: list[str], hardware: str, nproc: int = 1, timeout_s: float | None = 1800.0,
                   kernels: bool = True, env: dict[str, str] | None = None, options: list[str] | None = None,
                   trace_dir: Path | None = None, runner=None, python: str | None = None,
                   classify: Callable[[dict[str, Any]], str] | None = None) -> dict[str, Any]:
    """Run ``stepcast run`` on ``script`` (``python``: that interpreter, default this one, e.g. another
    virtual environment's; in ``env``, default this process's; ``options``: more ``run`` options, e.g.
    ``--nodes 2``; captures in ``trace_dir``, default a temporary folder) and
    return {ok, report, iterations (rank 0's kernel ms by family per iteration; only with ``kernels``, which writes
    the predicted timeline), wall_s} or {ok: False, error, command, wall_s, returncode (None: timed out), output
    (stdout and stderr)}. ``classify``: what a device event of the trace counts as in ``iterations`` (default: its
    kernel family, :func:`kernel_family`). The one way this project runs an emulation of a script (the e2e,
    compatibility, determinism and search benchmarks all come here)."""
    with tempfile.TemporaryDirectory(prefix="stepcast-e2e-") as tmp:
        tmpdir = Path(tmp)
        report_path, timeline_path = tmpdir / "report.json", tmpdir / "timeline.json"
        trace_dir = trace_dir or tmpdir / "traces"
        cmd = [python or sys.executable, "-m", "stepcast.emulate", "run", "--hardware", hardware, "--nproc", str(nproc),
               *(options or []), "--report", str(report_path), *(["--trace", str(timeline_path)] if kernels else []),
               "--trace-dir", str(trace_dir), "--", str(script), *args]
        started = time.perf_counter()
        try:
            proc = (runner or subprocess.run)(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                              timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"timed out after {timeout_s:.0f} s", "command": " ".join(cmd),
                    "wall_s": time.perf_counter() - started, "returncode": None, "output": ""}
        wall = time.perf_counter() - started
        if proc.returncode != 0 or not report_path.is_file() or (kernels and not timeline_path.is_file()):
            return {"ok": False, "error": failure_line(proc.stderr or proc.stdout or ""), "command": " ".join(cmd),
                    "wall_s": wall, "returncode": proc.returncode, "output": f"{proc.stdout}\n{proc.stderr}"}
        out = {"ok": True, "report": json.loads(report_path.read_text()), "wall_s": wall}
        if kernels:
            rank0 = sorted(trace_dir.glob("rank0.trace.json*"))
            out["iterations"] = iteration_family_ms(read_trace(rank0[0]), json.loads(timeline_path.read_text()),
                                                    classify=classify or kernel_family)
    return out


def kernel_family(event: dict[str, Any]) -> str:
    """A device event's kernel family (``other``: no spec, or not a kernel)."""
    return ((event.get("spec") or {}).get("family") or OTHER) if event["kind"] == "kernel" else OTHER


def iteration_family_ms(trace: dict[str, Any], timeline: dict[str, Any], rank: int = 0,
                        classify: Callable[[dict[str, Any]], str] = kernel_family) -> list[dict[str, float]]:
    """Per iteration of one rank, its predicted device time (ms) by what ``classify`` makes of each device event
    (default: its kernel family).

    A kernel belongs to the iteration whose markers bracket its launch (its ``seq``), wherever it ends up running
    on the simulated clock, so that the sum is the device work the iteration issued."""
    events = trace["events"]
    family = {e["seq"]: classify(e) for e in events if e["kind"] in DEVICE_CATEGORIES}
    marks = [e["seq"] for e in events if e["kind"] == "iteration"]
    if not marks or marks[0] != events[0]["seq"]:
        marks = [events[0]["seq"] if events else 0, *marks]
    out: list[dict[str, float]] = [defaultdict(float) for _ in marks]
    for ev in timeline.get("traceEvents", []):
        if ev.get("ph") != "X" or ev.get("pid") != rank or ev.get("cat") not in DEVICE_CATEGORIES:
            continue
        seq = (ev.get("args") or {}).get("seq")
        if seq is None or seq not in family:
            continue
        out[bisect.bisect_right(marks, seq) - 1][family[seq]] += float(ev.get("dur", 0.0)) / 1e3
    return [dict(d) for d in out]
