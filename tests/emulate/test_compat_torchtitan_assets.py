"""examples/compat/torchtitan_llama3.py's stand-in assets: torchtitan's wheel ships no tokenizer or c4_test."""
from __future__ import annotations

import importlib.util
import json

import pytest

from stepcast.profiling.paths import REPO_ROOT


def load_example():
    spec = importlib.util.spec_from_file_location("tt_example", REPO_ROOT / "examples/compat/torchtitan_llama3.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_corpus_is_c4_test_json_lines_of_in_vocabulary_words(tmp_path):
    example = load_example()
    example.write_corpus(tmp_path / "c4_test", documents=3, words=50)
    docs = [json.loads(line) for line in (tmp_path / "c4_test" / "c4.json").read_text().splitlines()]
    assert len(docs) == 3 and all(len(d["text"].split()) == 50 for d in docs)
    assert all(int(w[1:]) < example.VOCAB - len(example.SPECIAL) for d in docs for w in d["text"].split())


def test_the_tokenizer_maps_corpus_words_below_the_models_vocabulary(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer

    example = load_example()
    example.write_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size() == example.VOCAB
    ids = tok.encode("w0 w2044 nonsense").ids
    assert ids == [3, 2047, tok.token_to_id("<unk>")]
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tok.token_to_id(config["bos_token"]) is not None and tok.token_to_id(config["eos_token"]) is not None


def test_assets_are_written_once_and_reused(tmp_path, monkeypatch):
    pytest.importorskip("tokenizers")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    example = load_example()
    first = example.assets()
    assert (first / "tokenizer.json").is_file() and (first / "c4_test" / "c4.json").is_file()
    assert example.assets() == first and len(list(tmp_path.iterdir())) == 1  # no staging folder left behind
