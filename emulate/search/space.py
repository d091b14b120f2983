"""The search config (``conf/search/*.yaml``), its space and the checks that rule a configuration out cheaply.

A config names the script and the fixed facts (target GPU, GPU count, nodes, and any value the script gets on
every trial, e.g. the global batch), the space (parameter -> ordered list of choices), derived values and
constraints written as arithmetic expressions over those names (``dp: gpus // (tp * pp)``,
``global_batch % (micro_batch * dp) == 0``), and how a configuration becomes the script's arguments and
environment (``args``/``env`` templates in :meth:`str.format` syntax: ``"--tp={tp}"``; ``flags`` maps a yes/no
parameter to the switch the script takes when it is true: ``compile: --compile``).

Cheap checks before any emulation (:meth:`Space.rule_out`): constraints; a memory lower bound expression in GiB
against the target's memory; and dominance by a configuration that already ran out of memory: ``memory.monotone``
names parameters whose later choices never use less memory (micro-batch 1, 2, 4; recompute full, selective,
none), so a configuration at or beyond an out-of-memory one in each of them, and equal in the rest, cannot fit
either. Beyond these exact checks, ``memory.model`` (:mod:`emulate.search.memory_model`) learns peak memory from
the trials that ran and rules out configurations it predicts will not fit, and ``speed.monotone`` names parameters
whose later choices never train slower (recompute full, selective, none; resharding always, default, never): a
configuration at or below a feasible one in each of them, and equal in the rest, cannot be faster, so it is not
emulated. With both declared the fastest configuration that fits lies on the memory frontier, and a search spends
its emulations there instead of below configurations it already knows fit (a declaration, not a check: the
benchmark counts where the grid contradicts it).

Expressions are parsed with :mod:`ast` and evaluated over a whitelist (numbers, strings, names, + - * / // % **,
comparisons, and/or/not, min/max): a config file cannot run code.
"""
from __future__ import annotations

import ast
import itertools
import operator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stepcast.profiling.paths import REPO_ROOT
from stepcast.errors import InputError

Config = dict[str, Any]

#: how a reason given by the speed declaration begins (the benchmark counts these)
SPEED_PRUNED = "speed.monotone: no faster than"


class SearchConfigError(InputError):
    """A search config that cannot be used: one line naming the file and field."""


class LearnedMemory(BaseModel):
    """``memory.model``: the learned peak-memory model (:mod:`emulate.search.memory_model`)."""
    model_config = ConfigDict(extra="forbid")
    scale: str                                   # the parameter peak memory grows linearly in (micro_batch)
    static: list[str] = Field(default_factory=list)     # what the fixed part depends on
    per_unit: list[str] = Field(default_factory=list)   # what the part per unit of ``scale`` depends on
    margin: float = Field(default=0.05, ge=0.0)  # rule out only above memory * (1 + margin)


class MemoryChecks(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lower_bound_gib: str | None = None
    monotone: dict[str, Literal["increasing"]] = Field(default_factory=dict)
    model: LearnedMemory | None = None


class SpeedChecks(BaseModel):
    """``speed``: parameters whose later choices never make a step slower (the other parameters equal)."""
    model_config = ConfigDict(extra="forbid")
    monotone: dict[str, Literal["increasing"]] = Field(default_factory=dict)


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sampler: Literal["cmaes", "random", "grid"] = "cmaes"
    seed: int = 0
    max_evaluations: int | None = Field(default=None, ge=1)
    max_trials: int = Field(default=500, ge=1)
    cmaes_start: Literal["middle", "baseline"] = "middle"   # CMA-ES's initial mean: the space's middle, the baseline


class SearchConfig(BaseModel):
    """What a ``conf/search/*.yaml`` file holds (the fields are described in conf/search/megatron_gpt.yaml)."""
    model_config = ConfigDict(extra="forbid")
    name: str
    script: str
    hardware: str = "h100-sxm"
    gpus: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    fixed: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, list[Any]]
    derived: dict[str, str] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)
    memory: MemoryChecks = Field(default_factory=MemoryChecks)
    speed: SpeedChecks = Field(default_factory=SpeedChecks)
    args: list[str] = Field(default_factory=list)
    flags: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    tokens_per_step: str | None = None
    baseline: dict[str, Any] | None = None
    search: Budget = Field(default_factory=Budget)

    @field_validator("space")
    @classmethod
    def _choices(cls, space: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not space:
            raise ValueError("expected at least one parameter")
        for name, choices in space.items():
            if not choices:
                raise ValueError(f"{name}: expected a non-empty list of choices")
            if len(set(map(repr, choices))) != len(choices):
                raise ValueError(f"{name}: choices repeat")
        return space

    @model_validator(mode="after")
    def _consistent(self) -> "SearchConfig":
        if self.gpus % self.nodes:
            raise ValueError(f"gpus ({self.gpus}) is not a multiple of nodes ({self.nodes})")
        for field, names in (("memory.monotone", self.memory.monotone), ("speed.monotone", self.speed.monotone)):
            for name in names:
                if name not in self.space:
                    raise ValueError(f"{field}.{name}: not a parameter of the space")
        learned = self.memory.model
        if learned is not None:
            for field, names in (("scale", [learned.scale]), ("static", learned.static),
                                 ("per_unit", learned.per_unit)):
                for name in names:
                    if name not in self.space:
                        raise ValueError(f"memory.model.{field}: {name} is not a parameter of the space")
            if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in self.space[learned.scale]):
                raise ValueError(f"memory.model.scale: {learned.scale} choices must be numbers")
        for name in self.flags:
            if name not in self.space and name not in self.fixed:
                raise ValueError(f"flags.{name}: not a parameter of the space or a fixed value")
            if any(not isinstance(v, bool) for v in self.space.get(name, [self.fixed.get(name)])):
                raise ValueError(f"flags.{name}: expected true/false choices")
        if self.baseline is not None:
            for name, value in self.baseline.items():
                if name not in self.space:
                    raise ValueError(f"baseline.{name}: not a parameter of the space")
                if value not in self.space[name]:
                    raise ValueError(f"baseline.{name}: {value!r} is not one of {self.space[name]}")
            if set(self.baseline) != set(self.space):
                raise ValueError(f"baseline: expected a value for each of {sorted(self.space)}")
        elif self.search.cmaes_start == "baseline":
            raise ValueError("search.cmaes_start: baseline needs a baseline configuration")
        return self

    @property
    def nproc(self) -> int:
        return self.gpus // self.nodes

    def script_path(self) -> Path:
        path = Path(self.script)
        return path if path.is_absolute() else REPO_ROOT / path


def parse_config(raw: dict[str, Any], source: str) -> SearchConfig:
    """Validate a config dict; bad fields raise SearchConfigError naming ``source`` and the field."""
    try:
        cfg = SearchConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        message = err["msg"].removeprefix("Value error, ")
        raise SearchConfigError(f"{source}: {where}: {message}") from None
    if not cfg.script_path().is_file():
        raise SearchConfigError(f"{source}: script: {cfg.script_path()} not found")
    for field, exprs in (("derived", cfg.derived.values()), ("constraints", cfg.constraints),
                         ("memory.lower_bound_gib", [cfg.memory.lower_bound_gib] if cfg.memory.lower_bound_gib else []),
                         ("tokens_per_step", [cfg.tokens_per_step] if cfg.tokens_per_step else [])):
        for text in exprs:
            try:
                Expression(text)
            except SyntaxError as exc:
                raise SearchConfigError(f"{source}: {field}: {text!r}: {exc.msg}") from None
    space = Space(cfg)
    try:
        first = {name: choices[0] for name, choices in cfg.space.items()}
        space.namespace(first)
        space.script_command(first)
    except (NameError, KeyError, ZeroDivisionError, TypeError, ValueError) as exc:
        raise SearchConfigError(f"{source}: {exc}") from None
    return cfg


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b}
_FUNCTIONS = {"min": min, "max": max}


class Expression:
    """An arithmetic expression over config names, checked against the whitelist when parsed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text, mode="eval").body
        for node in ast.walk(self.tree):
            allowed = (ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.USub, ast.Not, ast.BoolOp,
                       ast.And, ast.Or, ast.Compare, ast.Call, ast.Tuple, ast.List, *_BINARY, *_COMPARE)
            if not isinstance(node, allowed):
                raise SyntaxError(f"{type(node).__name__} is not allowed (arithmetic, comparisons, and/or, min/max)")
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
                raise SyntaxError("only min() and max() may be called")

    def __call__(self, names: Config) -> Any:
        return self._eval(self.tree, names)

    def _eval(self, node: ast.AST, names: Config) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in _FUNCTIONS:
                return _FUNCTIONS[node.id]
            if node.id not in names:
                raise NameError(f"{self.text!r}: unknown name {node.id!r}")
            return names[node.id]
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._eval(node.left, names), self._eval(node.right, names))
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, names)
            return -value if isinstance(node.op, ast.USub) else not value
        if isinstance(node, ast.BoolOp):
            values = (self._eval(v, names) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, names)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, names)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(self._eval(a, names) for a in node.args))
        if isinstance(node, (ast.Tuple, ast.List)):
            return [self._eval(e, names) for e in node.elts]
        raise SyntaxError(f"{type(node).__name__} is not allowed")


class Space:
    """The parameters' choices, and what follows from one configuration (a dict parameter -> choice)."""

    def __init__(self, cfg: SearchConfig) -> None:
        self.cfg = cfg
        self.names = list(cfg.space)
        self.derived = {name: Expression(text) for name, text in cfg.derived.items()}
        self.constraints = [Expression(text) for text in cfg.constraints]
        self.memory_bound = Expression(cfg.memory.lower_bound_gib) if cfg.memory.lower_bound_gib else None
        self.tokens = Expression(cfg.tokens_per_step) if cfg.tokens_per_step else None

    def size(self) -> int:
        n = 1
        for choices in self.cfg.space.values():
            n *= len(choices)
        return n

    def all_configs(self) -> list[Config]:
        """Every configuration, in the order of the choices (the exhaustive grid)."""
        return [dict(zip(self.names, values)) for values in itertools.product(*self.cfg.space.values())]

    def index(self, config: Config) -> tuple[int, ...]:
        return tuple(self.cfg.space[name].index(config[name]) for name in self.names)

    def from_index(self, idx: dict[str, int]) -> Config:
        return {name: self.cfg.space[name][idx[name]] for name in self.names}

    def namespace(self, config: Config) -> Config:
        """Fixed facts, the configuration and the derived values (in their order), as expressions see them."""
        names: Config = {"gpus": self.cfg.gpus, "nodes": self.cfg.nodes, "nproc": self.cfg.nproc,
                         **self.cfg.fixed, **config}
        for name, expr in self.derived.items():
            try:
                names[name] = expr(names)
            except ZeroDivisionError:
                names[name] = None
        return names

    def broken_constraint(self, config: Config) -> str | None:
        names = self.namespace(config)
        for expr in self.constraints:
            try:
                ok = expr(names)
            except (ZeroDivisionError, TypeError):
                ok = False
            if not ok:
                return expr.text
        return None

    def memory_lower_bound_gib(self, config: Config) -> float | None:
        return float(self.memory_bound(self.namespace(config))) if self.memory_bound else None

    def tokens_per_step(self, config: Config) -> float | None:
        return float(self.tokens(self.namespace(config))) if self.tokens else None

    def at_or_beyond(self, config: Config, other: Config, monotone: dict[str, str]) -> bool:
        """True when ``config`` is at or beyond ``other`` in each ``monotone`` parameter and equal in every other
        parameter (and in any fixed value either changes); never when nothing is declared monotone."""
        if not monotone:
            return False
        extra = (set(config) | set(other)) - set(self.names)   # fixed values a configuration changes (a longer seq)
        if any(config.get(name) != other.get(name) for name in extra):
            return False
        for name in self.names:
            choices = self.cfg.space[name]
            if name in monotone:
                if choices.index(config[name]) < choices.index(other[name]):
                    return False
            elif config[name] != other[name]:
                return False
        return True

    def dominates_oom(self, config: Config, oom: Config) -> bool:
        """True when ``config`` needs at least the memory of ``oom`` (a configuration that ran out of memory)."""
        return self.at_or_beyond(config, oom, self.cfg.memory.monotone)

    def no_faster_than(self, config: Config, feasible: Config) -> bool:
        """True when ``config`` cannot train faster than ``feasible`` (``speed.monotone``); never for itself."""
        return config != feasible and self.at_or_beyond(feasible, config, self.cfg.speed.monotone)

    def rule_out(self, config: Config, memory_gib: float, oom_configs: list[Config],
                 feasible_configs: list[Config] = ()) -> str | None:
        """Why ``config`` need not be emulated (a constraint, the memory bound, a smaller configuration that ran
        out of memory, a feasible one it cannot be faster than), or None."""
        broken = self.broken_constraint(config)
        if broken is not None:
            return f"constraint {broken}"
        bound = self.memory_lower_bound_gib(config)
        if bound is not None and bound > memory_gib:
            return f"memory lower bound {bound:.1f} GiB > {memory_gib:g} GiB"
        for oom in oom_configs:
            if self.dominates_oom(config, oom):
                return f"needs at least the memory of {format_config(oom)}, which ran out of memory"
        for feasible in feasible_configs:
            if self.no_faster_than(config, feasible):
                return f"{SPEED_PRUNED} {format_config(feasible)}, which fits"
        return None

    def script_command(self, config: Config) -> tuple[list[str], dict[str, str]]:
        """The script's arguments and environment for ``config`` (the templates filled in, then the switches of the
        flags that are true)."""
        names = self.namespace(config)
        try:
            args = [template.format(**names) for template in self.cfg.args]
            args += [flag for name, flag in self.cfg.flags.items() if names[name]]
            env = {key: template.format(**names) for key, template in self.cfg.env.items()}
        except KeyError as exc:
            raise KeyError(f"args/env: unknown name {exc.args[0]!r} in a template") from None
        return args, env


def format_config(config: Config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())
