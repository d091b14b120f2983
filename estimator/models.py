"""Estimator kinds by name, built from plain parameters (what Hydra configs and the benchmark pass)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from stepcast.estimator.base import KernelEstimator
from stepcast.errors import InputError

#: kind -> "module:Class"; random_forest is a benchmark-only baseline (no pickle-free format, so never shipped)
MODEL_KINDS: dict[str, str] = {
    "xgboost": "stepcast.estimator.xgb:XGBoostEstimator",
    "mlp": "stepcast.estimator.mlp:MLPEstimator",
    "random_forest": "stepcast.estimator.forest:RandomForestEstimator",
    "roofline": "stepcast.estimator.analytical:RooflineEstimator",
    # collectives only: NCCL's algorithms and protocols, fitted per device
    "nccl": "stepcast.estimator.nccl:NcclEstimator",
    # GEMMs only: tile bound / learned utilisation (NeuSight's structure)
    "tiled": "stepcast.estimator.tiled:TiledEstimator",
}


def make_estimator(kind: str, family: str, params: dict[str, Any] | None = None,
                   target: str | None = None) -> KernelEstimator:
    if kind not in MODEL_KINDS:
        raise InputError(f"unknown model '{kind}': expected one of {', '.join(MODEL_KINDS)}")
    module, _, name = MODEL_KINDS[kind].partition(":")
    cls = getattr(importlib.import_module(module), name)
    params = dict(params or {})
    if kind == "roofline":
        return cls(**params)
    if target is not None:
        params["target"] = target
    return cls(family=family, **params)


#: kinds whose constructor takes a seed; the fold's seed s gives the model seed SEED_STRIDE x s (tiled's ensemble
#: members take seed, seed + 1, ...: a stride keeps the seeds' members apart)
SEEDED = ("xgboost", "mlp", "tiled")
SEED_STRIDE = 1000


@dataclass(frozen=True)
class ModelSpec:
    """A candidate as ``estimator.models.make_estimator`` builds it."""
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    target: str | None = None

    def seeded(self, seed: int) -> "ModelSpec":
        if self.kind not in SEEDED:
            return self
        return ModelSpec(self.kind, self.params | {"seed": SEED_STRIDE * seed}, self.target)


def shipped_config(kind: str) -> ModelSpec:
    """The candidate as the exporter fits it: conf/estimator/model/<kind>.yaml, target from conf/estimator/train.yaml
    for the models that take one."""
    from omegaconf import OmegaConf

    from stepcast.profiling.paths import CONF_DIR

    config = OmegaConf.load(CONF_DIR / "estimator" / "model" / f"{kind}.yaml")
    params = OmegaConf.to_container(config.params) if config.get("params") else {}
    target = None if kind in ("roofline", "nccl") else \
        str(OmegaConf.load(CONF_DIR / "estimator" / "train.yaml").target)
    return ModelSpec(kind, dict(params), target)
