"""Emulate ``examples/hf_model.py`` (a HuggingFace model run the way NeuSight measured it) and read each timed pass.

The script marks a ``prof.step()`` after the model set-up and after every phase of ``PHASES[mode]`` (forward,
loss, backward, setup), so the report's iteration ``1 + len(PHASES[mode]) * r + j`` is phase ``j`` of repetition
``r``. The first repetition is warm-up (allocator growth, cuBLAS handles), as NeuSight's fastest-5-of-25 rule
discards it; the benchmark reads the last one. The loss between forward and backward is not timed, as in NeuSight.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import Any

from stepcast.profiling.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "hf_model.py"
REPS = 2


@lru_cache(maxsize=1)
def phases() -> dict[str, tuple[str, ...]]:
    """``PHASES`` of the example script itself, so that the layout is defined once (the script imports only torch
    at module level)."""
    spec = importlib.util.spec_from_file_location("stepcast_example_hf_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.PHASES)


def phase_index(mode: str, phase: str, rep: int) -> int:
    """The report's iteration index of ``phase`` in repetition ``rep`` (0-based)."""
    layout = phases()[mode]
    return 1 + len(layout) * rep + layout.index(phase)


def read_passes(result: dict[str, Any], mode: str, reps: int = REPS) -> dict[str, Any]:
    """Predicted forward/backward/total ms and kernel ms by family per pass, from an emulation result of
    :func:`emulate.emulation.emulate_script` (the last repetition)."""
    iterations = result["report"]["iterations_ms"]
    expected = 1 + len(phases()[mode]) * reps
    if len(iterations) < expected:
        raise ValueError(f"the report has {len(iterations)} iterations, expected {expected} "
                         f"(set-up + {reps} x {'/'.join(phases()[mode])})")
    out: dict[str, Any] = {"families": {}}
    for phase in ("forward", "backward") if mode == "train" else ("forward",):
        i = phase_index(mode, phase, reps - 1)
        out[f"{phase}_ms"] = float(iterations[i])
        out["families"][phase] = result["iterations"][i]
    out.setdefault("backward_ms", 0.0)
    out["total_ms"] = out["forward_ms"] + out["backward_ms"]
    return out
