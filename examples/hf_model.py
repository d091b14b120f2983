"""A HuggingFace transformer built from a config file (random weights, no download), run forward or forward +
backward the way NeuSight measured its end-to-end labels, or as a plain no-sync training loop.

NeuSight's protocol (``measure_e2e`` in sitar-lab/NeuSight), mirrored here: fp32 with TF32 off, ``eager`` attention,
``input_ids`` all ones of shape (batch, seq); inference: BERT as ``AutoModelForSequenceClassification``, the others
as ``AutoModelForCausalLM``, ``eval()`` under ``no_grad``; training: BERT as ``AutoModelForPreTraining``, the others
as ``AutoModelForCausalLM``, ``train()`` (dropout on), forward timed, then an untimed cross-entropy loss of the
logits against ``input_ids``, then the backward timed; gradients accumulate (no ``zero_grad``, no optimizer step);
``empty_cache`` before every repetition; ``synchronize`` after every timed pass.

Iteration marks (``prof.step()``), so that an emulator that cuts iterations at profiler steps sees each timed pass
as one iteration: one mark after the model set-up, then per repetition, in order (``PHASES``)::

    inference: forward | setup            training: forward | loss | backward | setup

``setup`` is the untimed ``empty_cache`` before the next repetition. With ``--no-sync`` the script is an
ordinary loop instead: forward, loss, backward, ``prof.step()``, no synchronisation and no ``.item()``, one iteration
per step (the host runs ahead of the device).

    python examples/hf_model.py --config bert_large.json --mode inf --batch 8 --seq 512 --reps 2
    python examples/hf_model.py --config gpt2_large.json --mode train --batch 4 --seq 1024 --no-sync --reps 3 \
        --attention sdpa
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

PHASES = {"inf": ("forward", "setup"), "train": ("forward", "loss", "backward", "setup")}


def build_model(config_path: Path, mode: str, attention: str = "eager") -> torch.nn.Module:
    """The model class NeuSight used for this config's architecture and mode, on the current CUDA device."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(config_path))
    arch = json.loads(config_path.read_text())["architectures"][0].lower()
    if "bert" in arch:
        auto = transformers.AutoModelForPreTraining if mode == "train" else \
            transformers.AutoModelForSequenceClassification
    else:
        auto = transformers.AutoModelForCausalLM
    with torch.device("cuda"):  # initialise on the device: no host-side copy of the weights
        model = auto.from_config(config, attn_implementation=attention, dtype=torch.float32)
    return model.train() if mode == "train" else model.eval()


def logits_of(result) -> torch.Tensor:
    """BERT pre-training returns ``prediction_logits``; the others ``logits``."""
    return result["prediction_logits"] if "prediction_logits" in result else result["logits"]


def loss_of(result, input_ids: torch.Tensor) -> torch.Tensor:
    logits = logits_of(result)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), input_ids.view(-1))


def run_labelled(model: torch.nn.Module, input_ids: torch.Tensor, mode: str, reps: int, prof) -> None:
    """NeuSight's repetitions, one ``prof.step()`` after each phase of ``PHASES[mode]``."""
    torch.cuda.synchronize()
    prof.step()  # ends the model set-up
    for _ in range(reps):
        if mode == "inf":
            with torch.no_grad():
                model(input_ids)
            torch.cuda.synchronize()
            prof.step()  # ends 'forward'
        else:
            result = model(input_ids)
            torch.cuda.synchronize()
            prof.step()  # ends 'forward'
            loss = loss_of(result, input_ids)
            del result
            torch.cuda.synchronize()
            prof.step()  # ends 'loss'
            loss.backward()
            del loss
            torch.cuda.synchronize()
            prof.step()  # ends 'backward'
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        prof.step()  # ends 'setup'


def run_no_sync(model: torch.nn.Module, input_ids: torch.Tensor, steps: int, prof) -> None:
    """A plain training loop without synchronisation: forward, loss, backward, ``prof.step()``."""
    for _ in range(steps):
        loss_of(model(input_ids), input_ids).backward()
        prof.step()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, required=True, help="a HuggingFace config.json")
    p.add_argument("--mode", choices=sorted(PHASES), default="train")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--reps", type=int, default=2, help="repetitions (the first is warm-up)")
    p.add_argument("--no-sync", action="store_true", help="a plain loop: no synchronize, prof.step() per step")
    p.add_argument("--attention", default="eager", help="HF attn_implementation (NeuSight: eager; HF's default: sdpa)")
    args = p.parse_args(argv)
    if args.no_sync and args.mode != "train":
        p.error("--no-sync runs training steps: use it with --mode train")

    torch.backends.cuda.matmul.allow_tf32 = False  # NeuSight measured IEEE fp32 (sgemm)
    torch.backends.cudnn.allow_tf32 = False
    model = build_model(args.config, args.mode, args.attention)
    input_ids = torch.ones(args.batch, args.seq, dtype=torch.int64, device="cuda")
    # The profiler only marks steps: its schedule never records, so it adds no host time to the passes.
    quiet = torch.profiler.schedule(skip_first=10**9, wait=0, warmup=0, active=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=quiet) as prof:
        if args.no_sync:
            run_no_sync(model, input_ids, args.reps, prof)
        else:
            run_labelled(model, input_ids, args.mode, args.reps, prof)


if __name__ == "__main__":
    main()
