"""The catalog's NVLink domain (``nvlink_domain_gpus``): the GPUs one NVLink fabric joins, a host's by default, a
whole NVL72 rack of 18 four-GPU hosts for GB200 / GB300."""
from __future__ import annotations

import pytest

from stepcast.profiling.hardware import HARDWARE_DIR, load_catalog, load_spec


def test_a_boards_domain_is_its_host_unless_its_file_says_otherwise():
    catalog = load_catalog()
    b200 = catalog["b200"]
    assert (b200.gpus_per_node, b200.nvlink_domain_gpus, b200.hosts_per_nvlink_domain) == (8, 8, 1)
    assert b200.ranks_per_nvlink_domain(8) == 8 and b200.nics_per_nvlink_domain == b200.nics_per_node == 8
    assert all(s.nvlink_domain_gpus == s.gpus_per_node for k, s in catalog.items() if not k.endswith("-nvl72"))


@pytest.mark.parametrize("hw_id", ["gb200-nvl72", "gb300-nvl72"])
def test_an_nvl72_rack_is_one_domain_of_eighteen_four_gpu_hosts(hw_id):
    rack = load_spec(HARDWARE_DIR / f"{hw_id}.yaml")
    assert (rack.gpus_per_node, rack.nvlink_domain_gpus, rack.hosts_per_nvlink_domain) == (4, 72, 18)
    assert rack.ranks_per_nvlink_domain(4) == 72 and rack.ranks_per_nvlink_domain(2) == 36
    assert rack.ranks_per_nvlink_domain(8) == 72  # never more ranks on a host than its GPUs
    assert rack.nics_per_nvlink_domain == 72  # one NIC per GPU on each of the 18 trays


def test_a_domain_of_part_of_a_host_is_refused_in_one_line_naming_file_and_field(catalog_file):
    with pytest.raises(ValueError, match=r"gb200-nvl72\.yaml: field 'nvlink_domain_gpus': .*is 70, expected a "
                                         r"multiple of gpus_per_node \(4\)") as err:
        load_spec(catalog_file("gb200-nvl72", nvlink_domain_gpus=70))
    assert "\n" not in str(err.value)


def test_hosts_joined_without_nvlink_switches_are_refused(catalog_file):
    with pytest.raises(ValueError, match=r"a40\.yaml: field 'nvlink_domain_gpus': .*only NVLink switches join hosts"):
        load_spec(catalog_file("a40", nvlink_domain_gpus=16))
