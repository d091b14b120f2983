"""examples/megatron_gpt.py with NCCL-only process groups, for emulation at scale with ``stepcast run --run-ranks``
(a sparse run starts only some ranks; gloo groups connect every member through the store, so Megatron-core's
gloo groups, which this training loop never uses, are not created). Same arguments as megatron_gpt.py:

    stepcast run --nproc 8 --nodes 16 --run-ranks 0-7,16-23,32-39,48-55,64-71,80-87,96-103,112-119 -- \\
        examples/megatron_scale.py --tp 8 --pp 8 --layers 8 --hidden 512 --heads 8 --seq 256 --global-batch 16
"""
from __future__ import annotations

import functools

from megatron.core import parallel_state

import megatron_gpt

if __name__ == "__main__":
    parallel_state.initialize_model_parallel = functools.partial(parallel_state.initialize_model_parallel,
                                                                 create_gloo_process_groups=False)
    megatron_gpt.main()
