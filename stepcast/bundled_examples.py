"""``stepcast examples [DIR]``: copy the example scripts that ship with stepcast into a folder of the user's.

Installed from a wheel, the examples live inside the package (``stepcast.examples``); the README's commands name
them as ``examples/<script>.py``, so one command puts them where those commands expect them, and the user edits
their own copies. Files already there are never overwritten (the user's edits win): the command says which."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

EPILOG = """\
example (an empty folder, stepcast installed from a wheel):
  stepcast examples && stepcast run -- examples/gpt.py --steps 6"""


def shipped_examples() -> list[Path]:
    """Every example script shipped, relative to the shipped examples folder."""
    from stepcast.profiling.paths import EXAMPLES_DIR

    return sorted(p.relative_to(EXAMPLES_DIR) for p in EXAMPLES_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def copy_examples(target: Path) -> tuple[list[Path], list[Path]]:
    """Copy each shipped example under ``target`` (folders made as needed); returns (copied, kept): a file that
    already exists is kept as it is."""
    from stepcast.profiling.paths import EXAMPLES_DIR

    copied, kept = [], []
    for relative in shipped_examples():
        destination = target / relative
        if destination.exists():
            kept.append(destination)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        tmp = destination.with_name(f".{destination.name}.tmp")
        shutil.copyfile(EXAMPLES_DIR / relative, tmp)
        tmp.replace(destination)
        copied.append(destination)
    return copied, kept


def run(ns: argparse.Namespace) -> int:
    copied, kept = copy_examples(ns.directory)
    print(f"{len(copied)} example scripts copied to {ns.directory}/", end="")
    print(f" ({len(kept)} already there, kept as they are)" if kept else "", file=sys.stdout)
    return 0


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser("examples", help="copy the example scripts that ship with stepcast into a folder",
                            description=__doc__.splitlines()[0], epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, nargs="?", default=Path("examples"),
                        help="where they go (default ./examples)")
    parser.set_defaults(func=run)
    return parser
