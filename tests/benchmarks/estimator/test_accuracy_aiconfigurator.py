"""The aiconfigurator and NCCL benchmark suites: what they hold out and what they report."""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.estimator.accuracy import (
    EXTRA_SOURCES,
    POOLED,
    nccl_folds,
    suite_aiconfigurator,
    suite_vidur_h100,
)
from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.importers.aiconfigurator import shape_set
from tests.estimator.conftest import synthetic_gemms


def aiconfigurator_gemms() -> pd.DataFrame:
    frame = synthetic_gemms(900, hardware=("h100-sxm", "h200", "b200"), seed=3).assign(source="aiconfigurator")
    return frame.assign(group="aiconfigurator-gemm/nk" + pd.Series(shape_set(frame["n"], frame["k"])).astype(str))


def aiconfigurator_attention(n: int = 400, seed: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    decode = rng.random(n) < 0.5
    seq = rng.choice([256, 1024, 4096], n).astype(float)
    frame = pd.DataFrame({"family": "attention", "hardware": rng.choice(["h100-sxm", "h200"], n), "dtype": "bf16",
                          "batch": rng.choice([1.0, 8.0], n), "heads_q": rng.choice([8.0, 32.0, 64.0], n),
                          "heads_kv": 8.0, "seq_q": np.where(decode, 1.0, seq), "seq_kv": seq,
                          "head_dim": rng.choice([64.0, 128.0], n), "causal": ~decode, "pass": "fwd",
                          "source": "aiconfigurator"})
    frame["group"] = "aiconfigurator-attention/heads" + pd.Series(
        shape_set(frame["heads_q"], frame["heads_kv"], frame["head_dim"])).astype(str)
    frame["runtime_us"] = RooflineEstimator().predict(frame) * 1.5 * rng.lognormal(0.0, 0.02, n)
    return frame


def test_aiconfigurator_suite_holds_out_weight_shapes_devices_and_head_configurations():
    res = suite_aiconfigurator(pd.concat([aiconfigurator_gemms(), aiconfigurator_attention()], ignore_index=True),
                               max_train_rows=None)
    by_suite = {name: part for name, part in res.groupby("suite")}
    nk = by_suite["aiconfigurator_gemm_held_out_nk"]
    assert {f"{POOLED} h100-sxm", f"{POOLED} h200"} <= set(nk["fold"])  # the Hopper pair only, per device
    assert not nk["fold"].str.contains("b200").any()
    assert set(by_suite["aiconfigurator_gemm_logo"]["fold"]) == {"h100-sxm", "h200", "b200", POOLED}
    attention = by_suite["aiconfigurator_attention_held_out_heads"]
    assert {f"{POOLED} prefill", f"{POOLED} decode"} <= set(attention["fold"])
    learned = attention[(attention["fold"] == POOLED) & (attention["model"] == "xgboost")]["mean_ape"].iat[0]
    roofline = attention[(attention["fold"] == POOLED) & (attention["model"] == "roofline")]["mean_ape"].iat[0]
    assert learned < roofline


def test_vidur_suite_adds_aiconfigurator_hopper_gemms_as_a_column_of_their_own(light_tiled):
    vidur = synthetic_gemms(400, hardware=("h100-sxm",)).assign(dtype="fp16", source="vidur")
    vidur["model"] = np.array(["m1", "m2", "m3", "m4"])[np.arange(len(vidur)) % 4]
    vidur["group"] = vidur["model"]
    res = suite_vidur_h100(pd.concat([vidur, aiconfigurator_gemms()], ignore_index=True), max_train_rows=500)
    ours = res[res["model"] == EXTRA_SOURCES["aiconfigurator"]].set_index("fold")
    assert ours.loc[POOLED, "n"] == 400 and np.isfinite(ours["mean_ape"]).all()
    assert EXTRA_SOURCES["profiler"] not in set(res["model"])


def test_nccl_folds_hold_out_whole_sizes_and_single_node_gpu_counts():
    rows = [{"source": s, "hardware": "h100-sxm", "bytes": b, "ranks": n, "ranks_per_node": min(n, 8)}
            for s in ("a", "b") for b in 2.0 ** np.arange(10, 30) for n in (2, 4, 8, 16)]
    frame = pd.DataFrame(rows)
    folds = {f.name: f for f in nccl_folds(frame)}
    sizes = folds["sizes"]
    for source in ("a", "b"):
        train = set(frame.iloc[sizes.train].query("source == @source")["bytes"])
        test = set(frame.iloc[sizes.test].query("source == @source")["bytes"])
        assert test and not train & test
    for count in (2, 4, 8):
        fold = folds[f"{count} GPUs"]
        assert set(frame.iloc[fold.test]["ranks"]) == {count}
        assert set(frame.iloc[fold.train]["ranks"]) == {2, 4, 8, 16} - {count}
    assert 16 in set(frame.iloc[folds["8 GPUs"].train]["ranks"])  # multi-node rows are never a held-out count
    multi = folds["trained within nodes"]  # and are predicted from single-node rows alone
    assert set(frame.iloc[multi.test]["ranks"]) == {16} and 16 not in set(frame.iloc[multi.train]["ranks"])
    assert not any(f.split == "held_out_devices" for f in folds.values())  # one device: no sibling to stand in
    assert not any(f.split == "held_out_per_node" for f in folds.values())  # one count per node across nodes


def test_nccl_folds_hold_out_each_count_of_ranks_per_node_across_nodes():
    rows = [{"source": "a", "hardware": "a100-sxm-80gb", "bytes": b, "ranks": n, "ranks_per_node": r}
            for b in 2.0 ** np.arange(10, 20) for n, r in ((8, 8), (2, 1), (4, 2), (16, 8))]
    frame = pd.DataFrame(rows)
    held = {f.name: f for f in nccl_folds(frame) if f.split == "held_out_per_node"}
    assert set(held) == {"1 per node", "2 per node", "8 per node"}
    eight = held["8 per node"]
    assert set(frame.iloc[eight.test]["ranks"]) == {16}  # the single-node 8-rank rows stay in training
    assert {8, 2, 4} <= set(frame.iloc[eight.train]["ranks"]) and 16 not in set(frame.iloc[eight.train]["ranks"])


def test_nccl_folds_hold_out_each_device_whose_links_a_measured_one_shares():
    rows = [{"source": "a", "hardware": h, "bytes": b, "ranks": 8, "ranks_per_node": 8}
            for h in ("h100-sxm", "h200", "b200") for b in 2.0 ** np.arange(10, 20)]
    frame = pd.DataFrame(rows)
    held = {f.name: f for f in nccl_folds(frame) if f.split == "held_out_devices"}
    assert set(held) == {"h100-sxm (as h200)", "h200 (as h100-sxm)"}  # the B200's NVLink 5 is no Hopper's
    fold = held["h200 (as h100-sxm)"]
    assert set(frame.iloc[fold.test]["hardware"]) == {"h200"} and "h200" not in set(frame.iloc[fold.train]["hardware"])
