"""Routing: a (device, dtype) without training rows runs the unseen protocol's best for its dtype, one with rows the
within-device best; a challenger must beat the shipped kind by more than the seeds' spread; the routed bundle runs
the chosen model per row, falls back on a failed spec test, and saves and loads its candidates and routes."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.models import make_estimator
from stepcast.estimator.router import FamilyRouter
from stepcast.estimator.routing import FamilyRoutes, choose, choose_routes, incumbents_from, route_choices
from tests.estimator.conftest import synthetic_gemms


def test_the_lowest_mean_wins_but_the_incumbent_stays_within_the_spread():
    assert choose({"xgboost": [10.0, 12.0], "tiled": [9.0, 10.0]}, "xgboost") == "xgboost"  # 2 points apart, spread 2
    assert choose({"xgboost": [10.0, 12.0], "tiled": [7.0, 8.0]}, "xgboost") == "tiled"
    assert choose({"mlp": [5.0, 6.0], "tiled": [7.0, 7.0]}, "xgboost") == "mlp"  # no incumbent among them


def row(split: str, held_out: str, model: str, seeds: list[float], dtype: str, n: int = 100) -> dict:
    return {"split": split, "held_out": held_out, "family": "gemm", "dtype": dtype, "source": "all",
            "dtypes": [dtype], "sources": ["s"], "model": model, "n": n, "seeds": seeds,
            "mean_ape": float(np.mean(seeds))}


def figures() -> pd.DataFrame:
    """Held-out GPUs. bf16 on three, where tiled beats xgboost on each; fp16 on two, where tiled wins pooled only
    thanks to the A100's larger share of rows; fp32 on one, where the MLP scores best and tiled next. The
    within-device split: xgboost everywhere but the B200, where tiled wins."""
    rows = []
    for device, dtype, n, scores in (("h200", "bf16", 100, {"xgboost": 30, "tiled": 10}),
                                     ("b200", "bf16", 100, {"xgboost": 20, "tiled": 15}),
                                     ("l40s", "bf16", 100, {"xgboost": 25, "tiled": 20}),
                                     ("a100-sxm-80gb", "fp16", 300, {"xgboost": 30, "tiled": 10}),
                                     ("a40", "fp16", 100, {"xgboost": 10, "tiled": 30}),
                                     ("t4", "fp32", 100, {"xgboost": 20, "mlp": 12, "tiled": 14, "bundle": 1})):
        rows += [row("device", device, model, [float(v), float(v)], dtype, n) for model, v in scores.items()]
    for device, dtype, winner in (("h200", "bf16", "xgboost"), ("b200", "bf16", "tiled"), ("t4", "fp32", "xgboost")):
        for model in ("xgboost", "tiled", "mlp"):
            rows.append(row("shapes", device, model, [5.0, 5.0] if model == winner else [9.0, 9.0], dtype))
    for model in ("xgboost", "tiled", "mlp"):
        rows.append(row("shapes", "pooled", model, [5.0, 5.0] if model == "xgboost" else [8.0, 8.0], "bf16", 300)
                    | {"dtypes": ["bf16", "fp32"]})
    return pd.DataFrame(rows)


GPUS = {"h200", "b200", "l40s", "a100-sxm-80gb", "a40", "t4"}
PAIRS = {"gemm": ["h200/bf16", "b200/bf16", "l40s/bf16", "a100-sxm-80gb/fp16", "a40/fp16", "t4/fp32"]}
SHIPPED = incumbents_from({"gemm": ("xgboost", "unsupported_spec")})


def test_routes_take_a_challenger_only_where_no_single_held_out_device_decides_it():
    routes = choose_routes(figures(), SHIPPED, GPUS, PAIRS)["gemm"]
    # bf16: tiled wins on each device; fp16: the A100 alone makes tiled win; fp32: one device is no evidence
    assert routes.unseen == {"bf16": "tiled", "fp16": "xgboost", "fp32": "xgboost"} and routes.sibling == {}
    assert routes.seen_default == "xgboost" and routes.seen["b200/bf16"] == "tiled"
    assert routes.seen["h200/bf16"] == "xgboost" and set(routes.pairs) == set(PAIRS["gemm"])
    assert "sm_90/bf16" in routes.designs and "sm_75/fp32" in routes.designs


def test_the_incumbent_of_a_device_without_training_rows_is_what_the_shipped_rule_runs_there():
    # a family whose rule sends unseen devices to the roofline: xgboost is a challenger there
    rows = figures()
    rows = pd.concat([rows, pd.DataFrame([row("device", d, "roofline", [40.0, 40.0], "bf16")
                                          for d in ("h200", "b200", "l40s")])], ignore_index=True)
    shipped = incumbents_from({"gemm": ("xgboost", "unseen_hardware")})
    assert shipped["gemm"] == {"seen": "xgboost", "sibling": "roofline", "unseen": "roofline"}
    routes = choose_routes(rows, shipped, {"h200", "b200", "l40s"}, PAIRS)["gemm"]
    assert routes.unseen["bf16"] == "tiled" and routes.seen_default == "xgboost"


def test_a_device_whose_sm_design_was_trained_on_at_its_dtype_is_routed_as_a_sibling():
    # the H100 (sm_90) and the L4 (sm_89) at bf16 in the data: the held-out H200 and L40S were siblings, the B200 not
    pairs = {"gemm": PAIRS["gemm"] + ["h100-sxm/bf16", "l4/bf16"]}
    choices = {(c["side"], c["key"]): c for c in route_choices(figures(), SHIPPED, GPUS, pairs)}
    assert choices[("sibling", "bf16")]["rows"] == 200 and choices[("unseen", "bf16")]["rows"] == 100
    assert choices[("sibling", "bf16")]["chosen"] == "tiled"  # on both the H200 and the L40S
    assert choices[("unseen", "bf16")]["chosen"] == "xgboost"  # the B200 alone: no evidence


def test_a_nested_choice_leaves_the_held_out_device_figures_out():
    full = route_choices(figures(), SHIPPED, GPUS, PAIRS)
    nested = route_choices(figures(), SHIPPED, GPUS, PAIRS, exclude="h200")
    rows = {c["key"]: c["rows"] for c in full if c["side"] == "unseen"}
    assert rows["bf16"] == 300 and {c["key"]: c["rows"] for c in nested if c["side"] == "unseen"}["bf16"] == 200


def test_a_row_is_seen_where_its_device_and_dtype_were_trained_on_and_a_sibling_where_its_design_was():
    routes = FamilyRoutes("xgboost", "tiled", {"h100-sxm/bf16": "mlp"}, {"fp32": "roofline"},
                          ["h100-sxm/bf16", "a100-sxm-80gb/fp16"], sibling={"bf16": "xgboost"},
                          designs=["sm_90/bf16", "sm_80/fp16"])
    hardware = np.array(["h100-sxm", "h100-sxm", "t4", "a100-sxm-80gb", "a100-sxm-80gb", "h200"], dtype=object)
    dtype = np.array(["bf16", "fp32", "fp32", "fp16", "bf16", "bf16"], dtype=object)
    where = routes.situations(hardware, dtype, np.ones(6, dtype=bool))
    assert where.tolist() == ["seen", "unseen", "unseen", "seen", "unseen", "sibling"]
    assert routes.kinds_for(hardware, dtype, where).tolist() == ["mlp", "roofline", "roofline", "xgboost", "tiled",
                                                                 "xgboost"]
    # the model's own test counts too (a collective at a rank count it never saw)
    assert routes.situations(hardware[:1], dtype[:1], np.zeros(1, dtype=bool)).tolist() == ["sibling"]
    # device_only (collectives): a trained device at any dtype is seen, one the model times by another's figures a
    # sibling, whatever its SM design
    only = FamilyRoutes("nccl", "roofline", pairs=["h100-sxm/fp16"], device_only=True)
    model_seen = np.array([True, True, False])
    assert only.situations(np.array(["h100-sxm", "h200", "t4"], dtype=object),
                           np.array(["int8", "fp16", "fp16"], dtype=object), model_seen).tolist() == \
        ["seen", "sibling", "unseen"]


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    rows = synthetic_gemms(300, hardware=("h100-sxm", "a100-sxm-80gb"))
    primary = make_estimator("xgboost", "gemm", {"n_estimators": 8}, "efficiency").fit(rows, rows["runtime_us"])
    other = make_estimator("mlp", "gemm", {"epochs": 2}, "efficiency").fit(rows, rows["runtime_us"])
    routes = FamilyRoutes("xgboost", "xgboost", {}, {"fp32": "roofline"}, ["h100-sxm/bf16", "a100-sxm-80gb/bf16"],
                          sibling={"bf16": "mlp"}, designs=["sm_90/bf16", "sm_80/bf16"])
    router = FamilyRouter({"gemm": primary}, candidates={"gemm": {"mlp": other}}, routes={"gemm": routes})
    return router, router.save(tmp_path_factory.mktemp("routed") / "bundle")


def kernels() -> pd.DataFrame:
    return pd.DataFrame({"family": "gemm", "hardware": ["h100-sxm", "h200", "b200", "cpu-intel-xeon-2c"],
                         "dtype": ["bf16", "bf16", "fp32", "bf16"], "m": 512.0, "n": 1024.0, "k": 2048.0,
                         "batch": 1.0})


def test_a_routed_bundle_runs_each_row_by_its_route_and_falls_back_on_a_failed_spec_test(routed):
    router, _ = routed
    out = router.predict_frame(kernels())
    names = out["estimator"].str.split("@").str[0].tolist()
    # seen pair: xgboost; a sibling (the H200, of the H100's design) at bf16: mlp; unseen fp32: the roofline; the CPU
    # is routed to xgboost but fails its spec test
    assert names == ["xgboost", "mlp", "roofline", "roofline"]
    mlp = router.candidates["gemm"]["mlp"]
    assert out["predicted_us"].iloc[1] == pytest.approx(mlp.predict(kernels().iloc[[1]])[0])
    assert np.all(np.isfinite(router.predict(kernels())))


def test_a_routed_bundle_loads_with_its_candidates_and_routes_under_its_checksums(routed):
    router, path = routed
    loaded = FamilyRouter.load(path)
    assert loaded.routes["gemm"] == router.routes["gemm"] and set(loaded.candidates["gemm"]) == {"mlp"}
    assert np.allclose(loaded.predict(kernels()), router.predict(kernels()))
    assert "gemm.mlp/meta.json" in (path / "SHA256SUMS").read_text()


def test_a_manifest_with_malformed_routes_is_named_in_one_line(routed, tmp_path):
    import shutil

    from stepcast.estimator.bundle import seal_bundle

    _, path = routed
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["routes"]["gemm"] = {"seen_default": "xgboost"}
    (broken / "manifest.json").write_text(json.dumps(manifest))
    seal_bundle(broken)
    with pytest.raises(ValueError, match="field 'routes.gemm'.*unseen_default"):
        FamilyRouter.load(broken)


def test_an_export_routed_by_the_results_fits_the_chosen_models_and_says_why_in_its_card(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir

    from stepcast import estimator
    from benchmarks.estimator import unseen
    from benchmarks.estimator.unseen import ModelSpec, Settings, run_protocol
    from stepcast.estimator import unseen_results
    from stepcast.estimator.routing import routes_from_results
    from stepcast.estimator.train import run
    from stepcast.profiling.paths import CONF_DIR

    light = {"xgboost": ModelSpec("xgboost", {"n_estimators": 4, "n_jobs": 1}, "efficiency"),
             "mlp": ModelSpec("mlp", {"epochs": 1}, "efficiency"), "roofline": ModelSpec("roofline")}
    monkeypatch.setattr(unseen, "candidates", lambda family, quick=False: dict(light))
    rows = synthetic_gemms(240, hardware=("h100-sxm", "a100-sxm-80gb", "h200"))
    doc = run_protocol(rows, Settings(seeds=2, max_train_rows=None, splits=("device", "shapes")), progress=False)
    # make the MLP the within-device choice beyond any spread, whatever the light models scored
    for f in doc["figures"]:
        if f["split"] == "shapes" and f["model"] == "mlp":
            f["seeds"], f["mean_ape"] = [0.1, 0.1], 0.1
    results = tmp_path / "unseen.json"
    unseen_results.write(results, doc)
    expected = routes_from_results(unseen_results.read(results))["gemm"]
    data = tmp_path / "rows.parquet"
    rows.to_parquet(data)
    with initialize_config_dir(config_dir=str(CONF_DIR / "estimator"), version_base="1.3"):
        cfg = compose("train", overrides=[
            "family=gemm", f"data.path={data}", "splits=[]", "mlflow.plots=false", "mlflow.register=false",
            "model.params.n_estimators=8", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
            "mlflow.experiment=test", f"export={tmp_path / 'bundle'}", f"routes_from={results}"])
    run(cfg)
    bundle = estimator.load(str(tmp_path / "bundle"))
    assert expected.seen_default == "mlp" and bundle.routes["gemm"].seen == expected.seen
    assert set(bundle.candidates["gemm"]) == expected.kinds() - {"xgboost", "roofline"} and "mlp" in expected.kinds()
    assert bundle.routes["gemm"].pairs == ["a100-sxm-80gb/bf16", "h100-sxm/bf16", "h200/bf16"]
    seen_row = rows[rows["hardware"] == "h200"].head(1)
    assert bundle.predict_frame(seen_row)["estimator"].iat[0].startswith("mlp@")
    card = json.loads((tmp_path / "bundle" / "card.json").read_text())
    chosen = {(c["side"], c["key"]): c["chosen"] for c in card["routing"]["choices"]}
    assert chosen[("seen", "*")] == "mlp" and card["routing"]["rule"]
    assert "## Routing" in (tmp_path / "bundle" / "card.md").read_text()


def test_an_unbounded_model_is_never_routed_to_a_device_without_training_rows():
    rows = figures()
    rows.loc[(rows["split"] == "device") & (rows["model"] == "mlp"), "seeds"] = pd.Series(
        [[0.1, 0.1]] * int(((rows["split"] == "device") & (rows["model"] == "mlp")).sum()),
        index=rows.index[(rows["split"] == "device") & (rows["model"] == "mlp")])
    routes = choose_routes(rows, SHIPPED, GPUS, PAIRS)["gemm"]
    assert "mlp" not in {routes.unseen_default, *routes.unseen.values()}  # however well it scored on the others


def test_a_held_out_collective_device_is_a_sibling_where_another_has_its_links():
    from stepcast.estimator.routing import situation_of

    pairs = ["h100-sxm/fp16", "a40/fp16", "h200/int8"]
    assert situation_of("h200", "int8", pairs, device_only=True) == "sibling"  # the H100 SXM's NVSwitch links
    assert situation_of("a40", "fp16", pairs, device_only=True) == "unseen"
    # any other family: the SM design at that dtype (the H100 has no int8 rows)
    assert situation_of("h200", "fp16", pairs) == "sibling" and situation_of("h200", "int8", pairs) == "unseen"
    assert incumbents_from({"collective": ("nccl", "unseen_hardware")})["collective"] == \
        {"seen": "nccl", "sibling": "nccl", "unseen": "roofline"}


def test_a_candidate_folder_outside_the_bundle_is_refused(routed, tmp_path):
    import shutil

    from stepcast.estimator.checksums import BundleIntegrityError

    _, path = routed
    broken = tmp_path / "escaping"
    shutil.copytree(path, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["candidates"]["gemm"]["mlp"] = "../elsewhere"
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleIntegrityError, match="manifest.json"):  # its checksum no longer matches
        FamilyRouter.load(broken)
    from stepcast.estimator.bundle import named_folders

    with pytest.raises(BundleIntegrityError, match="leads outside the bundle"):  # nor would any seal accept it
        named_folders(broken, manifest)
