"""A small catalog of real transformer configurations, so sweeps can measure the shapes real models produce.

Dimensions are the published ones (Hugging Face ``config.json`` of each model, GPT-3 paper table 2.1). Look a model
up by its short id or any alias (the Hugging Face repo name, e.g. ``meta-llama/Llama-2-7b-hf``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from stepcast.errors import UnknownNameError


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only transformer. ``ffn`` is the MLP inner size; gated MLPs (SwiGLU) have an up and a gate matrix."""

    id: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    gated_mlp: bool
    norm: str  # layer_norm | rms_norm
    aliases: tuple[str, ...] = field(default=())

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """Weights of one transformer block (attention + MLP; norms and biases ignored)."""
        attn = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim + self.hidden * self.hidden
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.ffn
        return attn + mlp


def _gpt(id_: str, hidden: int, layers: int, heads: int, aliases: tuple[str, ...]) -> ModelConfig:
    return ModelConfig(id_, hidden, layers, heads, heads, 4 * hidden, 50257, False, "layer_norm", aliases)


def _llama(id_: str, hidden: int, layers: int, heads: int, kv: int, ffn: int, vocab: int,
           aliases: tuple[str, ...]) -> ModelConfig:
    return ModelConfig(id_, hidden, layers, heads, kv, ffn, vocab, True, "rms_norm", aliases)


MODELS: dict[str, ModelConfig] = {m.id: m for m in (
    _gpt("gpt2", 768, 12, 12, ("openai-community/gpt2", "gpt2-small", "gpt2-124m")),
    _gpt("gpt2-medium", 1024, 24, 16, ("openai-community/gpt2-medium", "gpt2-350m")),
    _gpt("gpt2-large", 1280, 36, 20, ("openai-community/gpt2-large", "gpt2-774m")),
    _gpt("gpt2-xl", 1600, 48, 25, ("openai-community/gpt2-xl", "gpt2-1.5b")),
    _gpt("gpt3-2.7b", 2560, 32, 32, ("gpt-3 2.7b",)),
    _gpt("gpt3-6.7b", 4096, 32, 32, ("gpt-3 6.7b",)),
    _gpt("gpt3-13b", 5120, 40, 40, ("gpt-3 13b",)),  # paper: 5140; 5120 = 40 heads x 128 (Megatron)
    _gpt("gpt3-175b", 12288, 96, 96, ("gpt-3 175b", "gpt3")),
    _llama("llama-2-7b", 4096, 32, 32, 32, 11008, 32000, ("meta-llama/Llama-2-7b-hf", "llama2-7b")),
    _llama("llama-2-13b", 5120, 40, 40, 40, 13824, 32000, ("meta-llama/Llama-2-13b-hf", "llama2-13b")),
    _llama("llama-2-70b", 8192, 80, 64, 8, 28672, 32000, ("meta-llama/Llama-2-70b-hf", "llama2-70b")),
    _llama("llama-3-8b", 4096, 32, 32, 8, 14336, 128256,
           ("meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-3.1-8B", "llama3-8b")),
    _llama("llama-3-70b", 8192, 80, 64, 8, 28672, 128256,
           ("meta-llama/Meta-Llama-3-70B", "meta-llama/Llama-3.1-70B", "llama3-70b")),
    _llama("mistral-7b", 4096, 32, 32, 8, 14336, 32000, ("mistralai/Mistral-7B-v0.1", "mistral")),
    _llama("qwen2-0.5b", 896, 24, 14, 2, 4864, 151936, ("Qwen/Qwen2-0.5B", "Qwen/Qwen2.5-0.5B")),
    _llama("qwen2-7b", 3584, 28, 28, 4, 18944, 152064, ("Qwen/Qwen2-7B", "Qwen/Qwen2.5-7B")),
    _llama("qwen2.5-14b", 5120, 48, 40, 8, 13824, 152064, ("Qwen/Qwen2.5-14B",)),
)}


class UnknownModelError(UnknownNameError):
    """A model name that is not in :data:`MODELS` nor an alias of one; the message lists the catalog."""


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "", name.lower())


def lookup_model(name: str) -> ModelConfig:
    """Find a model by id or alias (case and punctuation insensitive)."""
    if name in MODELS:
        return MODELS[name]
    wanted = _normalise(name)
    for model in MODELS.values():
        if wanted in {_normalise(model.id)} | {_normalise(a) for a in model.aliases}:
            return model
    raise UnknownModelError(f"unknown model '{name}': expected one of {', '.join(MODELS)} or an alias")
