"""A user's config registry for torchtitan 0.3.0 (``--module torchtitan_published_configs --config NAME``): Llama 3.1
8B / 70B / 405B as torchtitan's own ``llama3_8b`` / ``llama3_70b`` / ``llama3_405b`` configs build them, with Float8
training chosen by name, since 0.3.0 keeps the model (and so its Float8 converter) out of the command line.

    llama3_8b, llama3_70b, llama3_405b                    torchtitan's configs as they are
    llama3_{8b,70b,405b}_bf16                             the same without Float8 (llama3_405b converts by default)
    llama3_{8b,70b,405b}_float8_{tensorwise,rowwise}      every Linear but the output projection to torchao's
                                                          Float8Linear with that scaling recipe
    ..._varlen (each of the six above)                    attention through ``varlen`` instead of ``flex``

``varlen`` runs the FlashAttention-2 kernels (``torch.nn.attention.varlen``) that the published runs' SDPA ran:
torchtitan of those dates attended with ``F.scaled_dot_product_attention(is_causal=True)`` (``use_flex_attn`` off
by default), which 0.3.0 no longer offers for language models; with one document per sample, varlen's per-document
mask is that causal mask. 0.3.0's context parallelism takes only FlexAttention, so CP runs keep ``flex``.

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
ATTENTION = ("flex", "varlen")   # torchtitan's default, and the published runs' FlashAttention-2 kernels


def with_float8(config: Trainer.Config, flavor: str, recipe: str | None, attn_backend: str = "flex"
                ) -> Trainer.Config:
    """``config`` with its model rebuilt from ``model_registry(flavor)`` with ``attn_backend``, converted to Float8
    with ``recipe`` (None: bf16)."""
    converters = None
    if recipe is not None:
        compiled = config.compile.enable and "model" in config.compile.components
        converters = [Float8LinearConverter.Config(recipe_name=recipe, filter_fqns=["lm_head"],
                                                   model_compile_enabled=compiled)]
    config.model_spec = model_registry(flavor, attn_backend=attn_backend, converters=converters)
    return config


def _variant(name: str, recipe: str | None, attn_backend: str) -> Callable[[], Trainer.Config]:
    base: Callable[[], Trainer.Config] = getattr(titan, f"llama3_{name}")

    def build() -> Trainer.Config:
        return with_float8(base(), FLAVORS[name], recipe, attn_backend)

    suffix = "" if attn_backend == "flex" else f"_{attn_backend}"
    build.__name__ = f"llama3_{name}_{'bf16' if recipe is None else 'float8_' + recipe}{suffix}"
    build.__doc__ = (f"torchtitan's llama3_{name} with {'no Float8' if recipe is None else recipe + ' Float8'}, "
                     f"{attn_backend} attention.")
    return build


llama3_8b = titan.llama3_8b
llama3_70b = titan.llama3_70b
llama3_405b = titan.llama3_405b
for _name in FLAVORS:
    for _recipe in (None, *RECIPES):
        for _backend in ATTENTION:
            _fn = _variant(_name, _recipe, _backend)
            globals()[_fn.__name__] = _fn
