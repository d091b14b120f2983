"""Run one KernelBench problem as KernelBench times it under torch.compile: the reference ``Model`` built from
``get_init_inputs()``, compiled with Inductor's default mode, called on ``get_inputs()`` on the GPU, forward only.
Each call is one profiler step, so the emulator cuts one iteration per forward (the first compiles).

    stepcast run --hardware t4 -- benchmarks/emulate/e2e/kernelbench_problem.py PROBLEM.py [CALLS]

The script the KernelBench benchmark emulates (:mod:`benchmarks.emulate.kernelbench`); plain PyTorch, so it runs the
same on a real GPU.
"""
from __future__ import annotations

import importlib.util
import sys

import torch


def main(argv: list[str]) -> int:
    path, calls = argv[0], int(argv[1]) if len(argv) > 1 else 4
    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    model = problem.Model(*problem.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    compiled = torch.compile(model)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            compiled(*inputs)
            prof.step()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
