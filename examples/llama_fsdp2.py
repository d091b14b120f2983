"""Llama 3 training the way torchtitan runs it (1D FSDP2): RMSNorm pre-norm blocks with grouped-query causal SDPA
attention, rotary embeddings and a SwiGLU MLP; each block its own ``fully_shard`` unit (resharded after forward
except the last) under the root; bf16 parameters with fp32 gradient reduction; per-block selective activation
checkpointing ("op" policy: keep the outputs of matmuls, attention and reduce-scatters, recompute every second
matmul and everything else); fp32 cross-entropy; gradient-norm clipping at 1.0; fused AdamW.

The ``8b`` preset is Llama 3.1 8B (32 layers, dim 4096, 32 heads, 8 KV heads, FFN 14336, vocab 128256) at
torchtitan's default sequence length 8192, local batch 2. Plain PyTorch: runs unchanged under torchrun on GPUs.

    torchrun --nproc-per-node 2 examples/llama_fsdp2.py --layers 2 --dim 256 --heads 4 --kv-heads 2 --seq 128
    stepcast run --nproc 8 --hardware h100-sxm -- examples/llama_fsdp2.py --preset 8b --steps 3

The FSDP2 settings a configuration search varies (conf/search/llama_fsdp2.yaml) are flags: ``--reshard-after-forward``
``default`` reshards every block but the last (torchtitan's choice: backward needs the last block's parameters at
once), ``always`` every block, ``never`` none (no second all-gather, more memory); ``--ac`` ``selective`` (the "op"
policy), ``full`` (every block recomputed in backward) or ``none``; ``--micro-batch`` sequences per forward/backward,
the local batch (``--batch``) accumulated over batch / micro-batch of them, each reducing its gradients (as
torchtitan's gradient accumulation does); ``--compile`` compiles each block with ``torch.compile(fullgraph=True)``
after checkpointing and before sharding (torchtitan's ``--training.compile``); ``--float8`` converts every Linear
but the output projection to torchao's Float8Linear with dynamic tensorwise scaling (torchtitan's
``--model.converters=float8`` with its default settings: bf16 all-gathers; needs ``pip install torchao``). The
published torchtitan rows these flags express: ``python -m benchmarks.emulate.search --config llama_fsdp2``.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

PRESETS = {"8b": dict(layers=32, dim=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq=8192, batch=2)}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim: int, seq: int, theta: float = 500000.0) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of ``x`` (batch, seq, heads, head_dim) by the position angles."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = apply_rope(self.wq(x).view(b, t, self.heads, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(b, t, self.kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim)
        repeat = self.heads // self.kv_heads  # torchtitan repeats the KV heads before SDPA
        k, v = (z.repeat_interleave(repeat, dim=2) for z in (k, v))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.attention = Attention(dim, heads, kv_heads)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        z = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(z)) * self.w3(z))


class Llama(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, kv_heads: int, ffn: int, vocab: int, seq: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_tables(dim // heads, seq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        return self.output(self.norm(h))


#: torchtitan's save list: matmuls, every SDPA backend torch may pick (cuDNN's is the one torch 2.14 takes on an H100),
#: reduce-scatters and max (torchtitan/distributed/activation_checkpoint.py)
SAVE_OPS = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_cudnn_attention.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default, torch.ops.aten.max.default}


def op_sac_policy(counts: dict[str, int], ctx, func, *args, **kwargs) -> CheckpointPolicy:
    """torchtitan's "op" selective checkpointing: save the listed ops' outputs, but recompute every second mm."""
    key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm"
    if func == torch.ops.aten.mm.default:
        counts[key] += 1
    save = func in SAVE_OPS and not (func == torch.ops.aten.mm.default and counts[key] % 2 == 0)
    return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE


class SelectiveCheckpoint(nn.Module):
    """A block whose forward is checkpointed with :func:`op_sac_policy` (its own mm counters)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        counts: dict[str, int] = defaultdict(int)
        contexts = partial(create_selective_checkpoint_contexts, partial(op_sac_policy, counts))
        return checkpoint(self.block, *args, use_reentrant=False, context_fn=contexts, preserve_rng_state=False)


class FullCheckpoint(nn.Module):
    """A block whose activations are all recomputed in backward."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, *args, use_reentrant=False, preserve_rng_state=False)


def convert_to_float8(model: nn.Module) -> None:
    """torchtitan's float8 converter: torchao's Float8Linear (dynamic tensorwise scaling) for every Linear but the
    output projection, converted on the meta device before checkpointing, compiling and sharding."""
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError:
        sys.exit("llama_fsdp2: --float8 needs torchao (pip install torchao)")
    convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "output")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named model size (overrides the size flags)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 128, the preset's with --preset)")
    p.add_argument("--batch", type=int, default=None, help="local batch (sequences per rank and step; default 2)")
    p.add_argument("--micro-batch", type=int, default=None, help="sequences per forward/backward (default: batch)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ac", choices=("selective", "full", "none"), default="selective", help="activation checkpointing")
    p.add_argument("--reshard-after-forward", choices=("default", "always", "never"), default="default")
    p.add_argument("--compile", action="store_true", help="torch.compile each block (torchtitan's --training.compile)")
    p.add_argument("--float8", action="store_true",
                   help="Float8 linear layers, tensorwise scaling (torchtitan's float8 converter; needs torchao)")
    args = p.parse_args(argv)
    batch, seq = args.batch, args.seq  # an explicit --batch or --seq wins over the preset's
    if args.preset:
        for key, value in PRESETS[args.preset].items():
            setattr(args, key, value)
    args.batch = batch or args.batch or 2
    args.seq = seq or args.seq or 128
    args.micro_batch = args.micro_batch or args.batch
    if args.batch % args.micro_batch:
        sys.exit(f"llama_fsdp2: --batch {args.batch} is not a multiple of --micro-batch {args.micro_batch}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Llama(args.layers, args.dim, args.heads, args.kv_heads, args.ffn, args.vocab, args.seq)
    if args.float8:
        convert_to_float8(model)
    wrap = {"selective": SelectiveCheckpoint, "full": FullCheckpoint, "none": None}[args.ac]
    if wrap is not None:
        model.layers = nn.ModuleList(wrap(block) for block in model.layers)
    if args.compile:
        model.layers = nn.ModuleList(torch.compile(block, fullgraph=True) for block in model.layers)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    last = len(model.layers) - 1
    for i, block in enumerate(model.layers):
        reshard = {"default": i < last, "always": True, "never": False}[args.reshard_after_forward]
        fully_shard(block, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device="cuda")
    with torch.no_grad():  # initialise the local shards on the device (values do not matter for timing)
        for name, param in model.named_parameters():
            param.fill_(1.0) if "norm" in name else nn.init.trunc_normal_(param, std=0.02)
        model.cos.copy_(rope_tables(args.dim // args.heads, args.seq)[0])
        model.sin.copy_(rope_tables(args.dim // args.heads, args.seq)[1])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    accumulation = args.batch // args.micro_batch
    for _ in range(args.steps):
        for _ in range(accumulation):
            tokens = torch.randint(args.vocab, (args.micro_batch, args.seq), device="cuda")
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten(0, 1))
            del logits
            (loss / accumulation if accumulation > 1 else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, foreach=True)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
