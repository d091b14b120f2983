"""A torchtitan 0.3.0 DeepSeek-V3-style mixture-of-experts model (its ``debugmodel`` flavor, or ``--flavor``) trained
with expert parallelism, through torchtitan's own model, parallelisation and MoE layers (``torch._grouped_mm``
experts, the all-to-all token dispatcher) on random tokens:

    torchrun --nproc-per-node 8 examples/torchtitan_moe.py --ep 8 --steps 4
    stepcast run --nproc 8 --moe-routing power:1.2 -- examples/torchtitan_moe.py --flavor 16B --layers 3 --ep 8
    stepcast run --nproc 8 -- examples/torchtitan_moe.py --flavor 16B --layers 3 --ep 8 --float8

The trainer's data and tokenizer assets are not shipped in the wheel, so the loop is written here the way
``torchtitan.trainer`` runs it (meta-device build, ``parallelize_fn``, ``to_empty`` + ``init_weights``, AdamW), on
its ``partial_dtensor`` SPMD backend (DTensor for the model-parallel axes; the all-to-all dispatcher then calls
``all_to_all_single`` with split sizes read to the host); attention is torch's SDPA (causal) rather than
FlexAttention, so nothing is compiled.
"""
from __future__ import annotations

import argparse
import os
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flavor", default="debugmodel", help="deepseek_v3 flavor (default %(default)s)")
    p.add_argument("--layers", type=int, default=None, help="keep the flavor's first N layers (default: all)")
    p.add_argument("--ep", type=int, default=None, help="expert-parallel degree (default: the world size)")
    p.add_argument("--batch", type=int, default=8, help="local batch (default %(default)s)")
    p.add_argument("--seq", type=int, default=2048, help="sequence length (default %(default)s)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--float8", action="store_true",
                   help="Float8 experts: torchtitan's Float8GroupedExpertsConverter (torchao's rowwise scaled "
                        "grouped GEMMs, token groups padded to 16), as --model.converters quantize.grouped_mm.float8")
    return p.parse_args()


def main() -> None:
    ns = parse()
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.utils import set_spmd_backend
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.deepseek_v3 import model_registry

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")
    ep = ns.ep or world
    parallelism = ParallelismConfig(expert_parallel_degree=ep, data_parallel_shard_degree=-1,
                                    spmd_backend="partial_dtensor")
    set_spmd_backend(parallelism.spmd_backend)  # as the trainer does
    dims = ParallelDims.from_config(parallelism, world)
    dims.build_mesh()
    spec = model_registry(ns.flavor)
    if ns.layers:
        spec.model.layers = spec.model.layers[:ns.layers]
    for layer in spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()

    if ns.float8:  # as the trainer applies its converters: to the model config, before the build
        from torchtitan.components.quantization import Float8GroupedExpertsConverter

        converter = Float8GroupedExpertsConverter.Config()
        spec.model = Float8GroupedExpertsConverter(converter).convert(spec.model)
    spec.model.update_from_config(config=SimpleNamespace(parallelism=parallelism))  # what it reads of a job
    with torch.device("meta"):
        model = spec.model.build()
    training = TrainingConfig(local_batch_size=ns.batch, seq_len=ns.seq, steps=ns.steps)
    model = spec.parallelize_fn(model, parallel_dims=dims, training=training, parallelism=parallelism,
                                compile_config=CompileConfig(), ac_config=None, dump_folder="/tmp")
    model.to_empty(device="cuda")
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=8e-4, foreach=True)
    vocab = spec.model.vocab_size
    for step in range(ns.steps):
        tokens = torch.randint(0, vocab, (ns.batch, ns.seq + 1), device="cuda")
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
