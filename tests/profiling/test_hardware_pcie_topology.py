"""The catalog's PCIe layout of a node: how many GPUs meet under one PCIe switch (``gpus_per_pcie_switch``)."""
from __future__ import annotations

import pytest
import yaml

from stepcast.profiling.hardware import HARDWARE_DIR, load_catalog, load_spec


def test_a_file_without_the_field_takes_two_gpus_per_switch(tmp_path):
    data = yaml.safe_load((HARDWARE_DIR / "l40s.yaml").read_text())
    data.pop("gpus_per_pcie_switch", None)
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_spec(path).gpus_per_pcie_switch == 2


def test_every_catalog_gpu_fits_its_switches_in_its_node():
    for spec in load_catalog().values():
        assert 1 <= spec.gpus_per_pcie_switch <= spec.gpus_per_node, spec.id


@pytest.mark.parametrize("value, says", [(0, "greater than 0"), (16, "more than gpus_per_node"),
                                         ("two", "valid integer")])
def test_a_bad_switch_size_is_refused_in_one_line_naming_file_and_field(catalog_file, value, says):
    with pytest.raises(ValueError, match=rf"l40s\.yaml: field 'gpus_per_pcie_switch': .*{says}") as err:
        load_spec(catalog_file("l40s", gpus_per_pcie_switch=value))
    assert "\n" not in str(err.value)


def test_a_switch_as_big_as_the_node_is_accepted(catalog_file):
    assert load_spec(catalog_file("l40s", gpus_per_pcie_switch=8)).gpus_per_pcie_switch == 8
