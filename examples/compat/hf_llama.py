"""A tiny HuggingFace Llama (random weights, built from a config: no download) trained in bf16, eager attention,
with a plain loop or through ``transformers.Trainer``: the compatibility benchmark's HF rows.

    python examples/compat/hf_llama.py --steps 4
    python examples/compat/hf_llama.py --trainer --steps 4     # needs accelerate, as Trainer does
"""
from __future__ import annotations

import argparse

import torch


def build(args: argparse.Namespace) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=args.hidden, intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.heads, vocab_size=args.vocab,
                         max_position_embeddings=args.seq, attn_implementation="eager")
    return LlamaForCausalLM(config).to("cuda", torch.bfloat16)


def train_loop(model: torch.nn.Module, args: argparse.Namespace) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f}", flush=True)


def train_trainer(model: torch.nn.Module, args: argparse.Namespace) -> None:
    import tempfile

    from transformers import Trainer, TrainingArguments

    ids = torch.randint(0, args.vocab, (args.batch * args.steps, args.seq))
    data = [{"input_ids": row, "labels": row} for row in ids]
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                                  bf16=True, report_to=[], save_strategy="no", logging_steps=1,
                                  dataloader_num_workers=0, optim="adamw_torch")
        Trainer(model=model, args=targs, train_dataset=data).train()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainer", action="store_true", help="train through transformers.Trainer")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    model = build(args)
    (train_trainer if args.trainer else train_loop)(model, args)


if __name__ == "__main__":
    main()
