"""Reading a JSON file the project or its user wrote, with the one-line errors every command gives: the file, and
what it was expected to be. (Writing goes through ``profiling.atomic.write_json_atomic``.)

Only the standard library is imported, as in :mod:`stepcast.errors`, so any package can read with it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepcast.errors import InputError, MissingFileError


def read_json(path: Path | str, expected: str, fields: tuple[str, ...] = ()) -> Any:
    """The parsed file. ``expected`` says what it should be ("an estimator bundle file", "a file written by
    --json"): a missing file is :class:`MissingFileError`, one that is not JSON, or (``fields``) an object without
    one of those fields, :class:`InputError`, each one line naming the file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise MissingFileError(f"{path}: missing (expected {expected})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable ({exc.__class__.__name__}; expected {expected})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg}; expected {expected})") from None
    missing = [f for f in fields if not isinstance(doc, dict) or f not in doc]
    if missing:
        raise InputError(f"{path}: no field '{missing[0]}' (expected {expected})")
    return doc
