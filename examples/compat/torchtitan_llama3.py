"""torchtitan's llama3 ``debugmodel`` config (``--module llama3 --config llama3_debugmodel``) with its default
attention (FlexAttention) and its other defaults, trained by torchtitan's own trainer for a few steps: the
compatibility benchmark's torchtitan rows (1 or 2 ranks, FSDP over all).

    torchrun --nproc-per-node 2 examples/compat/torchtitan_llama3.py --steps 5

The config reads its tokenizer and the ``c4_test`` corpus from torchtitan's repository (``./tests/assets``), which the
wheel does not ship, and nothing is downloaded here: the script writes a word-level tokenizer within the model's
vocabulary and a small synthetic corpus in the same formats to a temporary folder and points the config at them
(``--hf_assets_path``, ``--dataloader.dataset_path``). Extra arguments go to torchtitan's config parser unchanged.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

VOCAB = 2048  # the debugmodel's vocabulary: every token id must fall below it
SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<unk>")
ASSETS_VERSION = 1  # bump when the written assets change, so a stale folder is not reused


def write_tokenizer(folder: Path) -> None:
    """A whitespace word-level tokenizer (``tokenizer.json``) and its ``tokenizer_config.json`` naming BOS/EOS,
    the two files torchtitan's HuggingFace tokenizer loads."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    words = [f"w{i}" for i in range(VOCAB - len(SPECIAL))]
    vocab = {tok: i for i, tok in enumerate((*SPECIAL, *words))}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "add_bos_token": True, "add_eos_token": True}))


def write_corpus(folder: Path, documents: int = 64, words: int = 600) -> None:
    """``c4_test``'s layout: JSON lines with a ``text`` field, loaded with ``datasets.load_dataset(folder)``."""
    rng = random.Random(0)
    folder.mkdir()
    with open(folder / "c4.json", "w") as f:
        for _ in range(documents):
            text = " ".join(f"w{rng.randrange(VOCAB - len(SPECIAL))}" for _ in range(words))
            f.write(json.dumps({"text": text}) + "\n")


def assets(name: str = f"stepcast-torchtitan-assets-v{ASSETS_VERSION}", documents: int = 64,
           words: int = 600, tokenizer=None) -> Path:
    """The assets folder ``name`` under the temporary folder (a tokenizer, written by ``tokenizer(folder)``, default
    :func:`write_tokenizer`, and ``documents`` documents of ``words`` words in ``c4_test``), written once per machine
    (every rank may call this: the first rename wins)."""
    final = Path(tempfile.gettempdir()) / name
    if final.is_dir():
        return final
    staging = Path(tempfile.mkdtemp(prefix=final.name + "-", dir=final.parent))
    (tokenizer or write_tokenizer)(staging)
    write_corpus(staging / "c4_test", documents=documents, words=words)
    try:
        os.rename(staging, final)
    except OSError:  # another rank renamed its copy first
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return final


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    args, rest = p.parse_known_args()
    folder = assets()
    sys.argv = [sys.argv[0], "--module", "llama3", "--config", "llama3_debugmodel",
                "--hf_assets_path", str(folder), "--dataloader.dataset_path", str(folder / "c4_test"),
                "--training.steps", str(args.steps), "--training.local_batch_size", "2", "--training.seq_len", "256",
                "--checkpoint.no-enable", "--validator.no-enable", *rest]
    import runpy

    runpy.run_module("torchtitan.train", run_name="__main__")


if __name__ == "__main__":
    main()
