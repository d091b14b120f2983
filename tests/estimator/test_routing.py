"""Routing: a (device, dtype) without training rows runs the unseen protocol's best for its dtype, one with rows the
within-device best; a challenger must beat the shipped kind by more than the seeds' spread; the routed bundle runs
the chosen model per row, falls back on a failed spec test, and saves and loads its candidates and routes."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from estimator.models import make_estimator
from estimator.router import FamilyRouter
from estimator.routing import FamilyRoutes, choose, choose_routes
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
    """Two held-out GPUs of bf16: tiled wins pooled only thanks to the h200; fp32 on a third, where mlp wins; the
    within-device split: xgboost everywhere but the b200, where tiled wins."""
    rows = [row("device", "h200", "xgboost", [30.0, 30.0], "bf16", 300),
            row("device", "h200", "tiled", [10.0, 10.0], "bf16", 300),
            row("device", "b200", "xgboost", [20.0, 20.0], "bf16"), row("device", "b200", "tiled", [25.0, 25.0], "bf16"),
            row("device", "t4", "xgboost", [20.0, 20.0], "fp32"), row("device", "t4", "mlp", [12.0, 12.0], "fp32"),
            row("device", "t4", "tiled", [25.0, 25.0], "fp32"),
            row("device", "t4", "bundle", [1.0, 1.0], "fp32")]  # a derived figure: never a candidate
    for device, dtype, winner in (("h200", "bf16", "xgboost"), ("b200", "bf16", "tiled"), ("t4", "fp32", "xgboost")):
        for model in ("xgboost", "tiled", "mlp"):
            rows.append(row("shapes", device, model, [5.0, 5.0] if model == winner else [9.0, 9.0], dtype))
    for model in ("xgboost", "tiled", "mlp"):
        rows.append(row("shapes", "pooled", model, [5.0, 5.0] if model == "xgboost" else [8.0, 8.0], "bf16", 300)
                    | {"dtypes": ["bf16", "fp32"]})
    return pd.DataFrame(rows)


PAIRS = {"gemm": ["h200/bf16", "b200/bf16", "t4/fp32"]}


def test_routes_take_the_unseen_best_per_dtype_and_the_within_device_best_per_pair():
    routes = choose_routes(figures(), {"gemm": "xgboost"}, {"h200", "b200", "t4"}, PAIRS)["gemm"]
    assert routes.unseen == {"bf16": "tiled", "fp32": "mlp"} and routes.sibling == {}
    assert routes.seen_default == "xgboost" and routes.seen["b200/bf16"] == "tiled"
    assert routes.seen["h200/bf16"] == "xgboost" and set(routes.pairs) == {"h200/bf16", "b200/bf16", "t4/fp32"}
    assert routes.designs == ["sm_100/bf16", "sm_75/fp32", "sm_90/bf16"]


def test_a_device_whose_sm_design_was_trained_on_at_its_dtype_is_routed_as_a_sibling():
    # the H100 (sm_90, bf16) in the data: the held-out H200's bf16 rows were a sibling's, the B200's a new design's
    pairs = {"gemm": PAIRS["gemm"] + ["h100-sxm/bf16"]}
    routes = choose_routes(figures(), {"gemm": "xgboost"}, {"h200", "b200", "t4"}, pairs)["gemm"]
    assert routes.sibling == {"bf16": "tiled"} and routes.unseen == {"bf16": "xgboost", "fp32": "mlp"}


def test_a_nested_choice_leaves_the_held_out_device_figures_out():
    routes = choose_routes(figures(), {"gemm": "xgboost"}, {"h200", "b200", "t4"}, PAIRS, exclude="h200")["gemm"]
    assert routes.unseen["bf16"] == "xgboost"  # without the h200, the b200 alone: xgboost 20 against tiled 25
    assert "fp32" in routes.unseen


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
    # the model's own test counts too (a collective at a rank count it never saw); device_only: it alone
    assert routes.situations(hardware[:1], dtype[:1], np.zeros(1, dtype=bool)).tolist() == ["sibling"]
    only = FamilyRoutes("nccl", "roofline", device_only=True)
    assert only.situations(hardware[2:3], dtype[2:3], np.ones(1, dtype=bool)).tolist() == ["seen"]


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

    from estimator.bundle import seal_bundle

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

    import estimator
    from estimator import unseen, unseen_results
    from estimator.routing import routes_from_results
    from estimator.train import run
    from estimator.unseen import ModelSpec, Settings, run_protocol
    from profiling.paths import CONF_DIR

    light = {"xgboost": ModelSpec("xgboost", {"n_estimators": 4, "n_jobs": 1}, "efficiency"),
             "mlp": ModelSpec("mlp", {"epochs": 1}, "efficiency"), "roofline": ModelSpec("roofline")}
    monkeypatch.setattr(unseen, "candidates", lambda family, quick=False: dict(light))
    rows = synthetic_gemms(240, hardware=("h100-sxm", "a100-sxm-80gb", "h200"))
    doc = run_protocol(rows, Settings(seeds=2, max_train_rows=None, splits=("device", "shapes")), progress=False)
    # make mlp the unseen choice for bf16 beyond any spread, whatever the light models scored
    for f in doc["figures"]:
        if f["split"] == "device" and f["model"] == "mlp":
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
    assert expected.unseen["bf16"] == "mlp" and bundle.routes["gemm"].unseen == expected.unseen
    assert set(bundle.candidates["gemm"]) == expected.kinds() - {"xgboost", "roofline"}
    assert bundle.routes["gemm"].pairs == ["a100-sxm-80gb/bf16", "h100-sxm/bf16", "h200/bf16"]
    unseen_row = rows.head(1).assign(hardware="b200")
    assert bundle.predict_frame(unseen_row)["estimator"].iat[0].startswith("mlp@")
    card = json.loads((tmp_path / "bundle" / "card.json").read_text())
    chosen = {(c["side"], c["key"]): c["chosen"] for c in card["routing"]["choices"]}
    assert chosen[("unseen", "bf16")] == "mlp" and card["routing"]["rule"]
    assert "## Routing" in (tmp_path / "bundle" / "card.md").read_text()
