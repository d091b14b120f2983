"""emulate.roles: which ranks run, the twin each absent rank copies, and the communicators a copy uses."""
from __future__ import annotations

import pytest

from stepcast.emulate.roles import RunRanksError, copies, coordinates, groups_from_records, parse_run_ranks, ranges

TP, DP, PP = 2, 2, 2
WORLD = TP * DP * PP


def rank_of(tp: int, dp: int, pp: int) -> int:
    """Megatron's default order tp-cp-ep-dp-pp: tensor-parallel ranks adjacent, pipeline stages farthest apart."""
    return tp + TP * dp + TP * DP * pp


def megatron_like_record(running: list[int]) -> dict:
    """The groups a TP2 x DP2 x PP2 Megatron job creates, in its order, with a communicator where a running rank
    is a member (what emulate/sparse_store.py records)."""
    groups = [("0", list(range(WORLD)), None)]
    groups += [(f"tp{pp}{dp}", [rank_of(t, dp, pp) for t in range(TP)], "TENSOR_MODEL_PARALLEL_GROUP")
               for pp in range(PP) for dp in range(DP)]
    groups += [(f"dp{pp}{tp}", [rank_of(tp, d, pp) for d in range(DP)], "DATA_PARALLEL_GROUP")
               for pp in range(PP) for tp in range(TP)]
    groups += [(f"tpdp{pp}", sorted(rank_of(t, d, pp) for t in range(TP) for d in range(DP)),
                "TENSOR_AND_DATA_PARALLEL_GROUP") for pp in range(PP)]
    groups += [(f"pp{dp}{tp}", [rank_of(tp, dp, p) for p in range(PP)], "PIPELINE_MODEL_PARALLEL_GROUP")
               for dp in range(DP) for tp in range(TP)]
    return {"run_ranks": running, "comms": [],
            "groups": [{"name": n, "ranks": r, "desc": d, "comm": f"c-{n}" if set(r) & set(running) else None}
                       for n, r, d in groups]}


def test_run_ranks_parse_lists_and_ranges():
    assert parse_run_ranks("0-3,8,10-11", 16) == [0, 1, 2, 3, 8, 10, 11]
    assert ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


@pytest.mark.parametrize("text, problem", [("0-3,x", "found 'x'"), ("0,16", "outside the job of 16"),
                                           ("1-3", "rank 0 must run"), ("3-1", "runs backwards")])
def test_run_ranks_refused_with_one_line_naming_the_problem(text, problem):
    with pytest.raises(RunRanksError, match=problem):
        parse_run_ranks(text, 16)


def test_one_data_parallel_replica_running_gives_each_absent_rank_its_shard_twin():
    running = [rank_of(t, 0, p) for p in range(PP) for t in range(TP)]       # replica 0: ranks 0, 1, 4, 5
    out, warnings = copies(running, WORLD, [megatron_like_record(running)])
    assert warnings == [] and sorted(out) == [2, 3, 6, 7]
    for a, c in out.items():
        assert c.twin == a - TP                                              # same tp and stage, replica 0
    # rank 7 = (tp 1, dp 1, stage 1): its tensor-parallel group has no running member, so it is named; its
    # data-parallel group is its twin's (5 and 7), where it is member 1; its pipeline group is (3, 7)
    seven = out[7].comm_map
    assert seven["c-tp10"] == ("sparse:tp11", 1, [0, 1])
    assert seven["c-dp11"] == ("c-dp11", 1, [1, 0])
    assert seven["c-pp01"] == ("sparse:pp11", 1, [0, 1])
    assert seven["c-0"][0:2] == ("c-0", 7)


def test_one_rank_per_stage_running_makes_tensor_parallel_peers_copies():
    running = [rank_of(0, 0, p) for p in range(PP)]                           # ranks 0 and 4
    out, warnings = copies(running, WORLD, [megatron_like_record(running)])
    assert warnings == []
    assert {a: c.twin for a, c in out.items()} == {1: 0, 2: 0, 3: 0, 5: 4, 6: 4, 7: 4}
    three = out[3].comm_map                                                   # (tp 1, dp 1, stage 0)
    assert three["c-tp00"] == ("sparse:tp01", 1, [1, 0])                      # the group (2, 3), as member 1
    assert three["c-dp00"] == ("sparse:dp01", 1, [1, 0])                      # the group (1, 3), as member 1
    assert three["c-pp00"] == ("sparse:pp11", 0, [0, 1])                      # the group (3, 7), as member 0
    assert three["c-tpdp0"] == ("c-tpdp0", 3, [3, 2, 1, 0])                   # its stage's group, as member 3


def test_one_rank_per_stage_without_a_stage_group_copies_each_rank_from_its_stage_leader():
    """torchtitan makes no group of a stage's ranks: rank 3 (tp 1, dp 1, stage 0) shares no group with exactly one
    running rank, and its twin is the running rank of its own stage, found from the coordinates."""
    running = [rank_of(0, 0, p) for p in range(PP)]                           # ranks 0 and 4
    record = megatron_like_record(running)
    record["groups"] = [g for g in record["groups"] if g["desc"] != "TENSOR_AND_DATA_PARALLEL_GROUP"]
    out, warnings = copies(running, WORLD, [record])
    assert warnings == []
    assert {a: c.twin for a, c in out.items()} == {1: 0, 2: 0, 3: 0, 5: 4, 6: 4, 7: 4}
    assert all(c.structured for c in out.values())
    three = out[3].comm_map
    assert three["c-tp00"] == ("sparse:tp01", 1, [1, 0])                      # the group (2, 3), as member 1
    assert three["c-pp00"] == ("sparse:pp11", 0, [0, 1])                      # the group (3, 7), as member 0


def test_a_dimension_made_again_for_every_mesh_still_maps_each_copys_communicators():
    """torch's DeviceMesh makes a dimension's groups once per mesh having it, all described ``mesh_tp``: each
    remake is a family, and a copy's communicator of the second remake is its own group of the second remake."""
    world, tp = 4, 2
    groups = [("0", list(range(world)), "default_pg")]
    for remake in range(3):
        groups += [(f"tp{remake}{d}", [tp * d, tp * d + 1], "mesh_tp") for d in range(2)]
        groups += [(f"dp{remake}{t}", [t, t + tp], "mesh_dp") for t in range(tp)]
    record = {"run_ranks": [0], "comms": [], "groups": [
        {"name": n, "ranks": r, "desc": d, "comm": f"c-{n}" if 0 in r else None} for n, r, d in groups]}
    out, warnings = copies([0], world, [record])
    assert warnings == []
    assert out[3].comm_map["c-tp10"] == ("sparse:tp11", 1, [1, 0])    # rank 3: (2, 3) of the second remake
    assert out[1].comm_map["c-tp10"] == ("c-tp10", 1, [1, 0])         # rank 1: its own group, as member 1


def test_group_families_give_every_rank_distinct_coordinates():
    groups = groups_from_records([megatron_like_record([0])])
    grid = coordinates(groups, WORLD)
    assert [f[0].desc for f in grid] == ["TENSOR_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP",
                                         "PIPELINE_MODEL_PARALLEL_GROUP"]


def test_pure_data_parallel_copies_join_the_world_communicator_as_themselves():
    record = {"run_ranks": [0], "comms": [], "groups": [{"name": "0", "ranks": [0, 1, 2, 3], "comm": "w"}]}
    out, warnings = copies([0], 4, [record])
    assert {a: (c.twin, c.comm_map["w"][:2]) for a, c in out.items()} == {1: (0, ("w", 1)), 2: (0, ("w", 2)),
                                                                          3: (0, ("w", 3))}
    assert warnings == []


def test_ranks_no_group_ties_to_one_running_rank_are_copied_with_a_warning():
    record = {"run_ranks": [0, 1], "comms": [], "groups": [{"name": "0", "ranks": [0, 1, 2, 3], "comm": "w"}]}
    out, warnings = copies([0, 1], 4, [record])
    assert {a: c.twin for a, c in out.items()} == {2: 0, 3: 1}
    assert len(warnings) == 1 and "2-3" in warnings[0] and "may differ" in warnings[0]
