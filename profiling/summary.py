"""Print what a dataset folder holds (validating every file on the way): points per family, dtype and status.

    python -m stepcast.profiling.summary datasets/cpu-intel-xeon-2c
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from stepcast.profiling.card import read_card
from stepcast.profiling.families import FAMILIES
from stepcast.profiling.schema import DatasetSchemaError, read_family
from stepcast.profiling.store import SHARDS_DIR, FamilyStore
from stepcast.errors import InputError, cli_main


def summarise(folder: Path) -> pd.DataFrame:
    """One row per (family, dtype): points, ok, failed, fastest and slowest median (us)."""
    frames = [read_family(p) for f in FAMILIES if (p := folder / f"{f}.parquet").exists()]
    if not frames:
        raise DatasetSchemaError(f"{folder}: no <family>.parquet files")
    rows = pd.concat([f[["family", "dtype", "status", "median_us"]] for f in frames], ignore_index=True)
    return rows.groupby(["family", "dtype"], sort=False).agg(
        points=("status", "size"), ok=("status", lambda s: int((s == "ok").sum())),
        failed=("status", lambda s: int((s == "failed").sum())),
        min_median_us=("median_us", "min"), max_median_us=("median_us", "max"),
    ).reset_index()


def pending_shards(folder: Path) -> dict[str, int]:
    """family -> shard files a run wrote but has not merged yet (a run that was killed leaves them)."""
    counts = {f: len(FamilyStore(folder, f).shards()) for f in FAMILIES}
    return {f: n for f, n in counts.items() if n}


def pending_note(pending: dict[str, int]) -> str:
    files = sum(pending.values())
    return (f"{files} shard file{'s' if files > 1 else ''} of measured rows pending under {SHARDS_DIR}/ "
            f"({', '.join(pending)})")


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="datasets/<hardware-id>")
    args = parser.parse_args(argv)
    pending = pending_shards(args.folder)
    if pending and not (args.folder / "card.json").exists():
        raise InputError(f"{args.folder}: {pending_note(pending)}; no card.json yet, so the run was stopped before it "
                      "finished: run the same stepcast profile command again to resume (it measures only the "
                      "missing points, then merges the shards and writes the card; budget_minutes=0 merges without "
                      "measuring more)")
    card = read_card(args.folder / "card.json")
    table_data = summarise(args.folder)
    if pending:
        print(f"stepcast: note: {pending_note(pending)}, not counted below (an interrupted run; run it again to "
              "resume and merge them)", file=sys.stderr)
    fp = card.fingerprint
    size = sum(p.stat().st_size for p in args.folder.glob("*") if p.is_file())
    table = Table(title=f"{card.hardware}: {fp.device_name}, torch {fp.torch}, {card.timing}, "
                        f"updated {card.updated:%Y-%m-%d %H:%M}, {size / 1e6:.2f} MB")
    for column in table_data.columns:
        table.add_column(column, justify="left" if column in ("family", "dtype") else "right")
    for row in table_data.itertuples(index=False):
        table.add_row(*(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row))
    table.add_row("total", "", str(int(table_data["points"].sum())), str(int(table_data["ok"].sum())),
                  str(int(table_data["failed"].sum())), "", "")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
