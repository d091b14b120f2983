"""The analytical estimator: sane directions (bigger is slower, newer is faster, causal halves the work)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stepcast.estimator.analytical import RooflineEstimator


def gemms(hardware: str, sizes: list[int], dtype: str = "bf16") -> pd.DataFrame:
    return pd.DataFrame({"family": "gemm", "hardware": hardware, "dtype": dtype,
                         "m": sizes, "n": sizes, "k": sizes, "batch": 1})


def test_gemm_time_grows_with_size():
    pred = RooflineEstimator().predict(gemms("h100-sxm", [64, 256, 1024, 4096, 16384]))
    assert np.all(np.diff(pred) > 0)


def test_h100_faster_than_a100_for_every_family():
    base = pd.DataFrame([
        dict(family="gemm", dtype="bf16", m=8192, n=8192, k=8192, batch=1),
        dict(family="attention", dtype="bf16", batch=2, heads_q=32, heads_kv=32, seq_q=4096, seq_kv=4096,
             head_dim=128, causal=False, **{"pass": "fwd"}),
        dict(family="elementwise", dtype="bf16", op="add", numel=2**26),
        dict(family="norm", dtype="bf16", op="layer_norm", rows=16384, cols=8192, **{"pass": "bwd"}),
        dict(family="optimizer", dtype="fp32", op="adamw_fused", params=10**9),
        dict(family="collective", dtype="bf16", op="all_reduce", bytes=2**30, ranks=8, ranks_per_node=8),
    ])
    model = RooflineEstimator()
    h100 = model.predict(base.assign(hardware="h100-sxm"))
    a100 = model.predict(base.assign(hardware="a100-sxm-80gb"))
    assert np.all(h100 < a100)


def test_causal_attention_does_about_half_the_work():
    row = dict(family="attention", hardware="h100-sxm", dtype="bf16", batch=8, heads_q=32, heads_kv=32,
               seq_q=8192, seq_kv=8192, head_dim=128, **{"pass": "fwd"})
    frame = pd.DataFrame([dict(row, causal=False), dict(row, causal=True)])
    full, causal = RooflineEstimator(gpu_fixed_us=0).predict(frame)
    assert 0.45 < causal / full < 0.55


def test_backward_attention_costs_more_than_forward():
    row = dict(family="attention", hardware="h100-sxm", dtype="bf16", batch=8, heads_q=32, heads_kv=8,
               seq_q=4096, seq_kv=4096, head_dim=128, causal=True)
    fwd, bwd = RooflineEstimator().predict(pd.DataFrame([dict(row, **{"pass": "fwd"}), dict(row, **{"pass": "bwd"})]))
    assert bwd > 2 * fwd


def test_inter_node_collective_slower_than_intra_node():
    frame = pd.DataFrame({"family": "collective", "hardware": "h100-sxm", "dtype": "bf16", "op": "all_reduce",
                          "bytes": 2**28, "ranks": [8, 16], "ranks_per_node": 8})
    intra, inter = RooflineEstimator().predict(frame)
    assert inter > intra


def test_single_rank_collective_costs_only_the_fixed_cost():
    frame = pd.DataFrame([dict(family="collective", hardware="h100-sxm", dtype="bf16", op="all_reduce",
                               bytes=2**30, ranks=1, ranks_per_node=8)])
    assert RooflineEstimator(gpu_fixed_us=2.5).predict(frame)[0] == 2.5


def test_save_load_round_trip(tmp_path):
    model = RooflineEstimator(compute_efficiency=0.5)
    loaded = RooflineEstimator.load(model.save(tmp_path / "roofline"))
    frame = gemms("a100-sxm-80gb", [512, 2048])
    np.testing.assert_array_equal(loaded.predict(frame), model.predict(frame))


def test_a_single_foreach_op_moves_its_own_tensor_lists_not_a_whole_optimizer_step():
    from stepcast.estimator.workload import work

    ops = ["foreach_mul", "foreach_lerp", "foreach_addcdiv", "foreach_unheard_of", "adamw_foreach"]
    frame = pd.DataFrame({"family": "optimizer", "dtype": "fp32", "op": ops, "params": 1e9})
    moved = work("optimizer", frame).bytes / 1e9 / 4  # in fp32 tensor lists
    # in place x *= s: read + write one list; lerp_(m, g, w): two read, one written; addcdiv_(p, m, d): three + one
    assert moved.tolist() == [2.0, 3.0, 4.0, 3.0, 7.0]  # unknown foreach: 3 lists; a whole AdamW step: p, g, m, v...


def test_alpha_beta_across_nodes_adds_up_a_nodes_nics_for_rings_and_not_for_sends():
    from stepcast.estimator.analytical import RooflineEstimator

    rows = [{"family": "collective", "hardware": h, "dtype": "bf16", "op": op, "bytes": 2.0 ** 30,
             "ranks": 2 * per_node, "ranks_per_node": per_node}
            for h in ("h100-sxm",) for op in ("all_reduce", "send_recv") for per_node in (1, 4)]
    t = RooflineEstimator().predict(pd.DataFrame(rows))
    wire = np.array([2.0 * 1 / 2, 2.0 * 7 / 8, 1.0, 1.0]) * 2.0 ** 30
    per_gpu = wire / t  # bytes per microsecond
    assert 3.5 < per_gpu[1] / per_gpu[0] < 4.5  # four NICs against one
    assert 0.9 < per_gpu[3] / per_gpu[2] < 1.1  # a send: its own NIC either way


def test_an_nvl72_rack_times_its_72_gpus_over_nvlink_and_an_all_to_all_past_it_over_each_gpus_nic():
    rows = [{"family": "collective", "hardware": "gb200-nvl72", "dtype": "bf16", "op": op, "bytes": 2.0 ** 30,
             "ranks": ranks, "ranks_per_node": per_node}
            for op in ("all_reduce", "all_to_all") for ranks, per_node in ((72, 72), (72, 4), (144, 72))]
    t = RooflineEstimator().predict(pd.DataFrame(rows))
    reduce_rack, reduce_trays, _, a2a_rack, _, a2a_racks = t
    assert reduce_trays > 4 * reduce_rack  # the 18 trays as hosts of their own would put the ring on their NICs
    wire = 2.0 ** 30 * np.array([71 / 72, 143 / 144])
    nvlink, nic = 900e3, 50e3  # gb200-nvl72.yaml, bytes per microsecond: NVLink per GPU, one 400 Gb/s NIC
    assert 0.8 * nvlink < wire[0] / a2a_rack < nvlink
    assert 0.8 * nic < wire[1] / a2a_racks < nic  # past the rack: each GPU's own NIC (nccl-tests#267)
