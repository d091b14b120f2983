"""torchtitan's llama3 ``debugmodel`` flavour with its default attention, trained by torchtitan's own trainer for a
few steps on its bundled test dataset: the compatibility benchmark's torchtitan rows (1 or 2 ranks, FSDP over all).

    torchrun --nproc-per-node 2 examples/compat/torchtitan_llama3.py --steps 5

Extra arguments go to torchtitan's job config parser unchanged.
"""
from __future__ import annotations

import argparse
import sys


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    args, rest = p.parse_known_args()
    sys.argv = [sys.argv[0], "--model.name", "llama3", "--model.flavor", "debugmodel",
                "--training.steps", str(args.steps), "--training.local_batch_size", "2", "--training.seq_len", "256",
                "--training.dataset", "c4_test", "--metrics.log_freq", "1", "--checkpoint.no_enable", *rest]
    import runpy

    runpy.run_module("torchtitan.train", run_name="__main__")


if __name__ == "__main__":
    main()
