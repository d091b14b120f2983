"""torchtitan's trainer (``torchtitan.train``) on stand-in assets, every other argument passed to it unchanged:

    torchrun --nproc-per-node 8 examples/torchtitan_train.py --module torchtitan_published_configs \
        --config llama3_8b_bf16 --training.local_batch_size 2 --training.steps 3 ...

torchtitan's configs read a HuggingFace tokenizer (``--hf_assets_path``) and the ``c4`` corpus, which are downloads;
nothing is downloaded here. The script writes a word-level tokenizer (the compatibility example's) and a synthetic
corpus in ``c4_test``'s format, and points torchtitan at them (``--dataloader.dataset c4_test``: the corpus is in that format). Each document holds ``--training.seq_len`` + 1 words,
so every training sample lies within one document and torchtitan's per-document (block-causal) attention masks are
the whole-sequence causal masks the published runs trained with. The folder holding this script is on ``sys.path``,
so ``--module torchtitan_published_configs`` names the config registry beside it.
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from torchtitan_llama3 import assets  # noqa: E402  (the compatibility example's tokenizer and corpus writer)

ASSETS_VERSION = 1  # bump when the written assets change, so a stale folder is not reused
DOCUMENTS = 64      # at least one document per data-parallel rank of the largest published run
DEFAULT_SEQ = 8192  # torchtitan's llama3 configs' training.seq_len


def seq_len(argv: list[str]) -> int:
    """The ``--training.seq_len`` (or ``--training.seq-len``) among torchtitan's arguments, else its default."""
    for i, arg in enumerate(argv):
        for flag in ("--training.seq_len", "--training.seq-len"):
            if arg == flag and i + 1 < len(argv):
                return int(argv[i + 1])
            if arg.startswith(flag + "="):
                return int(arg.split("=", 1)[1])
    return DEFAULT_SEQ


def main() -> None:
    argv = sys.argv[1:]
    words = seq_len(argv) + 1
    folder = assets(f"stepcast-torchtitan-train-v{ASSETS_VERSION}-{words}", documents=DOCUMENTS, words=words)
    sys.argv = [sys.argv[0], "--hf_assets_path", str(folder), "--dataloader.dataset", "c4_test",
                "--dataloader.dataset_path", str(folder / "c4_test"), *argv]
    runpy.run_module("torchtitan.train", run_name="__main__")


if __name__ == "__main__":
    main()
