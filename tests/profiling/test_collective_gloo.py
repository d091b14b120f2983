"""Collectives run across local processes over gloo (2 and 4 ranks) and land in the dataset."""
from __future__ import annotations

from stepcast.profiling.runner import run
from stepcast.profiling.store import FamilyStore


def test_gloo_collectives_with_two_and_four_ranks(tiny_config):
    cfg = tiny_config("families=[collective]",
                      "collective.grid.0.op=[all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,send_recv]",
                      "collective.max_points=12")
    result = run(cfg)
    frame = FamilyStore(result.output, "collective").read()
    assert len(frame) == 12 and (frame["status"] == "ok").all(), frame[["op", "ranks", "error"]]
    assert sorted(set(frame["ranks"])) == [2, 4]
    assert (frame["ranks_per_node"] == frame["ranks"]).all() and (frame["backend"] == "gloo").all()
    assert (frame["median_us"] > 0).all() and (frame["threads"] == 1).all()
    assert (frame["bytes"] % (frame["ranks"] * 4) == 0).all()
