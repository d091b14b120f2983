"""On-disk estimator bundles: a folder of portable files (JSON, XGBoost UBJ, safetensors), never pickles.

A single estimator is a folder with ``meta.json`` whose ``kind`` names its class (see ``KINDS``). A bundle of
per-family estimators is a folder with ``manifest.json``::

    {"format": "stepcast-estimator-bundle", "format_version": 1, "version": "...",
     "families": {"gemm": "gemm", ...},          # family -> sub-folder holding one estimator
     "fallback": "roofline", "fallback_rule": "unsupported_spec"}
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from estimator.base import KernelEstimator
from profiling import atomic

BUNDLE_FORMAT = "stepcast-estimator-bundle"
BUNDLE_FORMAT_VERSION = 1

#: meta.json ``kind`` -> "module:Class"
KINDS: dict[str, str] = {
    "roofline": "estimator.analytical:RooflineEstimator",
    "xgboost": "estimator.xgb:XGBoostEstimator",
    "mlp": "estimator.mlp:MLPEstimator",
}


def write_json_atomic(path: Path, obj: Any) -> None:
    """Bundle files are written with sorted keys, so that two exports of the same model are byte-identical."""
    atomic.write_json_atomic(path, obj, sort_keys=True)


def read_json(path: Path) -> dict:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing (expected an estimator bundle file)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def estimator_class(kind: str) -> type[KernelEstimator]:
    if kind not in KINDS:
        raise ValueError(f"unknown estimator kind '{kind}': expected one of {', '.join(KINDS)}")
    module, _, cls = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def load_estimator_dir(path: Path) -> KernelEstimator:
    """Load one estimator folder (``meta.json``)."""
    meta = read_json(Path(path) / "meta.json")
    if "kind" not in meta:
        raise ValueError(f"{path / 'meta.json'}: field 'kind' missing (expected one of {', '.join(KINDS)})")
    return estimator_class(meta["kind"]).load(path)


def is_bundle(path: Path) -> bool:
    return (Path(path) / "manifest.json").is_file()


def is_estimator_dir(path: Path) -> bool:
    return (Path(path) / "meta.json").is_file()
