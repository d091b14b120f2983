"""Benchmark results cached per (key, git HEAD) under ``cache_root()/e2e/``: an interrupted benchmark resumes, and a
new commit re-runs everything. The end-to-end, torch-matrix and no-sync checks keep their emulations' results here."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import REPO_ROOT, cache_root


def git_head() -> str:
    """The commit the results belong to ('unknown' outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def tree_digest(paths: tuple[str, ...], exclude: tuple[str, ...] = (), root: Path = REPO_ROOT) -> str:
    """sha256 of the committed files under ``paths`` (git's blob ids at HEAD of the checkout at ``root``), less those
    under or named by ``exclude`` (folders or files): what a cached product of that code depends on ('unknown'
    outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-tree", "-r", "HEAD", "--", *paths], cwd=root, capture_output=True,
                             text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"

    def left_out(path: str) -> bool:
        return any(path == prefix.rstrip("/") or path.startswith(prefix.rstrip("/") + "/") for prefix in exclude)

    lines = [line for line in out.stdout.splitlines() if not left_out(line.split("\t", 1)[-1])]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def cache_path(key: str, head: str | None = None) -> Path:
    """Where the result of ``key`` at commit ``head`` is cached."""
    safe = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in key)
    return cache_root() / "e2e" / (head or git_head())[:12] / f"{safe}.json"


def cached(key: str, compute, fresh: bool = False) -> dict[str, Any]:
    """``compute()``'s result for ``key`` at the current commit, from the cache when present (unless ``fresh``).
    Failures are cached too: at one commit they fail the same way, and a re-run should not pay for them again."""
    path = cache_path(key)
    if path.is_file() and not fresh:
        return json.loads(path.read_text())
    result = compute()
    write_json_atomic(path, result)
    return result
