"""emulate.learned_roles: the ranks a big job runs, learned from a probe with fewer data-parallel replicas, are the
ones declared by hand (one per pipeline stage when tensor-parallel peers do the same work)."""
from __future__ import annotations

import pytest

from stepcast.emulate.learned_roles import LearnError, check_against_job, learn, parse_auto

TP, PP = 2, 2


def megatron_probe(dp: int, tp_peers_alike: bool = True) -> tuple[list[dict], list[dict]]:
    """Traces and group records of a Megatron-ordered job (rank = tp + TP * (dp + DP * pp)): per stage its own
    kernel, a tensor-parallel all-reduce, a data-parallel all-reduce, and a send to the next stage."""
    world = TP * PP * dp
    rank_of = lambda t, d, p: t + TP * (d + dp * p)  # noqa: E731
    groups: list[dict] = []
    tp_groups = [[rank_of(t, d, p) for t in range(TP)] for p in range(PP) for d in range(dp)]
    dp_groups = [[rank_of(t, d, p) for d in range(dp)] for p in range(PP) for t in range(TP)]
    pp_groups = [[rank_of(t, d, p) for p in range(PP)] for d in range(dp) for t in range(TP)]
    for desc, members in (("TENSOR_MODEL_PARALLEL_GROUP", tp_groups), ("DATA_PARALLEL_GROUP", dp_groups),
                          ("PIPELINE_MODEL_PARALLEL_GROUP", pp_groups)):
        for ranks in members:
            groups.append({"name": str(len(groups)), "ranks": ranks, "desc": desc, "comm": f"c{len(groups)}"})
    comms = [{"comm": f"p2p{g['name']}", "group": g["name"], "key": "0:1", "members": g["ranks"]}
             for g in groups if g["desc"].startswith("PIPELINE")]

    def comm_of(rank: int, desc: str) -> str:
        return next(g["comm"] for g in groups if g["desc"] == desc and rank in g["ranks"])

    docs = []
    for r in range(world):
        t, p = r % TP, r // (TP * dp)
        name = f"stage{p}" + (f"-tp{t}" if not tp_peers_alike else "")
        pp_group = next(g for g in groups if g["desc"].startswith("PIPELINE") and r in g["ranks"])
        events = [{"kind": "kernel", "name": name, "grid": [1, 1, 1], "block": [128, 1, 1], "stream": 1},
                  {"kind": "collective", "op": "all_reduce", "bytes": 64, "ranks": TP, "stream": 1,
                   "comm": comm_of(r, "TENSOR_MODEL_PARALLEL_GROUP"), "comm_rank": t},
                  {"kind": "collective", "op": "all_reduce", "bytes": 64, "ranks": dp, "stream": 1,
                   "comm": comm_of(r, "DATA_PARALLEL_GROUP")},
                  {"kind": "collective", "op": "send" if p == 0 else "recv", "bytes": 64, "ranks": 2, "stream": 1,
                   "comm": f"p2p{pp_group['name']}", "peer": 1 if p == 0 else 0}]
        docs.append({"rank": r, "world_size": world, "events": events})
    return docs, [{"groups": groups, "comms": comms}]


def test_a_probe_with_two_replicas_learns_one_rank_per_stage_for_a_bigger_job():
    docs, records = megatron_probe(dp=2)
    learned = learn(docs, records, world=TP * PP * 8)
    assert learned.run_ranks == [0, TP * 8]          # tensor-parallel rank 0 of replica 0 in each stage
    assert learned.report["grows"] == "DATA_PARALLEL_GROUP"
    assert learned.report["copy_families"] == ["TENSOR_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP"]
    assert learned.report["probe_alike"] == {"0": "0-3", "4": "4-7"}


def test_tensor_parallel_peers_that_differ_all_run():
    docs, records = megatron_probe(dp=2, tp_peers_alike=False)
    assert learn(docs, records, world=TP * PP * 4).run_ranks == [0, 1, 8, 9]


def test_the_big_jobs_own_groups_confirm_or_contradict_the_learned_layout():
    docs, records = megatron_probe(dp=2)
    learned = learn(docs, records, world=TP * PP * 8)
    assert check_against_job(learned, megatron_probe(dp=8)[1]) == []
    wrong = check_against_job(learned, megatron_probe(dp=2)[1])
    assert len(wrong) == 1 and "declare --run-ranks" in wrong[0]


def test_every_rank_alike_without_groups_runs_rank_zero():
    docs = [{"rank": r, "world_size": 4, "events": [{"kind": "kernel", "name": "k"}]} for r in range(4)]
    assert learn(docs, [], world=64).run_ranks == [0]


def test_a_job_not_a_multiple_of_the_probe_is_one_line():
    docs, records = megatron_probe(dp=2)
    with pytest.raises(LearnError, match="not a multiple"):
        learn(docs, records, world=12)


def test_auto_names_the_probes_nodes():
    assert parse_auto("auto") == 1 and parse_auto("auto:4") == 4 and parse_auto("0-7") is None
    with pytest.raises(LearnError, match="auto:M"):
        parse_auto("auto:x")


@pytest.mark.slow
def test_run_ranks_auto_runs_one_rank_of_a_data_parallel_job_and_says_so(tmp_path):
    import json
    import subprocess
    import sys

    from stepcast.profiling.paths import REPO_ROOT

    report = tmp_path / "auto.json"
    proc = subprocess.run([sys.executable, "-m", "stepcast.emulate", "run", "--nproc", "2", "--nodes", "4",
                           "--run-ranks",
                           "auto", "--report", str(report), "--trace-dir", str(tmp_path / "traces"), "--",
                           str(REPO_ROOT / "examples" / "ddp.py"), "--steps", "3"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(report.read_text())
    assert rep["ranks_run"] == "0" and rep["ranks_copied"] == {"0": "1-7"}
    assert rep["learned_roles"]["probe_world"] == 2 and rep["learned_roles"]["run_ranks"] == "0"
    assert any(w.startswith("learned roles: the 2 ranks of the probe are alike") for w in rep["warnings"])
