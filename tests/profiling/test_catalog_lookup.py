"""Hardware catalog and model catalog: ids and vendor / Hugging Face aliases resolve to one entry."""
from __future__ import annotations

import pytest

from stepcast.profiling.hardware import UnknownHardwareError, lookup
from stepcast.profiling.model_catalog import UnknownModelError, lookup_model


@pytest.mark.parametrize("name, expected", [
    ("h100-sxm", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("Tesla T4", "t4"),
    ("NVIDIA H200", "h200"),
])
def test_hardware_alias_lookup(name, expected):
    assert lookup(name).id == expected


def test_unknown_hardware_names_the_catalog():
    with pytest.raises(UnknownHardwareError) as err:
        lookup("NVIDIA GeForce RTX 9999")
    message = str(err.value)
    assert "unknown hardware 'NVIDIA GeForce RTX 9999'" in message and "h100-sxm" in message
    assert "\n" not in message


@pytest.mark.parametrize("name, expected", [
    ("llama-2-7b", "llama-2-7b"),
    ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ("Qwen/Qwen2-7B", "qwen2-7b"),
    ("openai-community/gpt2", "gpt2"),
])
def test_model_alias_lookup(name, expected):
    assert lookup_model(name).id == expected


def test_model_dims_are_consistent():
    llama3 = lookup_model("llama-3-8b")
    assert (llama3.hidden, llama3.heads, llama3.kv_heads, llama3.head_dim) == (4096, 32, 8, 128)
    with pytest.raises(UnknownModelError, match="unknown model 'bert'"):
        lookup_model("bert")


def test_an_nvlink_figure_without_its_topology_is_refused_in_one_line(tmp_path):
    import pytest
    import yaml

    from stepcast.profiling.hardware import HARDWARE_DIR, load_spec

    data = yaml.safe_load((HARDWARE_DIR / "h100-sxm.yaml").read_text())
    del data["nvlink_topology"]
    path = tmp_path / "h100-sxm.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"h100-sxm\.yaml: .*nvlink_topology") as err:
        load_spec(path)
    assert "\n" not in str(err.value)
    assert load_spec(HARDWARE_DIR / "h100-sxm.yaml").nvlink_topology == "switch"
