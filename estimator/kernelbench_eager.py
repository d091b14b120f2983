"""Run KernelBench problems as KernelBench times their eager baseline (``baseline_time_torch.json``): each
reference ``Model`` built from ``get_init_inputs()``, called on ``get_inputs()`` on the GPU, forward only, no
compile. Each call is one profiler step, so the emulator cuts one iteration per forward: problem ``i``'s calls are
steps ``i * CALLS`` to ``(i + 1) * CALLS - 1``. Several problems share one run (one start-up of torch and cuDNN).
``--events`` times each call as KernelBench does (``time_execution_with_cuda_event``): two timing events recorded
around it, then a device synchronisation.

    stepcast run --hardware t4 -- estimator/kernelbench_eager.py [--events] CALLS A.py [B.py ...]

The script the convolution-family table's captures run (:mod:`estimator.kernelbench`; the convolution, matmul and
eager KernelBench benchmarks run it too); plain PyTorch, so it runs the same on a real GPU.
"""
from __future__ import annotations

import gc
import importlib.util
import sys

import torch


def load(path: str):
    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    return problem


def timed_call(model, inputs: list) -> None:
    """One call between two timing events, then a synchronisation (what KernelBench measures)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    model(*inputs)
    end.record()
    torch.cuda.synchronize()


def main(argv: list[str]) -> int:
    events = "--events" in argv
    argv = [a for a in argv if a != "--events"]
    calls, paths = int(argv[0]), argv[1:]
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for path in paths:
            problem = load(path)
            model = problem.Model(*problem.get_init_inputs()).cuda()
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
            for _ in range(calls):
                if events:
                    timed_call(model, inputs)
                else:
                    model(*inputs)
                prof.step()
            del model, inputs
            gc.collect()
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
