"""Where measured rows go: shards written as they are measured, merged into ``<family>.parquet`` at the end.

A run appends rows to small shard files under ``<dataset>/.shards/<family>/`` (each written to a temporary file and
renamed into place), so a crash or Ctrl-C loses at most the rows not yet flushed. :meth:`FamilyStore.consolidate`
merges the shards into the family file (again through a temporary file and a rename) and only then deletes them;
a point measured twice keeps its first row. A lock on the folder serialises consolidations (multirun jobs).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from stepcast.profiling.schema import columns, read_family, write_family

SHARDS_DIR = ".shards"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on a folder (flock on its descriptor: no lock file is left behind)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain Python values with None for missing ones (pandas NaN/NA -> None, floats back to ints)."""
    records = frame.astype(object).where(frame.notna(), None).to_dict("records")
    for row in records:
        if isinstance(row.get("threads"), float):
            row["threads"] = int(row["threads"])
    return records


class FamilyStore:
    """The dataset file of one family under one hardware folder, plus its pending shards."""

    def __init__(self, root: Path, family: str) -> None:
        self.root = Path(root)
        self.family = family
        self.path = self.root / f"{family}.parquet"
        self.shard_dir = self.root / SHARDS_DIR / family

    def shards(self) -> list[Path]:
        return sorted(self.shard_dir.glob("*.parquet")) if self.shard_dir.is_dir() else []

    def read(self) -> pd.DataFrame:
        """Every row measured so far: the family file and any pending shards (validated)."""
        frames = [read_family(p, self.family) for p in ([self.path] if self.path.exists() else []) + self.shards()]
        if not frames:
            return pd.DataFrame(columns=list(columns(self.family)))
        merged = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        return merged.drop_duplicates("point_id", keep="first").reset_index(drop=True)

    def done_ids(self) -> set[str]:
        """Point ids already measured, ok or failed (failed points are not retried)."""
        return set(self.read()["point_id"])

    def append(self, rows: list[dict[str, Any]]) -> Path | None:
        """Write ``rows`` as a new shard (validated; temporary file then rename)."""
        if not rows:
            return None
        name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        return write_family(rows, self.family, self.shard_dir / name)

    def consolidate(self) -> int:
        """Merge pending shards into the family file; return its row count."""
        with _locked(self.root):
            shards = self.shards()
            if shards:
                write_family(_records(self.read()), self.family, self.path)
                for shard in shards:
                    shard.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.shard_dir.rmdir()
                self.shard_dir.parent.rmdir()
        return len(read_family(self.path, self.family)) if self.path.exists() else 0


class ShardWriter:
    """Buffers measured rows and flushes them to a shard every ``every`` rows or ``seconds`` seconds."""

    def __init__(self, store: FamilyStore, every: int = 25, seconds: float = 10.0) -> None:
        self.store, self.every, self.seconds = store, max(1, every), seconds
        self.buffer: list[dict[str, Any]] = []
        self._last = time.monotonic()

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= self.every or time.monotonic() - self._last >= self.seconds:
            self.flush()

    def flush(self) -> None:
        self.store.append(self.buffer)
        self.buffer = []
        self._last = time.monotonic()
