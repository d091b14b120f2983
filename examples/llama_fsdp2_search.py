"""examples/llama_fsdp2.py (torchtitan's Llama 3 under 1D FSDP2) with the FSDP2 settings a configuration search
varies exposed as flags: when blocks reshard their parameters after forward, how activations are checkpointed, and
how the local batch is split into micro-batches (gradient accumulation). The model, its selective checkpointing
policy, mixed precision and the optimizer are llama_fsdp2's own (imported, not copied).

    python -m emulate run --nproc 8 --hardware h100-sxm -- examples/llama_fsdp2_search.py --preset 8b \
        --reshard-after-forward default --ac selective --micro-batch 1 --steps 3

``--reshard-after-forward``: ``default`` reshards every block but the last (torchtitan's choice: the last block's
parameters are needed again at once by backward), ``always`` every block, ``never`` none (parameters stay gathered
from forward to backward: no second all-gather, more memory). ``--ac``: ``selective`` (torchtitan's "op" policy),
``full`` (every block recomputed in backward), ``none``. ``--micro-batch``: sequences per forward/backward; the
local batch (``--batch``) is accumulated over batch / micro-batch of them, each reducing its gradients (as
torchtitan's gradient accumulation does).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from llama_fsdp2 import PRESETS, Llama, SelectiveCheckpoint, rope_tables


class FullCheckpoint(nn.Module):
    """A block whose activations are all recomputed in backward."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, *args, use_reentrant=False, preserve_rng_state=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named model size (overrides the size flags)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=None, help="local batch (sequences per rank and step)")
    p.add_argument("--micro-batch", type=int, default=None, help="sequences per forward/backward (default: batch)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ac", choices=("selective", "full", "none"), default="selective")
    p.add_argument("--reshard-after-forward", choices=("default", "always", "never"), default="default")
    args = p.parse_args(argv)
    batch = args.batch
    if args.preset:
        for key, value in PRESETS[args.preset].items():
            setattr(args, key, value)
    args.batch = batch or args.batch or 2
    args.micro_batch = args.micro_batch or args.batch
    if args.batch % args.micro_batch:
        sys.exit(f"llama_fsdp2_search: --batch {args.batch} is not a multiple of --micro-batch {args.micro_batch}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Llama(args.layers, args.dim, args.heads, args.kv_heads, args.ffn, args.vocab, args.seq)
    wrap = {"selective": SelectiveCheckpoint, "full": FullCheckpoint, "none": None}[args.ac]
    if wrap is not None:
        model.layers = nn.ModuleList(wrap(block) for block in model.layers)
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
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten(0, 1)) / accumulation
            del logits
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, foreach=True)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
