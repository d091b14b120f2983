"""sha256 checksums of the files of an estimator folder, written on export and verified before anything is parsed.

A folder that ``estimator.load`` reads (a bundle, or a single estimator folder) carries ``SHA256SUMS`` in the format
of coreutils' ``sha256sum`` (``<64 hex digits>  <path relative to the folder>`` per line), so
``sha256sum -c SHA256SUMS`` checks it by hand as well. Why before parsing: XGBoost and safetensors are native code,
and a model file with a few changed bytes can crash the process (a segfault, no message) or load silently and predict
nonsense; a file that fails its checksum must never reach them.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Iterable

from stepcast.profiling.atomic import write_bytes_atomic
from stepcast.errors import InputError

CHECKSUMS_FILE = "SHA256SUMS"
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


class BundleIntegrityError(InputError):
    """A bundle file that is missing, unlisted, changed or outside its bundle; the message is one line naming it."""


def inside(root: Path, relative: str, named_in: Path) -> Path:
    """``root / relative``, refused unless it stays inside ``root``: no absolute path, no ``..`` that climbs out, no
    symbolic link that leads out (``named_in`` is the file that named the path, for the message)."""
    root = Path(root)
    pure = PurePosixPath(str(relative))
    if not str(relative) or pure.is_absolute() or Path(str(relative)).is_absolute():
        raise BundleIntegrityError(f"{named_in}: path {relative!r} is absolute (expected a path inside {root})")
    path = root / pure
    resolved_root = root.resolve()
    if not path.resolve().is_relative_to(resolved_root):
        raise BundleIntegrityError(f"{named_in}: path {relative!r} leads outside the bundle {root}")
    return path


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def folder_files(folder: Path) -> list[Path]:
    """Every regular, non-hidden file under ``folder`` except its own checksums file (hidden names are the atomic
    writers' temporary files)."""
    folder = Path(folder)
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
                  and p != folder / CHECKSUMS_FILE)


def write_checksums(folder: Path, files: Iterable[Path]) -> Path:
    """Write ``folder/SHA256SUMS`` listing ``files`` (each inside ``folder``), sorted by path."""
    folder = Path(folder)
    relative = sorted(Path(f).relative_to(folder).as_posix() for f in files)
    lines = [f"{sha256_of(folder / name)}  {name}\n" for name in relative]
    target = folder / CHECKSUMS_FILE
    write_bytes_atomic(target, "".join(lines).encode())
    return target


class Checksums:
    """The checksums listed in one folder's SHA256SUMS."""

    def __init__(self, folder: Path, digests: dict[str, str]) -> None:
        self.folder, self.digests = Path(folder), digests
        self.source = self.folder / CHECKSUMS_FILE

    @classmethod
    def read(cls, folder: Path) -> "Checksums":
        source = Path(folder) / CHECKSUMS_FILE
        try:
            text = source.read_text()
        except FileNotFoundError:
            raise BundleIntegrityError(
                f"{source}: missing, so the files of {folder} cannot be verified (expected sha256 checksums written "
                f"on export; for a bundle you trust, add them with "
                f"python -m stepcast.estimator.bundle_checksums {folder})"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise BundleIntegrityError(f"{source}: not readable ({exc.__class__.__name__})") from None
        digests: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            match = _LINE.match(line)
            if not match:
                raise BundleIntegrityError(f"{source}:{number}: expected '<sha256 hex>  <path>', got {line[:60]!r}")
            inside(folder, match.group(2), source)
            digests[PurePosixPath(match.group(2)).as_posix()] = match.group(1)
        return cls(folder, digests)

    def check(self, path: Path) -> None:
        """Raise unless ``path`` is listed and its content matches."""
        path = Path(path)
        try:
            relative = path.relative_to(self.folder).as_posix()
        except ValueError:
            raise BundleIntegrityError(f"{path}: outside the bundle {self.folder}") from None
        if relative not in self.digests:
            raise BundleIntegrityError(f"{path}: not listed in {self.source} (a file added after export)")
        self._compare(relative)

    def check_all(self, required: Iterable[Path] = ()) -> None:
        """Every listed file must exist and match; every file in ``required`` must be listed."""
        for path in required:
            relative = Path(path).relative_to(self.folder).as_posix()
            if relative not in self.digests:
                raise BundleIntegrityError(f"{path}: not listed in {self.source} (a file added after export)")
        for relative in sorted(self.digests):
            self._compare(relative)

    def _compare(self, relative: str) -> None:
        path = inside(self.folder, relative, self.source)
        try:
            actual = sha256_of(path)
        except FileNotFoundError:
            raise BundleIntegrityError(f"{path}: missing (listed in {self.source})") from None
        except OSError as exc:
            raise BundleIntegrityError(f"{path}: not readable ({exc.strerror or exc.__class__.__name__})") from None
        if actual != self.digests[relative]:
            raise BundleIntegrityError(f"{path}: sha256 does not match {self.source} (the file is corrupt or was "
                                       "changed after export; re-export the bundle or restore the file)")
