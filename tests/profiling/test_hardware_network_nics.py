"""The catalog's scale-out network of a node: how many NICs it has (``network_nics_per_node``)."""
from __future__ import annotations

import pytest

from stepcast.profiling.hardware import HARDWARE_DIR, load_spec


def test_a_node_has_one_nic_per_gpu_unless_its_file_says_otherwise(catalog_file):
    assert load_spec(HARDWARE_DIR / "a100-sxm-80gb.yaml").nics_per_node == 8  # DGX A100: 8 x 200 Gb/s
    assert load_spec(catalog_file("a100-sxm-80gb", network_nics_per_node=4)).nics_per_node == 4  # e.g. AWS p4d


def test_a_bad_nic_count_is_refused_in_one_line_naming_file_and_field(catalog_file):
    says = r"a100-sxm-80gb\.yaml: field 'network_nics_per_node': .*greater than 0"
    with pytest.raises(ValueError, match=says) as err:
        load_spec(catalog_file("a100-sxm-80gb", network_nics_per_node=0))
    assert "\n" not in str(err.value)
