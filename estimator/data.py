"""All kernel measurements as one training frame: ``load_measurements``.

Sources (the ``source`` column): ``profiler`` (this project's ``datasets/``), ``vidur``, ``neusight``, ``kineto``,
``llmcompass``, ``aiconfigurator`` (the public data under ``profiling.paths.shared_data_root()``); see
``estimator.importers``.

Parsing the CSVs and traces takes about a minute, so each source's rows are cached as parquet under the cache folder
(setting ``STEPCAST_CACHE_DIR``, default ``$XDG_CACHE_HOME/stepcast`` or ``~/.cache/stepcast``), keyed by the
SHA-256 of every input file's bytes and of the importer code: new data or a changed importer re-parses, anything
else reads the cache. Cache files are written to a temporary name and renamed, so an interrupted run leaves none
half-written, and a run resumes source by source.
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from stepcast.estimator.importers import IMPORTERS, SOURCES
from stepcast.estimator.importers.common import DataImportError, TRAINING_COLUMNS, empty_frame
from stepcast.profiling.atomic import atomic_path
from stepcast.profiling.families import FAMILIES
from stepcast.profiling.paths import REPO_ROOT, cache_root, datasets_dir as default_datasets_dir, shared_data_root
from stepcast.errors import InputError

log = logging.getLogger(__name__)

#: code whose change must invalidate cached rows
CODE_FILES: tuple[str, ...] = ("estimator/importers/*.py", "profiling/kineto.py", "profiling/classify.py",
                               "profiling/families.py", "profiling/hardware.py", "profiling/schema.py",
                               "conf/hardware/*.yaml")


def load_measurements(families: Iterable[str] | None = None, sources: Iterable[str] | None = None,
                      root: Path | None = None, *, datasets_dir: Path | None = None, cache_dir: Path | None = None,
                      refresh: bool = False) -> pd.DataFrame:
    """Training rows of the given families (default all) from the given sources (default all).

    ``root``: the shared data folder (default ``shared_data_root()``); ``datasets_dir``: the profiler's datasets
    (default ``datasets/``); ``cache_dir``: where parsed sources are cached (default ``cache_root()/measurements``);
    ``refresh``: re-parse even when a cache entry matches. A source whose files are absent contributes no rows.
    """
    families = _checked(families, FAMILIES, "family")
    sources = _checked(sources, SOURCES, "source")
    root = Path(root) if root is not None else shared_data_root()
    datasets_dir = Path(datasets_dir) if datasets_dir is not None else default_datasets_dir()
    cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "measurements"
    frames = []
    for source in tqdm(sources, desc="measurements", unit="source", disable=None, leave=False):
        source_root = datasets_dir if source == "profiler" else root
        frame = _load_source(source, source_root, cache_dir, refresh)
        if len(frame):
            frames.append(frame[frame["family"].isin(families)])
    if not frames:
        log.warning("no measurements found (shared data %s, datasets %s)", root, datasets_dir)
        return empty_frame()
    merged = pd.concat(frames, ignore_index=True)
    extras = [c for c in merged.columns if c not in TRAINING_COLUMNS]
    return merged[list(TRAINING_COLUMNS) + extras]


def _checked(values: Iterable[str] | None, allowed: Iterable[str], what: str) -> list[str]:
    allowed = list(allowed)
    if values is None:
        return allowed
    values = [values] if isinstance(values, str) else list(values)
    for value in values:
        if value not in allowed:
            raise InputError(f"unknown {what} '{value}': expected one of {', '.join(allowed)}")
    return values


def source_files(source: str, root: Path) -> list[Path]:
    return sorted({p for module in IMPORTERS[source] for p in module.input_files(root)})


def source_digest(source: str, root: Path) -> str:
    """SHA-256 over the importer code and every input file (path relative to ``root`` and bytes)."""
    digest = hashlib.sha256(source.encode())
    code = sorted(p for pattern in CODE_FILES for p in REPO_ROOT.glob(pattern))
    for path in code + source_files(source, root):
        digest.update(str(path.relative_to(REPO_ROOT if path in code else root)).encode())
        digest.update(_file_digest(path))
    return digest.hexdigest()


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def _load_source(source: str, root: Path, cache_dir: Path, refresh: bool) -> pd.DataFrame:
    if not source_files(source, root):
        log.info("source %s: no input files under %s", source, root)
        return empty_frame()
    path = cache_dir / f"{source}-{source_digest(source, root)[:20]}.parquet"
    if path.is_file() and not refresh:
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError) as exc:  # a damaged cache file is rebuilt, never trusted
            log.warning("cache %s unreadable (%s); rebuilding", path, exc.__class__.__name__)
    frames = [module.load(root) for module in IMPORTERS[source]]
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else empty_frame()
    _write_atomic(frame, path)
    for stale in cache_dir.glob(f"{source}-*.parquet"):
        if stale != path:
            stale.unlink(missing_ok=True)
    return pd.read_parquet(path)  # the same types whether parsed now or read from the cache


def _write_atomic(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


__all__ = ["load_measurements", "source_digest", "DataImportError"]
