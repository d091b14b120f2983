"""A small convolutional classifier (no torchvision): conv + batch norm + ReLU stages with max pooling, a linear
head, cross-entropy on random images, SGD with momentum.

    python examples/cnn.py --channels 16 --image 32 --batch 8 --steps 2
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_model(channels: int, stages: int, classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    c_in, c_out = 3, channels
    for _ in range(stages):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                   nn.MaxPool2d(2)]
        c_in, c_out = c_out, c_out * 2
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()

    torch.manual_seed(0)
    model = build_model(args.channels, args.stages, args.classes).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, args.image, args.image, device="cuda")
        y = torch.randint(args.classes, (args.batch,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
