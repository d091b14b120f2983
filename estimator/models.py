"""Estimator kinds by name, built from plain parameters (what Hydra configs and the benchmark pass)."""
from __future__ import annotations

import importlib
from typing import Any

from estimator.base import KernelEstimator
from stepcast.errors import InputError

#: kind -> "module:Class"; random_forest is a benchmark-only baseline (no pickle-free format, so never shipped)
MODEL_KINDS: dict[str, str] = {
    "xgboost": "estimator.xgb:XGBoostEstimator",
    "mlp": "estimator.mlp:MLPEstimator",
    "random_forest": "estimator.forest:RandomForestEstimator",
    "roofline": "estimator.analytical:RooflineEstimator",
    "nccl": "estimator.nccl:NcclEstimator",  # collectives only: NCCL's algorithms and protocols, fitted per device
    "tiled": "estimator.tiled:TiledEstimator",  # GEMMs only: tile bound / learned utilisation (NeuSight's structure)
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
