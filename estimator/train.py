"""Train, evaluate, track and export kernel-runtime estimators (a Hydra app; configs in conf/estimator/).

    stepcast train family=gemm model=xgboost data=vidur
    stepcast train family=all model=xgboost export=models/xgboost     # the shipped bundle
    stepcast train -m model=xgboost,mlp family=gemm,norm               # a sweep
    stepcast train -m +search=xgboost family=gemm data=vidur           # Optuna search

Per family: evaluate on each configured split (metrics by split, hardware and runtime bucket; plots), fit on the
fixed evaluation split's training rows, register the result as ``kernel-runtime-<family>`` and move the
``champion`` alias only if it beats the current champion on the same held-out rows. With ``export=<folder>``, also
fit on every row and write a bundle with a model card. Returns the pooled mean APE of ``objective_split``
(what a sweep minimises).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from stepcast.estimator.evaluate import Evaluation, bundle_predictions, evaluate, subsample
from stepcast.estimator.metrics import breakdown, summary
from stepcast.estimator.models import make_estimator
from stepcast.estimator.router import FamilyRouter
from stepcast.estimator.splits import fixed_eval
from stepcast.profiling.families import FAMILIES, key_columns
from stepcast.profiling.paths import CONF_DIR
from stepcast.errors import InputError, exit_on_error
from stepcast.hydra_apps import register_resolvers, run_hydra_app

log = logging.getLogger("stepcast.estimator.train")
register_resolvers()  # ${stepcast_cache:...}: Hydra's run folders go under the stepcast cache


class TrainingInputError(InputError):
    """A training config or data file that cannot be used (one line naming the setting or file)."""


def family_model(cfg: DictConfig, family: str) -> DictConfig:
    """The model config (``kind``, ``params``) a family trains with: the config of conf/estimator/model/ that
    ``family_models.<family>`` names (the shipped bundles time collectives with the NCCL-structured model), else
    ``model``."""
    name = (cfg.get("family_models") or {}).get(family)
    if not name:
        return cfg.model
    path = CONF_DIR / "estimator" / "model" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise TrainingInputError(f"family_models.{family}: no model config '{name}' (expected one of {known})")
    return OmegaConf.load(path)


def load_training_rows(data: DictConfig, families: list[str], seed: int = 0) -> pd.DataFrame:
    """Rows per SCHEMA.md, from ``data.path`` or estimator.data.load_measurements, filtered as configured."""
    if data.path:
        path = Path(data.path)
        if not path.is_file():
            raise TrainingInputError(f"data.path: {path}: no such file (expected training rows, .parquet or .csv)")
        try:
            frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        except (OSError, ValueError) as exc:  # pyarrow's and pandas' parse errors are ValueErrors
            raise TrainingInputError(f"data.path: {path}: not readable ({str(exc).splitlines()[0][:200]})") from None
        missing = {"family", "hardware", "dtype", "runtime_us"} - set(frame.columns)
        if missing:
            raise TrainingInputError(f"{path}: missing column(s) {', '.join(sorted(missing))} "
                                     "(expected training rows)")
        frame = frame[frame["family"].isin(families)]
        frame = frame.assign(source=frame["source"] if "source" in frame else path.name)
    else:
        from stepcast.estimator.data import load_measurements

        frame = load_measurements(families=families, sources=list(data.sources) if data.sources else None,
                                  root=Path(data.root) if data.root else None,
                                  datasets_dir=Path(data.datasets_dir) if data.datasets_dir else None)
    if data.hardware:
        frame = frame[frame["hardware"].isin(list(data.hardware))]
    if data.get("exclude_hardware"):
        frame = frame[~frame["hardware"].isin(list(data.exclude_hardware))]
    if data.dtype:
        frame = frame[frame["dtype"].isin(list(data.dtype))]
    frame = frame[np.isfinite(frame["runtime_us"]) & (frame["runtime_us"] > 0)]
    if data.max_rows:
        frame = pd.concat([subsample(rows, data.max_rows, seed) for _, rows in frame.groupby("family", sort=False)])
    return frame.reset_index(drop=True)


def metrics_table(evaluation: Evaluation) -> pd.DataFrame:
    return evaluation.by_split() if len(evaluation.predictions) else pd.DataFrame()


def _log_evaluation(family: str, kind: str, evaluation: Evaluation, plots: bool) -> None:
    import mlflow

    from stepcast.estimator.plots import error_cdf, predicted_vs_measured

    table = metrics_table(evaluation)
    for row in table.to_dict(orient="records"):
        mlflow.log_metrics({f"{row['split']}.{k}": float(v) for k, v in row.items() if k not in {"split", "n"}})
    if len(evaluation.folds):
        mlflow.log_table(evaluation.folds, artifact_file="metrics/folds.json")
        parts = [breakdown(p, p["predicted_us"].to_numpy(), p["runtime_us"].to_numpy()).assign(split=s)
                 for s, p in evaluation.predictions.groupby("split", sort=False)]
        mlflow.log_table(pd.concat(parts, ignore_index=True), artifact_file="metrics/breakdown.json")
    if plots and len(evaluation.predictions):
        title = f"{family} / {kind}"
        mlflow.log_figure(predicted_vs_measured(evaluation.predictions, title), "plots/pred_vs_measured.png")
        mlflow.log_figure(error_cdf(evaluation.predictions, title), "plots/error_cdf.png")


def _log_dataset(frame: pd.DataFrame, family: str, data: DictConfig) -> str:
    import mlflow

    cols = [c for c in key_columns(family) if c in frame] + ["runtime_us", "source", "group"]
    source = str(data.path or data.root or "stepcast.estimator.data.load_measurements")
    dataset = mlflow.data.from_pandas(frame[cols], source=source, name=f"kernels-{family}", targets="runtime_us")
    mlflow.log_input(dataset, context="training")
    return dataset.digest


def register(cfg: DictConfig, family: str, frame: pd.DataFrame) -> dict[str, Any]:
    """Fit on the fixed split's training rows, register, and promote only on improvement."""
    from stepcast.estimator.tracking import champion_error, log_bundle, promote_if_better

    fold = fixed_eval(frame)
    train, test = frame.iloc[fold.train], frame.iloc[fold.test]
    chosen = family_model(cfg, family)
    model = make_estimator(chosen.kind, family, OmegaConf.to_container(chosen.params), cfg.target)
    model.fit(train, train["runtime_us"].to_numpy())
    model.version = cfg.version or dt.date.today().isoformat()
    truth = test["runtime_us"].to_numpy()

    def error_of(estimator) -> float:
        return summary(estimator.predict(test), truth)["mean_ape"]

    old = champion_error(family, test, error_of)
    new = error_of(model)
    with tempfile.TemporaryDirectory() as tmp:
        router = FamilyRouter({family: model}, fallback_rule=cfg.fallback_rule, version=model.version)
        bundle = router.save(Path(tmp) / "bundle")
        example = test[list(key_columns(family))].head(5).reset_index(drop=True)
        version = log_bundle(bundle, family, example, pd.Series(model.predict(example)))
    result = promote_if_better(family, version, new, old)
    log.info("%s: registered version %s, fixed-eval mean APE %.2f%% (champion %s) -> %s", family, version, new,
             "none" if old is None else f"{old:.2f}%", "promoted" if result.promoted else "not promoted")
    return vars(result)


def train_family(cfg: DictConfig, family: str, frame: pd.DataFrame) -> tuple[Evaluation, Evaluation, Any]:
    import mlflow

    chosen = family_model(cfg, family)
    params = OmegaConf.to_container(chosen.params)
    if chosen is not cfg.model:
        log.info("%s: model %s (family_models.%s; family_models=null trains it with %s)", family, chosen.kind, family,
                 cfg.model.kind)
    with mlflow.start_run(run_name=f"{family}-{chosen.kind}", nested=mlflow.active_run() is not None):
        mlflow.log_params({"family": family, "model": chosen.kind, "target": cfg.target, "rows": len(frame),
                           "hardware": ",".join(sorted(frame["hardware"].astype(str).unique()))}
                          | {f"model.{k}": v for k, v in params.items()})
        mlflow.set_tag("dataset_digest", _log_dataset(frame, family, cfg.data))
        evaluation = evaluate(chosen.kind, family, frame, list(cfg.splits), params, cfg.target,
                              cfg.max_train_rows, seed=cfg.seed)
        _log_evaluation(family, chosen.kind, evaluation, cfg.mlflow.plots)
        baseline = evaluate("roofline", family, frame, list(cfg.splits), {}, None, seed=cfg.seed, progress=False)
        for row in metrics_table(baseline).to_dict(orient="records"):
            mlflow.log_metric(f"roofline.{row['split']}.mean_ape", float(row["mean_ape"]))
        registered = None
        if cfg.mlflow.register and chosen.kind in ("xgboost", "mlp"):
            registered = register(cfg, family, frame)
    return evaluation, baseline, registered


def beats_roofline(learned: Evaluation, roofline: Evaluation, splits: tuple[str, ...]) -> bool:
    """Whether the learned model's pooled mean APE is below the roofline's on any of ``splits`` (True when none of
    them was evaluated). Where it wins only in distribution, the family's fallback rule keeps the roofline for
    unseen hardware (see choose_rules)."""
    ours, theirs = metrics_table(learned), metrics_table(roofline)
    if not len(ours):
        return True
    ours, theirs = ours.set_index("split")["mean_ape"], theirs.set_index("split")["mean_ape"]
    evaluated = [s for s in splits if s in ours.index]
    return not evaluated or any(ours[s] < theirs[s] for s in evaluated)


def choose_rules(metrics: pd.DataFrame, learned: str | dict[str, str], default: str) -> dict[str, str]:
    """Per-family fallback rule from held-out figures (rows: family, split, model, mean_ape): fall back on unseen
    hardware where the roofline beats the learned model (``learned``: its kind, or each family's) on
    leave-one-hardware-out, on every flagged row where it wins on the out-of-range split, else ``default``."""
    rules = {}
    for family, rows in metrics.groupby("family"):
        table = rows.pivot_table(index="split", columns="model", values="mean_ape")
        kind = learned if isinstance(learned, str) else learned[str(family)]

        def roofline_wins(split: str) -> bool:
            return split in table.index and {kind, "roofline"} <= set(table.columns) \
                and table.at[split, "roofline"] < table.at[split, kind]

        rules[str(family)] = "out_of_range" if roofline_wins("out_of_range") else \
            "unseen_hardware" if roofline_wins("leave_one_hardware_out") else default
    return rules


def export_bundle(cfg: DictConfig, frames: dict[str, pd.DataFrame], evaluations: dict[str, Evaluation],
                  baselines: dict[str, Evaluation]) -> Path:
    """Fit every family on all of its rows and write the bundle plus its model card. A family whose learned model
    beats the roofline neither on ``objective_split`` nor on ``random`` is left to the roofline (the card says so)."""
    from stepcast.estimator.model_card import write_card

    version = cfg.version or dt.date.today().isoformat()
    chosen = {family: family_model(cfg, family) for family in frames}
    kinds = {family: str(m.kind) for family, m in chosen.items()}
    models, feature_names, notes = {}, {}, []
    for family, frame in frames.items():
        if not beats_roofline(evaluations[family], baselines[family], (cfg.objective_split, "random")):
            notes.append(f"{family}: the learned model did not beat the roofline on {cfg.objective_split} or random; "
                         "the bundle leaves this family to the roofline")
            continue
        model = make_estimator(kinds[family], family, OmegaConf.to_container(chosen[family].params), cfg.target)
        model = model.fit(frame, frame["runtime_us"].to_numpy())
        model.version = version
        models[family], feature_names[family] = model, model.feature_names
    tables = [metrics_table(e).assign(family=f, model=kinds[f]) for f, e in evaluations.items()]
    tables += [metrics_table(e).assign(family=f, model="roofline") for f, e in baselines.items()]
    tables = [t for t in tables if len(t)]
    metrics = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    rules = choose_rules(metrics, kinds, cfg.fallback_rule) if len(metrics) else {}
    if cfg.get("rules_from"):  # no held-out figures here: keep the fallback rules an earlier export chose from its own
        source = Path(hydra.utils.to_absolute_path(cfg.rules_from))
        from stepcast.estimator.bundle import verified_manifest

        earlier = verified_manifest(source)
        rules = {f: r for f, r in earlier.get("fallback_rules", {}).items() if f in models} | {
            f: r for f, r in rules.items() if f in models and len(metrics)}
        notes.append(f"fallback rules of families without held-out figures in this export taken from "
                     f"{cfg.rules_from} (version {earlier.get('version')}), which chose them from its own")
    shipped = [metrics_table(bundle_predictions(evaluations[f], baselines[f], rules.get(f, cfg.fallback_rule)))
               .assign(family=f, model="bundle") for f in models if f in baselines]
    metrics = pd.concat([metrics, *[t for t in shipped if len(t)]], ignore_index=True)
    notes += [f"{family}: fallback rule '{rules.get(family, cfg.fallback_rule)}'"
              + (f" ({model.support_note()})" if model.support_note() else "") for family, model in models.items()]
    candidates, routes, routing = {}, {}, None
    if cfg.get("routes_from"):
        candidates, routes, routing = routed_candidates(Path(hydra.utils.to_absolute_path(cfg.routes_from)), frames,
                                                        models, cfg.target, version)
        notes.append(f"routed families ({', '.join(routes)}): the model of each (device, dtype) chosen by the unseen "
                     f"protocol's results {cfg.routes_from} (card section Routing)")
    out = Path(hydra.utils.to_absolute_path(cfg.export))
    router = FamilyRouter(models, fallback_rule=cfg.fallback_rule, version=version,
                          rules={f: r for f, r in rules.items() if f in models}, candidates=candidates, routes=routes)
    router.power_floor = export_power_floor(cfg.data, frames, router)
    router.save(out)
    if len(metrics):
        metrics = metrics.sort_values(["family", "split", "model"], kind="stable")
        metrics = metrics[["family", "split", "model"] + [c for c in metrics.columns
                                                          if c not in ("family", "split", "model")]]
    write_card(out, version=version, model_kind=cfg.model.kind, target=cfg.target, fallback_rule=cfg.fallback_rule,
               frame=pd.concat(frames.values()), features=feature_names, metrics=metrics,
               params=OmegaConf.to_container(cfg.model.params), notes=notes,
               family_models={f: {"kind": kinds[f], "params": OmegaConf.to_container(chosen[f].params)}
                              for f in models if kinds[f] != cfg.model.kind}, routing=routing)
    if router.power_floor is not None:
        from stepcast.estimator.model_card import add_power_floor

        add_power_floor(out, router.power_floor)
    return out


def export_power_floor(data: DictConfig, frames: dict[str, pd.DataFrame], router: FamilyRouter):
    """The power floor (:mod:`estimator.power_floor`) a bundle of ``router``'s models ships, fitted on its GEMM
    training rows, plus aiconfigurator's fp8 GEMMs of the same devices where the rows are the shared data's
    (``data.path`` unset, aiconfigurator among the sources); with how often it binds on the rows and on the bundle's
    own predictions of them. None without GEMM rows."""
    from stepcast.estimator.power_floor_bundle import fit_for_bundle

    gemm = frames.get("gemm")
    if gemm is None or not len(gemm):
        return None
    fp8 = not data.path and (not data.sources or "aiconfigurator" in data.sources)
    return fit_for_bundle(gemm, Path(data.root) if data.root else None, fp8, router)


def routed_candidates(results: Path, frames: dict[str, pd.DataFrame], models: dict[str, Any], target: str,
                      version: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """(candidates, routes, the card's routing record) of the families of ``models`` that the unseen protocol's
    ``results`` route: each route's models other than the primary one and the roofline are fitted on every row of the
    family with their shipped configs (conf/estimator/model/); a family's ``pairs`` are its training data's."""
    from stepcast.estimator import routing, unseen_results
    from stepcast.estimator.models import shipped_config

    try:
        doc = unseen_results.read(results)
    except (FileNotFoundError, ValueError) as exc:
        raise TrainingInputError(f"routes_from: {exc}") from None
    figures = unseen_results.frame(doc)
    gpus, incumbents, pairs = routing.gpus_of(figures), routing.incumbents_of(doc), routing.pairs_of(doc)
    chosen = routing.choose_routes(figures, incumbents, gpus, pairs)
    candidates, routes = {}, {}
    for family, model in models.items():
        if family not in chosen:
            continue
        frame = frames[family]
        trained = sorted(set(frame["hardware"].astype(str) + "/" + frame["dtype"].astype(str)))
        routes[family] = replace(chosen[family], pairs=trained, designs=routing.designs_of(trained))
        for kind in sorted(routes[family].kinds() - {routing.ROOFLINE, str(getattr(model, "kind", model.name))}):
            spec = shipped_config(kind)
            extra = make_estimator(kind, family, spec.params, target if spec.target else None)
            extra = extra.fit(frame, frame["runtime_us"].to_numpy())
            extra.version = version
            candidates.setdefault(family, {})[kind] = extra
            log.info("%s: routed candidate %s fitted on %d rows", family, kind, len(frame))
    record = {"results": {"path": str(results), "commit": doc.get("commit"), "created": doc.get("created"),
                          "seeds": doc.get("settings", {}).get("seeds")},
              "routes": {f: r.to_dict() | {"pairs": len(r.pairs), "designs": len(r.designs)}
                         for f, r in routes.items()},
              "choices": [c for c in routing.route_choices(figures, incumbents, gpus, pairs) if c["family"] in routes]}
    return candidates, routes, record


def run(cfg: DictConfig) -> float:
    import mlflow

    from stepcast.estimator.tracking import tracking_errors, tracking_uri, use_experiment

    families = list(FAMILIES) if cfg.family == "all" else [str(f) for f in np.atleast_1d(cfg.family)]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise TrainingInputError(f"family: unknown family '{unknown[0]}': expected one of {', '.join(FAMILIES)} "
                                 "or all")
    uri = tracking_uri(cfg.mlflow.tracking_uri)
    use_experiment(cfg.mlflow.experiment, uri)  # first: a store that is down fails in seconds, before any training
    data = load_training_rows(cfg.data, families, cfg.seed)
    frames = {f: data[data["family"] == f].reset_index(drop=True) for f in families}
    frames = {f: rows for f, rows in frames.items() if len(rows) >= cfg.min_rows}
    if not frames:
        raise TrainingInputError(f"no family among {', '.join(families)} has {cfg.min_rows} or more measured rows")
    evaluations: dict[str, Evaluation] = {}
    baselines: dict[str, Evaluation] = {}
    with tracking_errors(uri), \
            (mlflow.start_run(run_name=f"{cfg.family}-{cfg.model.kind}") if len(frames) > 1
             else contextlib.nullcontext()):
        for family, rows in frames.items():
            evaluations[family], baselines[family], _ = train_family(cfg, family, rows)
            table = metrics_table(evaluations[family])
            if len(table):
                log.info("%s/%s:\n%s", family, family_model(cfg, family).kind, table.round(2).to_string(index=False))
        if cfg.export:
            log.info("bundle written to %s", export_bundle(cfg, frames, evaluations, baselines))
    scores = [metrics_table(e).set_index("split")["mean_ape"].get(cfg.objective_split, np.nan)
              for e in evaluations.values() if len(e.predictions)]
    scores = [s for s in scores if np.isfinite(s)]
    return float(np.mean(scores)) if scores else float("nan")


@hydra.main(version_base="1.3",
            config_path=str(CONF_DIR / "estimator"),  # absolute: also when imported by the stepcast command
            config_name="train")
def main(cfg: DictConfig) -> float:
    """A user's mistake (a :class:`stepcast.errors.StepcastError`: bad config or data, an unreachable MLflow store)
    is one line and its exit status."""
    with exit_on_error():
        return run(cfg)


if __name__ == "__main__":
    run_hydra_app(main)
