"""Turning a family's sweep config into measurement points: a grid, log-uniform random shapes, real-model shapes.

A *space* maps a column to its values: a list (categorical: the grid takes every value, random sampling picks one),
a scalar (fixed), or ``{log: [lo, hi], multiple_of: 8}`` (random sampling only: an integer drawn log-uniformly).
Points are dicts of the family's key and extra columns; their identity is :func:`point_id`.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from stepcast.profiling.model_catalog import ModelConfig, lookup_model
from stepcast.errors import InputError

SAMPLES = ("grid", "random", "model")


@dataclass(frozen=True)
class Point:
    """One configuration to measure. ``values`` holds family, hardware, dtype, key and extra columns."""

    values: Mapping[str, Any]
    sample: str

    @property
    def id(self) -> str:
        return point_id(self.values)

    def label(self) -> str:
        """Short text for the progress bar."""
        skip = {"family", "hardware"}
        return " ".join(f"{k}={v}" for k, v in self.values.items() if k not in skip)


def point_id(values: Mapping[str, Any]) -> str:
    """Stable 16-hex-digit hash of a point's configuration (independent of key order and of how it was sampled)."""
    canonical = json.dumps({k: values[k] for k in sorted(values)}, sort_keys=True, default=str)
    return hashlib.sha1(canonical.encode()).hexdigest()[:16]


class ConfigError(InputError):
    """A profiling config (``stepcast profile``: the run's settings, a family's sweep) that names something that
    does not exist, cannot run here or cannot be expanded; one line naming the setting, family or field."""


def as_plain(value: Any) -> Any:
    """OmegaConf containers to plain Python (callers may pass either)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def grid(space: Mapping[str, Any], where: str = "grid") -> Iterator[dict[str, Any]]:
    """Every combination of the space's lists (scalars are fixed)."""
    space = as_plain(space)
    names, choices = [], []
    for name, value in space.items():
        if isinstance(value, dict):
            raise ConfigError(f"{where}.{name}: a grid takes a list of values, not {value}")
        names.append(name)
        choices.append(value if isinstance(value, list) else [value])
    for combo in itertools.product(*choices):
        yield dict(zip(names, combo))


def _log_uniform(spec: Mapping[str, Any], rng: random.Random, where: str) -> int:
    try:
        lo, hi = (int(x) for x in spec["log"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{where}: expected {{log: [lo, hi]}} with integers lo <= hi, got {spec}") from None
    if not 0 < lo <= hi:
        raise ConfigError(f"{where}: expected 0 < lo <= hi, got {spec['log']}")
    multiple = int(spec.get("multiple_of", 1))
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(multiple, int(round(value / multiple)) * multiple)


def random_points(space: Mapping[str, Any], count: int, rng: random.Random, where: str = "random"
                  ) -> Iterator[dict[str, Any]]:
    """``count`` draws: log-uniform integers for ``{log: ...}`` entries, a uniform choice for lists."""
    space = as_plain(space)
    for _ in range(count):
        point = {}
        for name, value in space.items():
            if isinstance(value, dict):
                point[name] = _log_uniform(value, rng, f"{where}.{name}")
            elif isinstance(value, list):
                point[name] = rng.choice(value)
            else:
                point[name] = value
        yield point


ModelShapes = Callable[[ModelConfig, int, int], Iterable[dict[str, Any]]]


def model_points(models: Mapping[str, Any], shapes: ModelShapes, where: str = "models") -> Iterator[dict[str, Any]]:
    """Shapes that real models produce: ``names`` x ``tp`` x ``tokens``, each crossed with the ``space`` lists."""
    models = as_plain(models)
    names, tps, tokens = models.get("names", []), models.get("tp", [1]), models.get("tokens", [])
    for name in names:
        try:
            model = lookup_model(name)
        except KeyError as exc:
            raise ConfigError(f"{where}.names: {exc}") from None
        for tp, n_tokens in itertools.product(tps, tokens):
            for shape in shapes(model, int(tp), int(n_tokens)):
                for extra in grid(models.get("space", {}), f"{where}.space"):
                    yield {**shape, **extra}


def expand(sweep: Mapping[str, Any], shapes: ModelShapes, seed: int, family: str) -> Iterator[tuple[str, dict]]:
    """All raw points of a sweep as (sample, values), in a deterministic order: grids, random sets, model shapes."""
    sweep = as_plain(sweep)
    for i, space in enumerate(_as_list(sweep.get("grid"))):
        for values in grid(space, f"{family}.grid[{i}]"):
            yield "grid", values
    rng = random.Random(f"{seed}:{family}")
    for i, block in enumerate(_as_list(sweep.get("random"))):
        if "count" not in block or "space" not in block:
            raise ConfigError(f"{family}.random[{i}]: expected keys 'count' and 'space'")
        for values in random_points(block["space"], int(block["count"]), rng, f"{family}.random[{i}].space"):
            yield "random", values
    for i, block in enumerate(_as_list(sweep.get("models"))):
        for values in model_points(block, shapes, f"{family}.models[{i}]"):
            yield "model", values


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
