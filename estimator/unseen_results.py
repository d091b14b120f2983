"""The unseen protocol's results file (``docs/results/unseen.json``): what was run where, every figure with its
per-seed values, finding a figure, and comparing a new run against the committed one. The protocol that writes it
is a benchmark (``python -m benchmarks.estimator.accuracy --protocol unseen``); training reads it to route a bundle's
families (``stepcast train routes_from=...``, :mod:`estimator.routing`), so its format lives here, in the product.

The file records the commit and whether the tree had uncommitted changes, the shipped bundle's version, the machine
(CPU model, cores, memory), Python's and the training libraries' versions, the protocol's settings, the data's
digests and the figures, one JSON object per line (so a change of figures is a readable diff).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stepcast.profiling.paths import REPO_ROOT

FORMAT = "stepcast-unseen-results"
FORMAT_VERSION = 1
RESULTS = REPO_ROOT / "docs" / "results" / "unseen.json"
#: held_out value of the rows that pool every fold of a split
POOLED = "pooled"
#: a figure moved by less than this (points of mean APE) has not changed: the file rounds to 3 decimals
ROUNDING = 0.01


def git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def machine() -> dict[str, Any]:
    from stepcast.profiling.hardware import cpu_model_name

    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    return {"cpu": cpu_model_name(), "cores": os.cpu_count(), "memory_gib": memory}


def provenance(bundle: Path | None = None) -> dict[str, Any]:
    """Commit (``dirty``: tracked files differed from it, results files aside), bundle version, machine, libraries."""
    from stepcast.estimator.bundle import read_json
    from stepcast.estimator.model_card import trained_with
    from stepcast.estimator.registry import DEFAULT_BUNDLE
    from stepcast.profiling.paths import MODELS_DIR

    root = Path(bundle) if bundle is not None else MODELS_DIR / DEFAULT_BUNDLE
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/results", ":!docs/accuracy.md")
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(changed),
            "bundle": {"path": str(root.relative_to(REPO_ROOT)) if root.is_relative_to(REPO_ROOT) else str(root),
                       "version": read_json(root / "manifest.json").get("version")},
            "machine": machine(), "libraries": trained_with(),
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def dumps(doc: dict[str, Any]) -> str:
    """The results as text: the header indented, then one figure per line."""
    head = {k: v for k, v in doc.items() if k != "figures"}
    text = json.dumps(head, indent=2, sort_keys=True)
    lines = [json.dumps(f, sort_keys=True) for f in doc.get("figures", [])]
    return text[:-2] + ',\n  "figures": [\n    ' + ",\n    ".join(lines) + "\n  ]\n}\n"


def complete(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as the file holds it: its format first, the figures in a stable order."""
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION} | doc
    return doc | {"figures": sorted(doc.get("figures", []), key=figure_key)}


def write(path: Path, doc: dict[str, Any]) -> None:
    from stepcast.profiling.atomic import write_bytes_atomic

    write_bytes_atomic(Path(path), dumps(complete(doc)).encode())


def parse(text: str, source: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{source}: field 'format': expected '{FORMAT}'")
    if not isinstance(doc.get("figures"), list):
        raise ValueError(f"{source}: field 'figures': expected a list of figures")
    return doc


def read(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        return parse(path.read_text(), str(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing (expected the unseen protocol's results: "
                                "python -m benchmarks.estimator.accuracy --protocol unseen)") from None


def committed(path: Path) -> dict[str, Any] | None:
    """The last committed version of ``path`` (None where git has none)."""
    path = Path(path).resolve()
    if not path.is_relative_to(REPO_ROOT):
        return None
    text = git("show", f"HEAD:{path.relative_to(REPO_ROOT).as_posix()}")
    return parse(text, f"HEAD:{path.relative_to(REPO_ROOT)}") if text else None


# -- finding figures -----------------------------------------------------------------------------------------------
KEY = ("split", "held_out", "family", "dtype", "source", "model")


def figure_key(f: dict[str, Any]) -> tuple:
    return tuple(str(f[k]) for k in KEY)


def frame(doc: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(doc["figures"])


def figure(figures: pd.DataFrame, split: str, held_out: str, family: str, model: str, dtype: str | None = None,
           source: str | None = None) -> pd.Series | None:
    """The figure over the held-out rows of ``dtype`` and ``source`` (None: any), whichever breakdown row holds
    exactly those rows (the file leaves out a breakdown equal to a coarser one); None where there are none."""
    rows = figures[(figures["split"] == split) & (figures["held_out"] == held_out) & (figures["family"] == family)
                   & (figures["model"] == model)]
    if dtype is not None and len(rows):
        rows = rows[np.array([list(d) == [dtype] for d in rows["dtypes"]], dtype=bool)]
    if source is not None and len(rows):
        rows = rows[np.array([list(s) == [source] for s in rows["sources"]], dtype=bool)]
    return rows.loc[rows["n"].idxmax()] if len(rows) else None


def spread(seeds: list[float]) -> float:
    """The range of a figure over the seeds (0 for a deterministic model)."""
    return float(np.max(seeds) - np.min(seeds)) if len(seeds) else 0.0


# -- comparing -----------------------------------------------------------------------------------------------------
def compare(new: dict[str, Any], old: dict[str, Any]) -> pd.DataFrame:
    """One row per figure in both: old and new mean APE, the change, the larger of the two seed spreads, and
    ``beyond``: whether the change exceeds that spread (and the file's rounding)."""
    a, b = frame(old), frame(new)
    if not len(a) or not len(b):
        return pd.DataFrame(columns=[*KEY, "old", "new", "change", "spread", "beyond"])
    both = b.merge(a, on=list(KEY), suffixes=("", "_old"))
    both["spread"] = [max(spread(s), spread(t)) for s, t in zip(both["seeds"], both["seeds_old"])]
    both["change"] = both["mean_ape"] - both["mean_ape_old"]
    both["beyond"] = (both["change"].abs() > both["spread"]) & (both["change"].abs() > ROUNDING)
    return both.rename(columns={"mean_ape": "new", "mean_ape_old": "old"})[
        [*KEY, "n", "old", "new", "change", "spread", "beyond"]]
