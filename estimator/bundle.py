"""On-disk estimator bundles: a folder of portable files (JSON, XGBoost UBJ, safetensors), never pickles.

A single estimator is a folder with ``meta.json`` whose ``kind`` names its class (see ``KINDS``). A bundle of
per-family estimators is a folder with ``manifest.json``::

    {"format": "stepcast-estimator-bundle", "format_version": 1, "version": "...",
     "families": {"gemm": "gemm", ...},          # family -> sub-folder holding one estimator
     "fallback": "roofline", "fallback_rule": "unsupported_spec",
     "candidates": {"gemm": {"tiled": "gemm.tiled"}},   # optional: a routed family's other models
     "routes": {"gemm": {...}}}                  # optional: which model runs each row (estimator.routing)

Both kinds of folder carry ``SHA256SUMS`` (see :mod:`estimator.checksums`): a bundle's covers ``manifest.json`` and
every file of every folder the manifest names, and is verified before any of them is parsed; every path the manifest
names must stay inside the bundle.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from stepcast.estimator.base import KernelEstimator
from stepcast.estimator.checksums import Checksums, folder_files, inside, write_checksums
from stepcast.profiling import atomic
from stepcast.profiling.families import FAMILIES
from stepcast import json_files
from stepcast.errors import InputError

T = TypeVar("T")   # what a bundle extra parses into (read_extra)

BUNDLE_FORMAT = "stepcast-estimator-bundle"
BUNDLE_FORMAT_VERSION = 1

#: meta.json ``kind`` -> "module:Class"
KINDS: dict[str, str] = {
    "roofline": "stepcast.estimator.analytical:RooflineEstimator",
    "xgboost": "stepcast.estimator.xgb:XGBoostEstimator",
    "mlp": "stepcast.estimator.mlp:MLPEstimator",
    "nccl": "stepcast.estimator.nccl:NcclEstimator",
    "tiled": "stepcast.estimator.tiled:TiledEstimator",
}


def write_json_atomic(path: Path, obj: Any) -> None:
    """Bundle files are written with sorted keys, so that two exports of the same model are byte-identical."""
    atomic.write_json_atomic(path, obj, sort_keys=True)


def read_json(path: Path) -> dict:
    """A bundle's JSON file (``stepcast.json_files.read_json``'s one-line errors)."""
    return json_files.read_json(path, "an estimator bundle file")


def read_extra(root: Path, filename: str, parse: Callable[[Any, Path], T]) -> T | None:
    """A bundle extra (a JSON file next to the manifest, under its SHA256SUMS, which the caller has verified: the
    convolution-family table, the power floor) parsed by ``parse(doc, path)``; None where the bundle has none."""
    path = Path(root) / filename
    return parse(read_json(path), path) if path.is_file() else None


def estimator_class(kind: str) -> type[KernelEstimator]:
    if kind not in KINDS:
        raise InputError(f"unknown estimator kind '{kind}': expected one of {', '.join(KINDS)}")
    module, _, cls = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def load_estimator_dir(path: Path, verified: bool = False) -> KernelEstimator:
    """Load one estimator folder (``meta.json``), checking its SHA256SUMS first unless the caller has already
    ``verified`` it (a bundle verifies all its folders at once)."""
    path = Path(path)
    if not verified:
        Checksums.read(path).check_all(folder_files(path))
    meta = read_json(path / "meta.json")
    if not isinstance(meta.get("kind"), str):
        raise InputError(f"{path / 'meta.json'}: field 'kind' missing (expected one of {', '.join(KINDS)})")
    try:
        return estimator_class(meta["kind"]).load(path)
    except (KeyError, TypeError) as exc:
        raise InputError(f"{path / 'meta.json'}: field {exc} missing or malformed (expected what "
                         f"{meta['kind']} estimators write)") from None


def seal_estimator_dir(path: Path) -> Path:
    """Write an estimator folder's SHA256SUMS (every file in it)."""
    return write_checksums(path, folder_files(path))


def check_manifest(manifest: object, source: Path) -> dict[str, Any]:
    """The fields the loader relies on, each checked with a one-line error naming ``source`` and the field."""
    if not isinstance(manifest, dict):
        raise InputError(f"{source}: expected a JSON object")
    if manifest.get("format") != BUNDLE_FORMAT:
        raise InputError(f"{source}: field 'format' is {manifest.get('format')!r}, expected '{BUNDLE_FORMAT}'")
    families = manifest.get("families")
    if not isinstance(families, dict) or not all(isinstance(v, str) for v in families.values()):
        got = "missing" if families is None else f"{type(families).__name__} {families!r}"[:80]
        raise InputError(f"{source}: field 'families': expected an object of family -> sub-folder, got {got}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise InputError(f"{source}: field 'families': unknown family '{unknown[0]}' (expected some of "
                         f"{', '.join(FAMILIES)})")
    fallback = manifest.get("fallback")
    if fallback is not None and not isinstance(fallback, str):
        raise InputError(f"{source}: field 'fallback': expected a sub-folder name or null, got {fallback!r}")
    for name in ("fallback_rule", "version"):
        if name in manifest and not isinstance(manifest[name], str):
            raise InputError(f"{source}: field '{name}': expected a string, got {manifest[name]!r}")
    rules = manifest.get("fallback_rules")
    if rules is not None and not (isinstance(rules, dict) and all(isinstance(v, str) for v in rules.values())):
        raise InputError(f"{source}: field 'fallback_rules': expected an object of family -> rule, got {rules!r}")
    candidates = manifest.get("candidates", {})
    if not (isinstance(candidates, dict) and all(isinstance(m, dict) and all(k in KINDS for k in m)
                                                 for m in candidates.values())):
        raise InputError(f"{source}: field 'candidates': expected an object of family -> {{kind: sub-folder}} with "
                         f"kinds among {', '.join(KINDS)}, got {str(candidates)[:80]}")
    routes = manifest.get("routes", {})
    if not isinstance(routes, dict) or not set(routes) <= set(families):
        raise InputError(f"{source}: field 'routes': expected an object of family -> routes for families of "
                         f"'families', got {str(routes)[:80]}")
    return manifest


def candidate_folder(family: str, kind: str) -> str:
    """The sub-folder of a routed family's candidate of ``kind``."""
    return f"{family}.{kind}"


def named_folders(root: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """family (or ``_fallback``, or a routed family's candidate ``<family>.<kind>``) -> the folder the manifest names
    for it, refused if it leaves the bundle."""
    source = Path(root) / "manifest.json"
    named = {family: inside(root, sub, source) for family, sub in manifest["families"].items()}
    for family, models in manifest.get("candidates", {}).items():
        named |= {candidate_folder(family, kind): inside(root, sub, source) for kind, sub in models.items()}
    if manifest.get("fallback"):
        named["_fallback"] = inside(root, manifest["fallback"], source)
    return named


#: files a bundle may ship next to its manifest, covered by its SHA256SUMS when present (the convolution-family
#: table of :mod:`estimator.conv_families`, the power floor of :mod:`estimator.power_floor`)
BUNDLE_EXTRAS = ("conv_families.json", "power_floor.json")


def bundle_files(root: Path, manifest: dict[str, Any]) -> list[Path]:
    """What a bundle's SHA256SUMS covers: the manifest, the :data:`BUNDLE_EXTRAS` it ships and every file of every
    folder it names."""
    files = {Path(root) / "manifest.json", *(Path(root) / e for e in BUNDLE_EXTRAS if (Path(root) / e).is_file())}
    for folder in named_folders(root, manifest).values():
        files.update(folder_files(folder))
    return sorted(files)


def seal_bundle(root: Path) -> Path:
    """Write the SHA256SUMS of every folder a bundle's manifest names, then the bundle's own (what the exporter
    does after writing a bundle, and ``python -m stepcast.estimator.bundle_checksums`` for a bundle written before)."""
    root = Path(root)
    manifest = check_manifest(read_json(root / "manifest.json"), root / "manifest.json")
    for folder in named_folders(root, manifest).values():
        if not (folder / "meta.json").is_file():
            raise InputError(f"{folder}: no meta.json (named by {root / 'manifest.json'})")
        seal_estimator_dir(folder)
    return write_checksums(root, bundle_files(root, manifest))


def verified_manifest(root: Path) -> dict[str, Any]:
    """A bundle's manifest, after checking that the manifest itself, and then every file of every folder it names,
    match the bundle's SHA256SUMS (nothing is parsed before its checksum is)."""
    root = Path(root)
    checksums = Checksums.read(root)
    checksums.check(root / "manifest.json")
    manifest = check_manifest(read_json(root / "manifest.json"), root / "manifest.json")
    checksums.check_all(bundle_files(root, manifest))
    return manifest


def is_bundle(path: Path) -> bool:
    return (Path(path) / "manifest.json").is_file()


def is_estimator_dir(path: Path) -> bool:
    return (Path(path) / "meta.json").is_file()
