"""The stated routing of MoE routers (emulate/stated_routing.py): the counts each routing gives, and a MoE layer run on
the emulated driver, whose token counts, all-to-all split sizes and grouped-GEMM groups follow it."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from stepcast.emulate.stated_routing import (
    RoutingError, Routing, assignment, expert_counts, parse, summarize,
)


def test_balanced_routing_gives_every_expert_an_equal_share():
    counts = expert_counts(parse("balanced"), tokens=512, experts=8, topk=3)
    assert counts.tolist() == [192] * 8


def test_power_law_routing_loads_its_busiest_expert_above_the_balanced_share():
    counts = expert_counts(parse("power:1.2"), tokens=512, experts=8, topk=3)
    assert counts.sum() == 512 * 3
    assert counts.max() > 192 and counts.max() <= 512  # no expert takes a token twice
    assert np.array_equal(counts, expert_counts(parse("power:1.2"), 512, 8, 3))  # the same on every rank


def test_histogram_routing_follows_the_files_shares(tmp_path):
    path = tmp_path / "hist.json"
    path.write_text(json.dumps({"tokens_per_expert": [6, 2, 0, 0]}))
    counts = expert_counts(parse(f"histogram:{path}"), tokens=100, experts=4, topk=2)
    # 150 and 50 wanted: expert 0 holds at most the 100 tokens, and the rest goes by the others' shares
    assert counts.tolist() == [100, 100, 0, 0]


def test_a_histogram_of_another_expert_count_is_refused_in_one_line(tmp_path):
    path = tmp_path / "hist.json"
    path.write_text("[1, 2, 3]")
    with pytest.raises(RoutingError, match="expected a histogram of 8 experts"):
        expert_counts(parse(f"histogram:{path}"), tokens=64, experts=8, topk=2)


@pytest.mark.parametrize("text", ["power:0", "power:x", "skewed", "histogram:"])
def test_a_routing_it_cannot_state_is_refused(text):
    with pytest.raises(RoutingError, match="STEPCAST_MOE_ROUTING: expected"):
        parse(text)


def test_assignment_gives_each_token_distinct_experts_in_the_stated_counts():
    counts = expert_counts(parse("power:1.2"), tokens=64, experts=8, topk=4)
    ids = assignment(counts, tokens=64, topk=4)
    assert ids.shape == (64, 4)
    assert all(len(set(row)) == 4 for row in ids.tolist())
    assert np.bincount(ids.ravel(), minlength=8).tolist() == counts.tolist()


def test_the_report_warns_when_routers_ran_on_the_routing_nobody_stated():
    record = {"routing": Routing("balanced").describe(), "stated": False, "error": None,
              "routers": [{"tokens": 64, "experts": 8, "topk": 2, "calls": 3, "busiest_expert_routes": 16,
                           "mean_expert_routes": 16.0}]}
    field, warnings = summarize([record, {**record}])
    assert field["routing"].startswith("balanced") and field["routers"][0]["calls"] == 6
    assert any("no routing was stated" in w for w in warnings)
    assert summarize([{**record, "stated": True}])[1] == []
    assert summarize([{**record, "routers": []}]) == (None, [])


# A MoE layer as torchtitan writes it, without torchtitan: a linear router's softmax scores and top-k, a one-hot
# routing map summed to tokens per expert, an all-to-all of the counts and then of the tokens (split sizes read to
# the host), and the local experts' grouped GEMM over the received tokens. Before the stated routing, the router's
# top-k picked expert 0 for every token and the counts read as zeros ("Split sizes doesn't match").
MOE_LAYER = """
    import os, torch, torch.distributed as dist
    from torch.distributed._functional_collectives import all_to_all_single
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    T, D, E, K = 256, 64, 8, 2
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    router = torch.nn.Linear(D, E, device="cuda")
    experts = torch.randn(E // world, D, D, device="cuda", dtype=torch.bfloat16)
    for step in range(2):
        scores = router(x.float()).softmax(-1)
        _, ids = torch.topk(scores, k=K, dim=-1)
        counts = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, ids, True).sum(dim=0)
        got = torch.ops._c10d_functional.wait_tensor(
            all_to_all_single(counts.view(world, -1), None, None, group=dist.group.WORLD))
        send = counts.view(world, -1).sum(dim=1).cpu().tolist()
        recv = got.view(world, -1).sum(dim=1).cpu().tolist()
        order = torch.argsort(ids.view(-1), stable=True)
        routed = all_to_all_single(x[order // K], recv, send, group=dist.group.WORLD)
        routed = torch.ops._c10d_functional.wait_tensor(routed)
        per_expert = got.view(world, -1).sum(dim=0)
        out = torch._grouped_mm(routed, experts, offs=torch.cumsum(per_expert, 0, dtype=torch.int32))
        torch.cuda.synchronize()
    line = f"COUNTS {rank} {counts.cpu().tolist()} SEND {send} RECV {recv} ROWS {out.shape[0]}\\n"
    os.write(1, line.encode())  # one write: the ranks share the pipe
    dist.destroy_process_group()
"""


def run_layer(folder: Path, emulate_run, *options: str) -> tuple[dict[int, str], dict]:
    """Capture MOE_LAYER on two ranks; returns each rank's COUNTS line and the capture report."""
    folder.mkdir(parents=True)
    script = folder / "moe_layer.py"
    script.write_text(textwrap.dedent(MOE_LAYER))
    proc, report, _ = emulate_run(folder, script, nproc=2, options=("--no-dedup", *options))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {int(line.split()[1]): line for line in proc.stdout.splitlines() if line.startswith("COUNTS")}
    return lines, report


@pytest.fixture(scope="module")
def layer_runs(tmp_path_factory, emulate_run) -> dict[str, tuple[dict[int, str], dict]]:
    """MOE_LAYER captured with no routing stated (balanced) and with a power law's."""
    root = tmp_path_factory.mktemp("moe_layer")
    return {"balanced": run_layer(root / "balanced", emulate_run),
            "power": run_layer(root / "power", emulate_run, "--moe-routing", "power:1.2")}


def offsets_of_grouped_gemms(report) -> list[list[int]]:
    """The group offsets the capture recorded with each rank's grouped GEMMs (its op table)."""
    found = []
    for rank in report["ranks"]:
        table = json.loads((Path(report["capture_dir"]) / f"rank{rank['rank']}.log.ops.json").read_text())
        found += [op["args"][2] for op in table["ops"] if op["op"] == "aten._grouped_mm.default"]
    return found


@pytest.mark.slow
def test_a_moe_layers_token_counts_and_split_sizes_follow_the_stated_routing(layer_runs):
    lines, _ = layer_runs["balanced"]
    assert "COUNTS 0 [64, 64, 64, 64, 64, 64, 64, 64] SEND [256, 256] RECV [256, 256] ROWS 512" in lines[0]
    skewed = expert_counts(parse("power:1.2"), 256, 8, 2)
    lines, report = layer_runs["power"]
    halves = [int(skewed[:4].sum()), int(skewed[4:].sum())]
    for rank in (0, 1):
        assert f"COUNTS {rank} {skewed.tolist()} SEND {halves} RECV {[halves[rank]] * 2}" in lines[rank]
    assert report["moe_routing"]["routing"].startswith("power law, alpha 1.2")
    assert report["moe_routing"]["stated"] is True


@pytest.mark.slow
def test_a_skewed_routing_gives_the_busiest_experts_grouped_gemm_more_rows(layer_runs):
    _, balanced = layer_runs["balanced"]
    _, skewed = layer_runs["power"]

    def largest_group(report) -> int:
        groups = [np.diff([0, *offsets]).max() for offsets in offsets_of_grouped_gemms(report) if offsets]
        assert groups, "the grouped GEMMs' offsets were not recorded"
        return int(max(groups))

    assert largest_group(balanced) == 2 * 64  # two ranks' 64 routes per expert
    assert largest_group(skewed) == 2 * int(expert_counts(parse("power:1.2"), 256, 8, 2).max())
    assert largest_group(skewed) > largest_group(balanced)
    assert any("no routing was stated" in w for w in balanced["capture_warnings"])


def test_a_top_k_over_another_count_than_the_histograms_is_left_balanced(tmp_path):
    from stepcast.emulate.stated_routing import Router

    path = tmp_path / "hist.json"
    path.write_text("[5, 1, 1, 1]")
    router = Router(parse(f"histogram:{path}"), stated=True)
    # 16 routes: expert 0 holds at most the 8 tokens, the other 8 go evenly (largest remainders first)
    assert np.bincount(router.ids(8, 4, 2).ravel(), minlength=4).tolist() == [8, 3, 3, 2]
    assert np.bincount(router.ids(8, 8, 2).ravel(), minlength=8).tolist() == [2] * 8  # the expert groups' top-k


# A routing map is tokens x experts bytes: 8192 tokens of a 256-expert router make 2 MiB, past the 1 MiB of
# STEPCAST_REAL_BYTES up to which copies keep their bytes; integer and mask metadata is followed further, so the
# per-expert counts still follow the routing (before, they read as zeros).
LARGE_ROUTER = """
    import os, torch
    T, E, K = 8192, 256, 8
    scores = torch.nn.Linear(64, E, device="cuda")(torch.randn(T, 64, device="cuda")).sigmoid()
    _, ids = torch.topk(scores, k=K, dim=-1)
    counts = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, ids, True).sum(dim=0)
    os.write(1, f"COUNTS {sorted(set(counts.cpu().tolist()))}\\n".encode())
"""


@pytest.mark.slow
def test_a_routing_map_past_the_real_bytes_limit_still_gives_the_stated_counts(tmp_path, emulate_run):
    script = tmp_path / "large_router.py"
    script.write_text(textwrap.dedent(LARGE_ROUTER))
    proc, _, _ = emulate_run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "COUNTS [256]" in proc.stdout  # 8192 x 8 routes over 256 experts, balanced


@pytest.mark.slow
def test_a_sparse_runs_absent_members_send_the_running_members_counts(tmp_path, emulate_run):
    """In a sparse run (rank 0 of 8), the seven absent members of the all-to-all send what the running member sends
    (the copies' rule): a balanced routing's counts arrive, not zeros ("Split sizes doesn't match")."""
    script = tmp_path / "moe_layer.py"
    script.write_text(textwrap.dedent(MOE_LAYER).replace("torch.cuda.set_device(rank)",
                                                         'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))'))
    proc, _, _ = emulate_run(tmp_path, script, nproc=4, options=("--nodes", "2", "--run-ranks", "0"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"COUNTS 0 {[64] * 8} SEND {[64] * 8} RECV {[64] * 8} ROWS 512" in proc.stdout
