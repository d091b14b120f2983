"""From a family's sweep config to the ordered list of points a run measures.

Expansion (grid, random, model shapes) -> family completion (derived columns, meaningless combinations dropped) ->
``limits`` (max_flops / max_bytes per call) -> de-duplication by point id -> a seeded shuffle (so a budget cut-off
leaves a representative subset) -> ``max_points``. The plan depends only on the config and the seed, so a second run
with the same config plans the same points and measures only those not in the dataset yet.
"""
from __future__ import annotations

import random
from typing import Any, Mapping

from pydantic import ValidationError

from stepcast.profiling.ops import BENCHES
from stepcast.profiling.sampling import Point, ConfigError, as_plain, expand, point_id
from stepcast.profiling.schema import columns, extra_columns, row_model
from stepcast.profiling.families import key_columns

SWEEP_KEYS = frozenset({"grid", "random", "models", "limits", "max_points", "budget_share"})


def select_sweep(family_cfg: Any, kind: str, family: str) -> dict[str, Any]:
    """A family config is either one sweep or, for ``<family>=auto``, a sweep per device kind (``cpu``, ``gpu``)."""
    sweep = as_plain(family_cfg) or {}
    if set(sweep) <= {"cpu", "gpu"} and sweep:
        if kind not in sweep:
            raise ConfigError(f"{family}: no sweep for a {kind} (expected key '{kind}')")
        sweep = sweep[kind]
    unknown = set(sweep) - SWEEP_KEYS
    if unknown:
        raise ConfigError(f"{family}.{sorted(unknown)[0]}: unknown sweep key, expected one of "
                               f"{', '.join(sorted(SWEEP_KEYS))}")
    return sweep


def _check_point(values: Mapping[str, Any], family: str) -> None:
    """Fail early, with one line, on a sweep that names a wrong column or value."""
    wanted = key_columns(family) + extra_columns(family)
    missing = [c for c in wanted if c not in values]
    if missing:
        raise ConfigError(f"{family} sweep: points lack column '{missing[0]}' (set it in the space)")
    unknown = [c for c in values if c not in columns(family)]
    if unknown:
        raise ConfigError(f"{family} sweep: '{unknown[0]}' is not a column of the {family} schema")
    probe = {**values, "reps": 0, "status": "failed", "error": "planned", "point_id": "0" * 16,
             "sample": "grid", "timing": "perf_counter"}
    try:
        row_model(family).model_validate(probe)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][-1]) if err["loc"] else "<point>"
        raise ConfigError(f"{family} sweep: field '{field}' = {values.get(field)!r}: {err['msg']}") from None


def plan_family(family: str, sweep: Mapping[str, Any], hardware: str, seed: int,
                max_points: int | None = None) -> list[Point]:
    """All points of one family's sweep, in measurement order (see the module docstring)."""
    bench = BENCHES[family]
    limits = sweep.get("limits") or {}
    max_flops, max_bytes = float(limits.get("max_flops", "inf")), float(limits.get("max_bytes", "inf"))
    order = key_columns(family) + extra_columns(family)
    seen: set[str] = set()
    points: list[Point] = []
    for sample, raw in expand(sweep, bench.model_shapes, seed, family):
        values = bench.complete({"family": family, "hardware": hardware, **raw})
        if values is None:
            continue
        _check_point(values, family)
        flops, size = bench.cost(values)
        if flops > max_flops or size > max_bytes:
            continue
        values = {c: values[c] for c in order}
        pid = point_id(values)
        if pid not in seen:
            seen.add(pid)
            points.append(Point(values, sample))
    random.Random(f"{seed}:{family}:order").shuffle(points)
    caps = [c for c in (sweep.get("max_points"), max_points) if c is not None]
    return points[: min(caps)] if caps else points
