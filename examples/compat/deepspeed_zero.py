"""DeepSpeed ZeRO stage 2 or 3 around a torch optimizer (``torch.optim.AdamW`` passed to ``deepspeed.initialize``)
on a stack of MLP blocks in bf16: the compatibility benchmark's DeepSpeed rows.

    torchrun --nproc-per-node 2 examples/compat/deepspeed_zero.py --stage 3 --steps 5
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.nn as nn


def main() -> None:
    import deepspeed

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stage", type=int, choices=(2, 3), default=2)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    deepspeed.init_distributed(dist_backend="nccl")
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.ReLU(),
                                          nn.Linear(4 * args.dim, args.dim)) for _ in range(args.blocks)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": args.batch, "bf16": {"enabled": True},
              "zero_optimization": {"stage": args.stage}, "zero_allow_untested_optimizer": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.dim, device="cuda", dtype=torch.bfloat16)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        if engine.global_rank == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
