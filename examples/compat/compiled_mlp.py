"""A small transformer block stack trained under ``torch.compile`` with a chosen mode (Inductor's Triton kernels):
the compatibility benchmark's compile rows.

    python examples/compat/compiled_mlp.py --mode max-autotune-no-cudagraphs --steps 5
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="default", choices=("default", "max-autotune-no-cudagraphs", "reduce-overhead"))
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(args.dim, args.heads) for _ in range(args.blocks))).cuda()
    compiled = torch.compile(model, mode=args.mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.dim, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
