"""torchtitan 0.1.0's trainer (``torchtitan/train.py``, June 2025) on stand-in assets, every other argument passed to
it unchanged:

    torchrun --nproc-per-node 8 examples/torchtitan_v010_train.py --model.flavor 8B --training.local_batch_size 2 ...

0.1.0 is the torchtitan release nearest the published benchmarks' commits (its own June 2025 runs; the December 2024
commit has no release), and its model is theirs: ``F.scaled_dot_product_attention`` (FlexAttention off), torch's
``nn.RMSNorm``, torchao's Float8 converter with its FSDP all-gather flags, context parallelism over SDPA's ring. It
reads a tiktoken BPE file (``--model.tokenizer_path``) and the ``c4_test`` corpus from its repository, which the wheel
does not ship, and nothing is downloaded here: the script writes a byte-level tiktoken file (the 256 bytes, so any text
encodes) and a synthetic corpus in ``c4_test``'s format (the compatibility example's), and points torchtitan at them.
"""
from __future__ import annotations

import base64
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from torchtitan_llama3 import assets  # noqa: E402  (the compatibility example's assets folder and corpus)

RANKS = 128_000     # Llama 3's tiktoken ranks (torchtitan adds 256 special tokens)
ASSETS_VERSION = 2  # bump when the written assets change, so a stale folder is not reused
DOCUMENTS = 64      # at least one document per data-parallel rank of the largest published run
WORDS = 2048        # words per document: about 5 byte tokens each, so a document spans most sequence lengths


def write_tiktoken(path: Path) -> None:
    """A tiktoken BPE file (``base64(token) rank`` per line) of Llama 3's size: the 256 single bytes (so any text
    encodes, byte by byte) and filler tokens up to :data:`RANKS`. 0.1.0 sizes the model's vocabulary from the
    tokenizer (its words and 256 special tokens), so the output projection and the loss are as wide as Llama 3's."""
    tokens = [bytes([b]) for b in range(256)] + [f"<filler {i}>".encode() for i in range(RANKS - 256)]
    path.write_text("".join(f"{base64.b64encode(t).decode()} {rank}\n" for rank, t in enumerate(tokens)))


def write_tokenizer(folder: Path) -> None:
    """The assets folder's tokenizer: the tiktoken file ``--model.tokenizer_path`` names."""
    write_tiktoken(folder / "tokenizer.model")


def main() -> None:
    folder = assets(f"stepcast-torchtitan-v010-v{ASSETS_VERSION}", documents=DOCUMENTS, words=WORDS,
                    tokenizer=write_tokenizer)
    sys.argv = [sys.argv[0], "--model.tokenizer_path", str(folder / "tokenizer.model"),
                "--training.dataset", "c4_test", "--training.dataset_path", str(folder / "c4_test"), *sys.argv[1:]]
    runpy.run_module("torchtitan.train", run_name="__main__")


if __name__ == "__main__":
    main()
