"""The cluster-occupancy probe (emulate/driver/cluster_probe.py) asks the loaded libcuda the same way on a real GPU
and on the emulated driver; the capture tool records its table and the comparer lists the answers that differ."""
from __future__ import annotations

import json

import pytest

from stepcast.emulate.driver.child import run_python
from stepcast.emulate.driver.cluster_probe import (BLOCK_THREADS, CLUSTER_SIZES, DYNAMIC_SMEM_KIB, NON_PORTABLE,
                                          table_differences)

ROWS = len(NON_PORTABLE) * len(CLUSTER_SIZES) * len(BLOCK_THREADS) * len(DYNAMIC_SMEM_KIB)


def probe(hardware: str) -> dict:
    run = run_python(["-m", "stepcast.emulate.driver.cluster_probe"], hardware)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_the_emulated_hopper_refuses_a_portable_kernel_past_8_blocks():
    rows = [r for r in probe("h100-sxm")["rows"] if r["non_portable"] == 0]
    assert len(rows) == ROWS // 2
    assert all(r["result"] == 0 and r["clusters"] > 0 for r in rows if r["size"] <= 8 and r["smem_kib"] == 0)
    assert all(r["result"] != 0 and r["clusters"] is None for r in rows if r["size"] > 8)


def test_a_non_portable_kernel_gets_the_gpc_count_past_16_blocks_and_0_where_no_gpc_holds_the_cluster():
    """At one block per SM an 18-block cluster fits only in the 18-SM GPCs (132 SMs over 8 GPCs: two of them), which
    cuBLAS 12.1's cluster discovery must be told; a 19-block cluster fits nowhere, and is answered 0, not refused
    (cuDNN's sm_100 engines crash on a refusal)."""
    rows = [r for r in probe("h100-sxm")["rows"] if r["non_portable"] == 1 and r["threads"] == 384]
    one_per_sm = {r["size"]: (r["result"], r["clusters"]) for r in rows if r["smem_kib"] == 200}
    assert one_per_sm[16] == (0, 8) and one_per_sm[17] == one_per_sm[18] == (0, 2)
    assert all(one_per_sm[size] == (0, 0) for size in range(19, 33))
    for smem in DYNAMIC_SMEM_KIB:
        counts = [r["clusters"] or 0 for r in rows if r["smem_kib"] == smem]
        assert counts == sorted(counts, reverse=True)  # larger clusters never fit more often


def test_a_device_without_cluster_launch_gives_an_empty_table_and_says_why():
    table = probe("a100-sxm-80gb")
    assert table["rows"] == [] and "cluster launch" in table["skipped"]


def test_only_entries_whose_answer_differs_are_listed():
    at = {"non_portable": 1, "threads": 128, "smem_kib": 0}
    real = {"rows": [{**at, "size": 2, "result": 0, "clusters": 66}, {**at, "size": 18, "result": 0, "clusters": 2}]}
    emulated = {"rows": [{**at, "size": 2, "result": 0, "clusters": 66},
                         {**at, "size": 18, "result": 912, "clusters": None}]}
    assert table_differences(real, emulated) == [{**at, "size": 18, "real": [0, 2], "emulated": [912, None]}]
    assert table_differences(real, real) == []


@pytest.mark.slow
def test_a_capture_records_the_table_and_compare_finds_only_what_was_changed(tmp_path):
    from stepcast.emulate.driver.real_gpu import compare

    out = tmp_path / "capture.json"
    run = run_python(["-m", "stepcast.emulate.driver.real_gpu", "capture", "--no-kernels", "--out", str(out)],
                     "h100-sxm")
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert len(doc["clusters"]["rows"]) == ROWS
    same = compare(doc, "h100-sxm")
    assert same["clusters"] == [] and same["clusters_compared"] == len(doc["clusters"]["rows"])
    changed = next(r for r in doc["clusters"]["rows"] if r["size"] == 18 and r["non_portable"] == 1)
    changed.update(result=0, clusters=2)  # what a real H100 might answer for an 18-block cluster
    assert [(d["size"], d["real"]) for d in compare(doc, "h100-sxm")["clusters"]] == [(18, [0, 2])]
