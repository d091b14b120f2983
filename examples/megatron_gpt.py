"""A small GPT trained with Megatron-core: tensor, pipeline and data parallelism, micro-batches and activation
recomputation all set from the command line, so a configuration search can vary them without editing the script.

    torchrun --nproc-per-node 8 examples/megatron_gpt.py --tp 2 --pp 2 --micro-batch 2 --global-batch 16 \
        --recompute full --layers 4 --hidden 1024 --heads 16 --seq 512 --steps 3

``--experts N --topk K --ep E`` makes every MLP a mixture of N experts (Megatron-core's router, all-to-all token
dispatcher and local experts), E-way expert parallel within the data-parallel ranks.

Data parallelism is what remains: dp = world size / (tp x pp), and the global batch is split into
global_batch / (micro_batch x dp) micro-batches per step (gradient accumulation). Only Megatron-core's local
(pure PyTorch) layers are used (``get_gpt_layer_local_spec``): no Apex or Transformer Engine.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch and data-parallel rank")
    p.add_argument("--global-batch", type=int, default=8, help="sequences per optimizer step over all ranks")
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none",
                   help="activation recomputation (full: every layer's activations are recomputed in backward)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--experts", type=int, default=0, help="mixture-of-experts MLPs of this many experts (0: dense)")
    p.add_argument("--topk", type=int, default=2, help="experts each token is routed to (with --experts)")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel degree (with --experts; all-to-all dispatch)")
    return p.parse_args(argv)


def check_layout(args: argparse.Namespace, world: int) -> int:
    """The data-parallel degree; exits with one line when the layout does not divide."""
    if world % (args.tp * args.pp):
        sys.exit(f"megatron_gpt: world size {world} is not a multiple of tp x pp = {args.tp * args.pp}")
    dp = world // (args.tp * args.pp)
    if args.global_batch % (args.micro_batch * dp):
        sys.exit(f"megatron_gpt: --global-batch {args.global_batch} is not a multiple of micro-batch x dp = "
                 f"{args.micro_batch * dp}")
    if args.layers % args.pp or args.heads % args.tp:
        sys.exit("megatron_gpt: --layers must divide by --pp and --heads by --tp")
    if args.experts and (args.experts % args.ep or dp % args.ep):
        sys.exit("megatron_gpt: --experts and the data-parallel degree must divide by --ep")
    return dp


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    if args.experts:
        from megatron.core.transformer.moe import moe_utils

        # Megatron-core 0.16's router names te_general_gemm whether or not Transformer Engine is installed (its
        # import fallback leaves the name undefined: NameError); None selects its plain-PyTorch GEMM
        if not hasattr(moe_utils, "te_general_gemm"):
            moe_utils.te_general_gemm = None
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    dp = check_layout(args, dist.get_world_size())
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                                             expert_model_parallel_size=args.ep)
    model_parallel_cuda_manual_seed(0)

    recompute = {} if args.recompute == "none" else (
        {"recompute_granularity": "selective"} if args.recompute == "selective" else
        {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    # local experts (SequentialMLP: one GEMM per expert over its tokens) behind Megatron's all-to-all dispatcher
    moe = {} if not args.experts else {
        "num_moe_experts": args.experts, "moe_router_topk": args.topk, "expert_model_parallel_size": args.ep,
        "moe_token_dispatcher_type": "alltoall", "moe_router_load_balancing_type": "none"}
    config = TransformerConfig(num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                               tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                               bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
                               sequence_parallel=False, **recompute, **moe)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(num_experts=args.experts or None),
                     vocab_size=args.vocab,
                     max_sequence_length=args.seq, pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage()).cuda()
    model = Float16Module(config, model)  # bf16 compute, as Megatron's trainer wraps it
    model = DistributedDataParallel(config, DistributedDataParallelConfig(grad_reduce_in_fp32=True), model)
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = model.no_sync
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    micro_batches = args.global_batch // (args.micro_batch * dp)
    positions = torch.arange(args.seq, device="cuda").unsqueeze(0).expand(args.micro_batch, -1)

    def batches():
        while True:
            tokens = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device="cuda")
            yield {"tokens": tokens, "labels": torch.roll(tokens, -1, dims=1)}

    def loss_func(output: torch.Tensor):
        loss = output.float().mean()
        return loss, {"lm loss": loss}

    def forward_step(data_iterator, model):
        batch = next(data_iterator)
        return model(batch["tokens"], positions, None, labels=batch["labels"]), loss_func

    forward_backward = get_forward_backward_func()
    data = batches()
    for step in range(args.steps):
        model.zero_grad_buffer()
        optimizer.zero_grad(set_to_none=True)
        forward_backward(forward_step_func=forward_step, data_iterator=data, model=model,
                         num_microbatches=micro_batches, seq_length=args.seq, micro_batch_size=args.micro_batch,
                         forward_only=False)
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"step {step}: tp {args.tp} pp {args.pp} dp {dp} micro-batches {micro_batches}", flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
