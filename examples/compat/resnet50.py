"""torchvision's ResNet-50 trained with SGD, fp32 or bf16 autocast with channels-last memory format, cuDNN on (the
emulated driver runs torch's real cuDNN): the compatibility benchmark's ResNet rows.

    python examples/compat/resnet50.py --dtype bf16 --channels-last --steps 5
"""
from __future__ import annotations

import argparse
import contextlib

import torch


def main() -> None:
    from torchvision.models import resnet50

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = resnet50(num_classes=100).cuda().to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, args.image, args.image, device="cuda").to(memory_format=fmt)
        y = torch.randint(0, 100, (args.batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16) if args.dtype == "bf16" else contextlib.nullcontext():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
