"""The catalog's scale-out network of a node: how many NICs it has (``network_nics_per_node``)."""
from __future__ import annotations

import pytest
import yaml

from profiling.hardware import HARDWARE_DIR, load_spec


def write(tmp_path, **changes):
    data = yaml.safe_load((HARDWARE_DIR / "a100-sxm-80gb.yaml").read_text()) | changes
    path = tmp_path / "a100-sxm-80gb.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_node_has_one_nic_per_gpu_unless_its_file_says_otherwise(tmp_path):
    assert load_spec(HARDWARE_DIR / "a100-sxm-80gb.yaml").nics_per_node == 8  # DGX A100: 8 x 200 Gb/s
    assert load_spec(write(tmp_path, network_nics_per_node=4)).nics_per_node == 4  # e.g. AWS p4d: 4 EFA NICs


def test_a_bad_nic_count_is_refused_in_one_line_naming_file_and_field(tmp_path):
    with pytest.raises(ValueError, match=r"a100-sxm-80gb\.yaml: field 'network_nics_per_node': .*greater than 0") as err:
        load_spec(write(tmp_path, network_nics_per_node=0))
    assert "\n" not in str(err.value)
