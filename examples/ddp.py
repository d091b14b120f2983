"""Data-parallel training with DistributedDataParallel over NCCL: an MLP on random data, SGD with momentum.

Launch with torchrun (or ``stepcast run --nproc 2 -- examples/ddp.py``):

    torchrun --nproc-per-node 2 examples/ddp.py --hidden 256 --layers 2 --batch 32 --steps 2
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def build_model(width: int, hidden: int, layers: int) -> nn.Sequential:
    mods: list[nn.Module] = [nn.Linear(width, hidden), nn.ReLU()]
    for _ in range(layers - 1):
        mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    mods.append(nn.Linear(hidden, width))
    return nn.Sequential(*mods)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    args = p.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    torch.manual_seed(0)
    model = DDP(build_model(args.width, args.hidden, args.layers).cuda(), device_ids=[local_rank],
                bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.width, device="cuda")
        loss = (model(x) - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dist.get_rank() == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
