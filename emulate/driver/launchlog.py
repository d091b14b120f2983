"""Reading the emulated driver's per-process launch log (``$STEPCAST_DRIVER_LOG.<pid>.jsonl``, one JSON object a
line: ``event`` is ``launch``, ``unsupported`` (an entry point answered NOT_SUPPORTED, once per name),
``export_table`` or ``proc_missing``)."""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class Launch:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    cluster: tuple[int, int, int]
    stream: int
    device: int = 0
    via: str = ""

    def __post_init__(self) -> None:
        for name in ("grid", "block", "cluster"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def read_events(log: Path, start: int = 0) -> list[dict]:
    """Every record of one log from byte offset ``start`` (a missing log has none)."""
    if not log.exists():
        return []
    with open(log, "rb") as f:
        f.seek(start)
        return [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]


def read_launches(log: Path, start: int = 0) -> list[Launch]:
    """The launch records (their capture fields, :mod:`emulate.driver.tracelog`'s, left out)."""
    keep = {f.name for f in fields(Launch)}
    return [Launch(**{k: v for k, v in e.items() if k in keep}) for e in read_events(log, start)
            if e.get("event") == "launch"]
