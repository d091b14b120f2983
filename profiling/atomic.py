"""Writing files so that nothing half-written is ever left behind, even on Ctrl-C: every writer of the project
goes through a temporary file in the destination folder, renamed into place only when complete."""
from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Iterator, TextIO


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path in the same folder; on success it replaces ``path``, on any failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """``with atomic_text(p) as f: f.write(...)``: ``p`` appears only when the block succeeds."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        yield f


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json_atomic(path: Path, obj: Any, indent: int | None = 2, sort_keys: bool = False) -> None:
    """JSON (numpy values and paths converted); ``sort_keys`` makes equal objects byte-identical files."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=_jsonable) + "\n"
    write_bytes_atomic(Path(path), text.encode())


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")
