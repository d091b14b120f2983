"""``python -m stepcast.estimator.importers [--source S ...] [--family F ...] [--refresh]``: import (or read from the
cache) every source and print the row counts per source, family and hardware."""
from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from stepcast.estimator.data import load_measurements
from stepcast.profiling.paths import cache_root
from stepcast.estimator.importers import SOURCES
from stepcast.profiling.families import FAMILIES
from stepcast.errors import cli_main


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.estimator.importers", description=__doc__.split("\n")[0])
    parser.add_argument("--source", action="append", choices=SOURCES, help="only this source (repeatable)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="only this family (repeatable)")
    parser.add_argument("--refresh", action="store_true", help="re-parse the inputs even when cached")
    args = parser.parse_args(argv)
    frame = load_measurements(families=args.family, sources=args.source, refresh=args.refresh)
    table = Table(title=f"training rows ({len(frame):,}; cache {cache_root() / 'measurements'})")
    for column in ("source", "family", "hardware", "rows", "median runtime (us)"):
        table.add_column(column, justify="right" if column in ("rows", "median runtime (us)") else "left")
    for (source, family, hardware), rows in frame.groupby(["source", "family", "hardware"]):
        table.add_row(str(source), str(family), str(hardware), f"{len(rows):,}", f"{rows['runtime_us'].median():.1f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
