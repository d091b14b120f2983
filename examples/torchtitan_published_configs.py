"""A user's config registry for torchtitan 0.3.0 (``--module torchtitan_published_configs --config NAME``): Llama 3.1
8B / 70B / 405B as torchtitan's own ``llama3_8b`` / ``llama3_70b`` / ``llama3_405b`` configs build them, with Float8
training chosen by name, since 0.3.0 keeps the model (and so its Float8 converter) out of the command line.

    llama3_8b, llama3_70b, llama3_405b                    torchtitan's configs as they are
    llama3_{8b,70b,405b}_bf16                             the same without Float8 (llama3_405b converts by default)
    llama3_{8b,70b,405b}_float8_{tensorwise,rowwise}      every Linear but the output projection to torchao's
                                                          Float8Linear with that scaling recipe

Float8 is applied as torchtitan's ``llama3_405b`` applies it (``Float8LinearConverter`` over ``model_registry``, the
output projection ``lm_head`` left in bf16). 0.3.0's converter names its recipes ``rowwise`` and
``rowwise_with_gw_hp``; torchao's ``Float8LinearConfig.from_recipe_name`` also knows ``tensorwise``, the only
recipe torchtitan had in 2024 and the one its Float8 benchmarks name. Everything else (parallel degrees, compile,
async TP, batch, sequence, activation checkpointing) is torchtitan's own command line.
"""
from __future__ import annotations

from collections.abc import Callable

from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.models.llama3 import config_registry as titan
from torchtitan.models.llama3 import model_registry
from torchtitan.trainer import Trainer

FLAVORS = {"8b": "8B", "70b": "70B", "405b": "405B"}
RECIPES = ("tensorwise", "rowwise")


def with_float8(config: Trainer.Config, flavor: str, recipe: str | None) -> Trainer.Config:
    """``config`` with its model rebuilt from ``model_registry(flavor)``, converted to Float8 with ``recipe``
    (None: bf16)."""
    converters = None
    if recipe is not None:
        compiled = config.compile.enable and "model" in config.compile.components
        converters = [Float8LinearConverter.Config(recipe_name=recipe, filter_fqns=["lm_head"],
                                                   model_compile_enabled=compiled)]
    config.model_spec = model_registry(flavor, converters=converters)
    return config


def _variant(name: str, recipe: str | None) -> Callable[[], Trainer.Config]:
    base: Callable[[], Trainer.Config] = getattr(titan, f"llama3_{name}")

    def build() -> Trainer.Config:
        return with_float8(base(), FLAVORS[name], recipe)

    build.__name__ = f"llama3_{name}_{'bf16' if recipe is None else 'float8_' + recipe}"
    build.__doc__ = f"torchtitan's llama3_{name} with {'no Float8' if recipe is None else recipe + ' Float8'}."
    return build


llama3_8b = titan.llama3_8b
llama3_70b = titan.llama3_70b
llama3_405b = titan.llama3_405b
for _name in FLAVORS:
    for _recipe in (None, *RECIPES):
        _fn = _variant(_name, _recipe)
        globals()[_fn.__name__] = _fn
