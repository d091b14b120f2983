"""A GPT-style decoder trained on random tokens: token + position embeddings, pre-norm blocks with causal
scaled-dot-product attention and a GELU MLP, AdamW, bf16 autocast (or fp16 with a GradScaler).

Plain PyTorch: runs unchanged on a real GPU. The defaults are tiny (seconds under emulation);
``--preset 1.3b`` is a ~1.3B-parameter model (24 layers, d_model 2048, 16 heads) at batch 8 x 1024 tokens.

    python examples/gpt.py --layers 2 --d-model 128 --heads 4 --seq 64 --batch 4 --steps 2
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"1.3b": dict(layers=24, d_model=2048, heads=16, seq=1024, batch=8, vocab=50304, tie_embeddings=True)}


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, heads: int, layers: int,
                 tie_embeddings: bool = False) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        if tie_embeddings:  # GPT-2/3 style: the output projection shares the token embedding
            self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named model size (overrides the size flags)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--amp-dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--grad-scaler", action="store_true", help="scale the loss with torch.amp.GradScaler")
    p.add_argument("--tie-embeddings", action="store_true", help="share the token embedding with the output layer")
    p.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True) instead of the foreach default")
    p.add_argument("--host-data", type=int, default=0, metavar="DOCS",
                   help="build each batch on the host as a map-style data loader does: shuffle an index of DOCS "
                        "documents with numpy and copy the tokens drawn to the GPU (0, the default: draw them there)")
    args = p.parse_args(argv)
    if args.preset:
        for key, value in PRESETS[args.preset].items():
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    device = torch.device("cuda")
    with device:  # parameters are created (and initialised) on the GPU directly
        model = GPT(args.vocab, args.seq, args.d_model, args.heads, args.layers, args.tie_embeddings)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=args.fused_adamw or None)
    amp_dtype = torch.bfloat16 if args.amp_dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=args.grad_scaler)
    params = sum(p.numel() for p in model.parameters())
    print(f"GPT: {params / 1e6:.1f}M parameters, batch {args.batch} x {args.seq} tokens on "
          f"{torch.cuda.get_device_name()}")
    rng = np.random.default_rng(0)
    for step in range(args.steps):
        if args.host_data:  # host work inside one numpy call: no aten op or Python call counts it
            drawn = rng.permutation(max(args.host_data, args.batch * (args.seq + 1)))[: args.batch * (args.seq + 1)]
            tokens = torch.from_numpy(drawn % args.vocab).view(args.batch, args.seq + 1).to(device)
        else:
            tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), device=device)
        x, y = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast("cuda", dtype=amp_dtype):
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        value = loss.item()
        print(f"step {step}: loss {value:.4f}" + ("" if math.isfinite(value) else " (not finite)"))


if __name__ == "__main__":
    main()
