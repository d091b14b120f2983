"""Causal self-attention through FlexAttention (``torch.nn.attention.flex_attention``, compiled to a Triton kernel)
in a small bf16 model: the compatibility benchmark's FlexAttention row.

    python examples/compat/flex_attention.py --steps 5
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class FlexBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, block_mask, attend) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = attend(q, k, v, block_mask=block_mask)
        return x + self.out(y.transpose(1, 2).reshape(b, s, d))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.ModuleList(FlexBlock(args.dim, args.heads) for _ in range(args.blocks)).to("cuda", torch.bfloat16)
    attend = torch.compile(flex_attention)
    mask = create_block_mask(causal, None, None, args.seq, args.seq, device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.dim, device="cuda", dtype=torch.bfloat16)
        for block in model:
            x = block(x, mask, attend)
        loss = x.float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
