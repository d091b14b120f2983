"""Collective placement over NVLink domains (``emulate.collate.place_collectives`` with
``emulate.sim.durations.ranks_per_node_for``, as ``stepcast run`` calls them): an NVL72 rack's trays are one domain."""
from __future__ import annotations

from stepcast.emulate.collate import place_collectives
from stepcast.emulate.sim.durations import ranks_per_node_for
from stepcast.profiling.hardware import lookup


def placed(members: dict[str, list[int]], ranks_per_node: int) -> dict[str, int]:
    """Each communicator's ``spec.ranks_per_node`` after placement of one collective call on it."""
    events = [{"kind": "collective", "comm": comm, "spec": {"ranks": len(ranks)}} for comm, ranks in members.items()]
    place_collectives([events], members, ranks_per_node)
    return {ev["comm"]: ev["spec"]["ranks_per_node"] for ev in events}


#: a run of 8 ranks on 2 hosts of 4 (``--nproc 4 --nodes 2``): the world, and a data-parallel pair across the hosts
MEMBERS = {"world": list(range(8)), "dp": [0, 4]}


def test_two_trays_of_an_nvl72_rack_are_one_nvlink_domain():
    rack = ranks_per_node_for(8, 2, lookup("gb200-nvl72"))
    assert rack == 72  # 18 trays of 4 share the NVSwitch fabric
    assert placed(MEMBERS, rack) == {"world": 8, "dp": 2}  # every member within the domain: NVLink rates


def test_two_hosts_of_an_hgx_board_split_the_same_run_over_the_network():
    hosts = ranks_per_node_for(8, 2, lookup("h100-sxm"))
    assert hosts == 4
    assert placed(MEMBERS, hosts) == {"world": 4, "dp": 1}  # a host per member of the pair: across the network


def test_a_run_past_one_rack_crosses_the_network_between_racks():
    rack = ranks_per_node_for(144, 36, lookup("gb300-nvl72"))
    assert placed({"world": list(range(144)), "dp": [0, 72]}, rack) == {"world": 72, "dp": 1}
