"""The unseen protocol: each fold holds out all of a device's (model's, source's) rows and trains on none of them,
small groups survive the training sample, every figure carries its per-seed values, the shipped rule and the
routed bundle are scored on the same folds, and a rerun reads every fold from the cache."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.estimator import unseen
from benchmarks.estimator.unseen import (
    BUNDLE,
    POOLED,
    ROUTED,
    ModelSpec,
    Settings,
    device_holdouts,
    model_holdouts,
    run_protocol,
    sample_groups,
    source_holdouts,
    training_sample,
)
from benchmarks.estimator.unseen_derived import with_bundle
from benchmarks.estimator.unseen_figures import groups
from stepcast.estimator.unseen_results import figure
from tests.estimator.conftest import synthetic_gemms, synthetic_norms


def mixed_gemms() -> pd.DataFrame:
    """Three GPUs and a CPU; two sources on the H100; two Vidur models."""
    frame = pd.concat([synthetic_gemms(300, hardware=("h100-sxm", "a100-sxm-80gb", "l40s"), seed=1),
                       synthetic_gemms(60, hardware=("cpu-intel-xeon-2c",), seed=2)], ignore_index=True)
    frame["source"] = np.where(frame["hardware"] == "h100-sxm", np.where(frame.index % 2, "vidur", "profiler"),
                               "aiconfigurator")
    frame.loc[frame["hardware"] == "cpu-intel-xeon-2c", "source"] = "profiler"
    frame["model"] = np.where(frame["source"] == "vidur", np.where(frame.index % 4 == 1, "m1", "m2"), None)
    return frame


def test_a_device_fold_holds_out_every_row_of_its_device_and_trains_on_none():
    frame = mixed_gemms()
    folds = list(device_holdouts(frame))
    assert [h.name for h in folds] == sorted(set(frame["hardware"]))
    for h in folds:
        assert set(frame["hardware"].iloc[h.test]) == {h.name}
        assert h.name not in set(frame["hardware"].iloc[h.train])
        assert len(h.train) + len(h.test) == len(frame)


def test_a_model_fold_drops_training_rows_of_its_shapes_and_weights_from_every_source():
    frame = mixed_gemms()
    held = frame[frame["model"] == "m1"].iloc[0]
    # another source measured the held-out model's weight (its n, k) at another m: no longer a training row
    frame.loc[len(frame)] = held.to_dict() | {"source": "aiconfigurator", "model": None, "m": held["m"] + 7,
                                             "hardware": "l40s"}
    fold = next(h for h in model_holdouts(frame) if h.name == "m1")
    assert set(frame["model"].iloc[fold.test]) == {"m1"}
    train = frame.iloc[fold.train]
    assert not ((train["n"] == held["n"]) & (train["k"] == held["k"])).any()
    assert "m1" not in set(train["model"].dropna())


def test_a_source_fold_holds_out_that_source_everywhere():
    frame = mixed_gemms()
    for h in source_holdouts(frame):
        assert set(frame["source"].iloc[h.test]) == {h.name} and h.name not in set(frame["source"].iloc[h.train])


def test_the_training_sample_keeps_a_floor_of_every_group_and_its_budget():
    big = synthetic_gemms(3000, hardware=("h100-sxm",), seed=3).assign(source="aiconfigurator")
    small = synthetic_gemms(12, hardware=("l40s",), seed=4).assign(source="llmcompass")
    frame = pd.concat([big, small], ignore_index=True)
    positions, groups = np.arange(len(frame)), sample_groups(frame)
    sample = training_sample(groups, positions, 500, seed=0)
    assert len(sample) == 500 and len(np.unique(sample)) == 500
    assert (frame["hardware"].iloc[sample] == "l40s").sum() == 12  # a uniform draw keeps about 2 of them
    assert not np.array_equal(sample, training_sample(groups, positions, 500, seed=1))
    assert np.array_equal(sample, training_sample(groups, positions, 500, seed=0))
    assert np.array_equal(training_sample(groups, positions, None, seed=0), positions)


def test_the_bundle_candidate_takes_the_roofline_where_the_shipped_rule_sends_a_row():
    learned = pd.DataFrame({"predicted_us": [1.0, 2.0], "shape_ok": True, "hardware_seen": [True, False],
                            "spec_ok": True})
    roofline = pd.DataFrame({"predicted_us": [10.0, 20.0]})
    results = {("d", "xgboost", 0): learned, ("d", "roofline", 0): roofline}
    with_bundle(results, ("xgboost", "unseen_hardware"))
    assert results[("d", BUNDLE, 0)]["predicted_us"].tolist() == [1.0, 20.0]
    with_bundle(results, ("xgboost", "unsupported_spec"))
    assert results[("d", BUNDLE, 0)]["predicted_us"].tolist() == [1.0, 2.0]


def test_breakdowns_leave_out_a_group_equal_to_a_coarser_one():
    dtype = np.array(["bf16", "bf16", "fp32"], dtype=object)
    source = np.array(["a", "b", "a"], dtype=object)
    found = {(d, s): mask.sum() for d, s, mask in groups(dtype, source)}
    # (fp32, a) holds the rows of (fp32, all) and (bf16, b) those of (all, b): both left out
    assert found == {("all", "all"): 3, ("bf16", "all"): 2, ("fp32", "all"): 1, ("all", "a"): 2, ("all", "b"): 1,
                     ("bf16", "a"): 1}


LIGHT = {"xgboost": ModelSpec("xgboost", {"n_estimators": 4, "n_jobs": 1}, "efficiency"),
         "roofline": ModelSpec("roofline")}


@pytest.fixture
def light_candidates(monkeypatch):
    """Two cheap candidates: the protocol's bookkeeping is under test here, not the models."""
    monkeypatch.setattr(unseen, "candidates", lambda family, quick=False: dict(LIGHT))


def test_the_protocol_scores_every_candidate_per_device_with_its_seeds_and_reads_a_rerun_from_the_cache(
        light_candidates, tmp_path):
    data = pd.concat([mixed_gemms(), synthetic_norms(150).assign(hardware="a100-sxm-80gb")], ignore_index=True)
    settings = Settings(seeds=2, max_train_rows=200, splits=("device", "shapes"), cache_dir=tmp_path)
    doc = run_protocol(data, settings, progress=False)
    figures = pd.DataFrame(doc["figures"])
    # gemm: 4 devices and the shapes split; norm: the shapes split only; 2 candidates, 2 seeds
    assert doc["fits"]["cached"] == 0 and doc["fits"]["total"] == (4 + 1 + 1) * 2 * 2
    device = figures[(figures["split"] == "device") & (figures["family"] == "gemm")]
    assert set(device["held_out"]) == {"h100-sxm", "a100-sxm-80gb", "l40s", "cpu-intel-xeon-2c", POOLED}
    assert set(device["model"]) == {"xgboost", "roofline", BUNDLE, ROUTED}
    assert device["seeds"].map(len).eq(2).all()
    pooled = figure(figures, "device", POOLED, "gemm", "xgboost")
    assert pooled["n"] == (frame_rows := mixed_gemms())["hardware"].ne("cpu-intel-xeon-2c").sum()  # GPUs only
    h100 = figure(figures, "device", "h100-sxm", "gemm", "roofline", source="vidur")
    assert h100["n"] == ((frame_rows["hardware"] == "h100-sxm") & (frame_rows["source"] == "vidur")).sum()
    assert h100["seeds"][0] == h100["seeds"][1]  # nothing in the roofline depends on the seed
    assert "norm" not in set(figures.loc[figures["split"] == "device", "family"])  # one device: nothing to hold out
    assert set(figures.loc[figures["split"] == "shapes", "family"]) == {"gemm", "norm"}
    again = run_protocol(data, settings, progress=False)
    assert again["fits"]["cached"] == again["fits"]["total"]
    assert again["figures"] == doc["figures"]


def test_the_routed_candidate_of_a_held_out_device_is_chosen_without_its_figures(light_candidates, tmp_path):
    doc = run_protocol(mixed_gemms(), Settings(seeds=2, max_train_rows=200, splits=("device", "shapes"),
                                               cache_dir=None), progress=False)
    nested = doc["routing"]["nested"]["gemm"]
    assert set(nested) == {"h100-sxm", "a100-sxm-80gb", "l40s", "cpu-intel-xeon-2c"}
    figures = pd.DataFrame(doc["figures"])
    for device, choice in nested.items():
        routed = figure(figures, "device", device, "gemm", ROUTED, "bf16")
        chosen = figure(figures, "device", device, "gemm", choice["bf16"], "bf16")
        if device != "cpu-intel-xeon-2c":  # the CPU fails the GPU models' spec test: the roofline runs it
            assert routed["seeds"] == chosen["seeds"]


def test_a_partial_run_holds_out_only_the_devices_named_and_trains_each_on_every_other(light_candidates):
    data = mixed_gemms()
    doc = run_protocol(data, Settings(seeds=1, max_train_rows=None, splits=("device", "shapes"), cache_dir=None,
                                      held_out=("l40s",)), progress=False)
    assert doc["fits"]["total"] == (1 + 1) * 2 and doc["settings"]["held_out"] == ["l40s"]  # the shapes split whole
    figures = pd.DataFrame(doc["figures"])
    assert set(figures.loc[figures["split"] == "device", "held_out"]) == {"l40s", POOLED}
    l40s = figure(figures, "device", "l40s", "gemm", "xgboost")
    assert l40s["n"] == (data["hardware"] == "l40s").sum()


def test_a_partial_run_names_catalog_devices_and_writes_nothing_by_default(capsys, monkeypatch):
    from benchmarks.estimator.accuracy import main

    with pytest.raises(SystemExit) as done:
        main(["--protocol", "unseen", "--held-out", "gb200-nvl72,gb9000"])
    assert done.value.code == 2 and "--held-out: gb9000 not in the catalog" in capsys.readouterr().err
    written = []
    monkeypatch.setattr(unseen, "run_protocol", lambda data, settings, progress=True: {"figures": [], "settings": {
        "candidates": {}, "held_out": list(settings.held_out)}})
    monkeypatch.setattr("stepcast.estimator.data.load_measurements", lambda: pd.DataFrame())
    monkeypatch.setattr("stepcast.estimator.unseen_results.write", lambda path, doc: written.append(path))
    assert unseen.main(["--held-out", "b300", "--families", "gemm", "--splits", "device"]) == 0
    assert written == []  # docs/results/unseen.json holds every device's figures: a partial run leaves it alone


def test_holdouts_skip_folds_with_too_few_test_rows_or_nothing_to_train_on():
    frame = synthetic_norms(300).assign(hardware="h100-sxm")
    assert unseen.holdouts("device", frame) == []  # one device: held out, nothing is left to train on
    assert len(unseen.holdouts("shapes", frame, seed=0)) == 1
    with pytest.raises(ValueError, match="unknown split 'gpus'"):
        unseen.holdouts("gpus", frame)



def test_the_benchmark_hands_the_unseen_protocol_its_own_options(capsys):
    from benchmarks.estimator.accuracy import main

    with pytest.raises(SystemExit) as done:
        main(["--protocol", "unseen", "--help"])
    assert done.value.code == 0 and "--compare" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["--protocol", "unseen", "--splits", "device,gpus"])
    assert done.value.code == 2 and "unknown split(s) gpus" in capsys.readouterr().err


def test_a_candidates_cache_key_follows_the_code_it_imports_only():
    from benchmarks.estimator.unseen import module_closure

    roofline, tiled = module_closure("stepcast.estimator.analytical"), module_closure("stepcast.estimator.tiled")
    # an XGBoost change keeps the roofline's folds; tiled builds on the MLP's networks
    assert "stepcast.estimator.workload" in roofline and "stepcast.estimator.xgb" not in roofline
    assert "stepcast.estimator.mlp" in tiled and "stepcast.estimator.nccl" not in tiled
    assert unseen.code_digest("roofline") != unseen.code_digest("xgboost")


def test_a_source_that_lost_its_kernel_labels_makes_the_comparison_fail_naming_it():
    # a driver rebuild empties the label cache: tiled then runs without its kernel features on those rows
    lines = unseen.label_losses({"aiconfigurator": 0.0, "neusight": 1.0, "vidur": 0.995},
                                {"aiconfigurator": 1.0, "neusight": 1.0, "vidur": 1.0, "profiler": 0.0})
    assert len(lines) == 1 and "0% of aiconfigurator's GEMM rows against 100%" in lines[0]
    assert "python -m stepcast.estimator.kernel_labels --sources aiconfigurator" in lines[0]
    assert unseen.label_losses({"neusight": 1.0}, {"neusight": 1.0}) == []
