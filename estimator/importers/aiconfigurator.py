"""What the three aiconfigurator importers share: where NVIDIA's per-op tables lie, which catalog device each
folder is, how a table is read, and how repeated measurements of one kernel are merged.

Layout (``aiconfigurator/SOURCE.md`` in the shared data): ``aiconfigurator/aic-core/src/aiconfigurator_core/systems/
data/<gpu>/<table kind>/<framework>/<version>/<table>.parquet`` (``gemm``, ``attention``, ``comm``); a version folder
holding only ``reuse.yaml`` points at another version's tables and adds no measurement, so globbing parquet files
reads every measurement once. Latency is in milliseconds in every table.

Device: the table's ``device`` column (the vendor name, e.g. ``NVIDIA H100 80GB HBM3``) is looked up among the
catalog's aliases (``conf/hardware/*.yaml``); a table without that column (the H100/H200 NCCL 2.23 tables) takes the
folder name (``h100_sxm`` -> ``H100 SXM``). GPUs the catalog does not describe (the RTX PRO 6000 Server Edition
and the B60 at this commit) are skipped with a log line: a row must name a catalog device, and one yaml in
``conf/hardware/`` brings them in (as ``b300.yaml``, ``gb200-nvl72.yaml`` and ``gb300-nvl72.yaml`` did).

Merging: the same kernel shape is timed by several framework releases (vLLM, SGLang, TensorRT-LLM, each a few
versions) that call the same library kernel; the importers keep one row per (device, backend, shape), the median
over those measurements, so no shape weighs more in training for having been re-measured. Before that, a table
whose timings disagree with the other releases' of the same kernels by more than :data:`OUTLIER_FACTOR` is left
out with a warning (:func:`outlier_tables`): at this commit the H100's SGLang 0.5.6.post2 fused-MoE table reads
10.0x its three sibling releases on every shared shape (a unit slip), and the median over four releases does not
remove a table that is the only one to time some shapes.
"""
from __future__ import annotations

import logging
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.importers.common import DataImportError
from stepcast.profiling.hardware import UnknownHardwareError, lookup

log = logging.getLogger(__name__)

SOURCE = "aiconfigurator"
DATA_DIR = Path("aiconfigurator/aic-core/src/aiconfigurator_core/systems/data")
#: held-out splits hold out whole shape sets: each (n, k) pair or head configuration falls in one of this many groups
GROUP_SETS = 5


def tables(root: Path, kind: str, name: str) -> list[Path]:
    """Every ``<name>`` parquet of one table kind (``gemm``, ``attention``, ``comm``) under ``root``."""
    return sorted((Path(root) / DATA_DIR).glob(f"*/{kind}/**/{name}"))


def gpu_folder(path: Path, root: Path) -> str:
    return Path(path).relative_to(Path(root) / DATA_DIR).parts[0]


def read_table(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    """One parquet table, checked for the columns the importer relies on (one-line error naming file and column)."""
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise DataImportError(f"{path}: unreadable parquet ({exc.__class__.__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    for column in required:
        if column not in frame.columns:
            raise DataImportError(f"{path}: column '{column}' is missing")
    return frame


def catalog_device(frame: pd.DataFrame, path: Path, root: Path) -> str | None:
    """The catalog id of the GPU a table measured, or None (logged) when the catalog does not describe it."""
    names = pd.unique(frame["device"].astype(str)) if "device" in frame.columns else []
    if len(names) > 1:
        raise DataImportError(f"{path}: column 'device': several devices in one table ({', '.join(names[:3])})")
    name = str(names[0]) if len(names) else gpu_folder(path, root).replace("_", " ")
    try:
        return lookup(name).id
    except UnknownHardwareError:
        log.info("aiconfigurator: %s: device '%s' is not in the hardware catalog; skipped", path, name)
        return None


def catalog_tables(files: list[Path], root: Path, required: tuple[str, ...]):
    """(path, table, catalog id) of each file whose GPU the hardware catalog knows (the others are logged and
    skipped by :func:`catalog_device`)."""
    for path in files:
        raw = read_table(path, required)
        hardware = catalog_device(raw, path, root)
        if hardware is not None:
            yield path, raw, hardware


def median_rows(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per distinct ``keys``: the median ``latency`` (ms) of its measurements. With a ``table`` column (the
    file each measurement came from), the tables :func:`outlier_tables` finds are left out first, each with a
    warning naming it."""
    if "table" in frame.columns:
        frame = without_outlier_tables(frame, keys)
    return frame.groupby(keys, sort=True, dropna=False)["latency"].median().reset_index()


def without_outlier_tables(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``frame`` (measurements with their ``table``) less the tables :func:`outlier_tables` finds, each left out
    with a warning naming it."""
    dropped = outlier_tables(table_medians(frame, keys), keys)
    for table, (factor, shared) in dropped.items():
        log.warning("aiconfigurator: %s: timings %.3gx the other releases' for the same kernels (median over "
                    "%d shared); table left out", table, factor, shared)
    return frame[~frame["table"].isin(list(dropped))] if dropped else frame


def table_medians(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per kernel (``keys``) and table timing it: the table's median ``latency`` there (positive ones
    only), sorted by kernel, so that each kernel's tables are consecutive."""
    per = frame.groupby([*keys, "table"], sort=True, dropna=False, observed=True)["latency"].median()
    return per[per > 0].reset_index()


def release_disagreement(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """How far one release's timing of a kernel lies from the others': per kernel (``keys``) that two or more tables
    (releases) time, each table's time against the median of the other tables' (percent, column ``ape``; the
    table's own time is its median where it times a kernel twice). ``frame``: measurements whose outlier tables
    are left out already (:func:`without_outlier_tables`).

    A model fitted on the median over releases is scored against that median, whose own noise this measures: where
    releases of one framework disagree by 20 % about the same kernel on the same GPU, no model of the shape alone
    can be much closer to their median than a fraction of that."""
    per = table_medians(frame, keys)
    size = per.groupby(keys, sort=False, dropna=False)["latency"].transform("size").to_numpy()
    per = per.assign(ape=np.nan)
    for n in np.unique(size[size >= 2]):
        rows = np.flatnonzero(size == n)                       # whole kernels, their n tables consecutive (sorted)
        times = per["latency"].to_numpy()[rows].reshape(-1, n)
        others = np.stack([np.median(np.delete(times, i, axis=1), axis=1) for i in range(n)], axis=1)
        per.loc[per.index[rows], "ape"] = (np.abs(times / others - 1.0) * 100.0).ravel()
    return per[per["ape"].notna()].reset_index(drop=True)


#: a table whose timings are more than this factor off the other releases' for the same kernels (the median over
#: the kernels it shares with them) is left out: a library change between releases moved a table by at most 1.7x at
#: this commit (the H100 vLLM 0.14.0 prefill attention against its siblings), a unit slip moves it by 10x or 1000x
OUTLIER_FACTOR = 4.0
#: a table is judged only on kernels that at least this many tables time (so that their median is the others', not
#: its own) and only when it shares at least MIN_SHARED of them
MIN_TABLES = 3
MIN_SHARED = 50


def outlier_tables(per: pd.DataFrame, keys: list[str]) -> dict[str, tuple[float, int]]:
    """{table: (its median factor against the consensus, kernels it shares)} of the tables to leave out, from each
    table's time of each kernel (``per``: :func:`table_medians`, with ``hardware``). The
    consensus of a kernel is the median over every table that times it, once at least :data:`MIN_TABLES` do: with
    three or more, one table's slip cannot move it. Tables are left out only as a minority of a device's judged
    tables: where half of them or more stray, the releases disagree and none is called wrong (logged)."""
    grouped = per.groupby(keys, sort=False, dropna=False)["latency"]
    per = per.assign(tables=grouped.transform("size"), consensus=grouped.transform("median"))
    per = per[per["tables"] >= MIN_TABLES]
    if per.empty:
        return {}
    log2 = np.log2(per["latency"] / per["consensus"])
    stats = log2.groupby(per["table"], observed=True).agg(["median", "size"])
    stats = stats[stats["size"] >= MIN_SHARED]
    stats["device"] = per.groupby("table", observed=True)["hardware"].first().reindex(stats.index)
    stats["stray"] = stats["median"].abs() > np.log2(OUTLIER_FACTOR)
    out = {}
    for device, tables in stats.groupby("device"):
        stray = tables[tables["stray"]]
        if 2 * len(stray) >= len(tables):
            if len(stray):
                log.warning("aiconfigurator: %s: %d of %d releases' tables differ by more than %gx from the "
                            "others; all kept", device, len(stray), len(tables), OUTLIER_FACTOR)
            continue
        out.update({str(t): (float(2.0 ** row["median"]), int(row["size"])) for t, row in stray.iterrows()})
    return out


def shape_set(*columns: np.ndarray) -> np.ndarray:
    """A stable group number in [0, GROUP_SETS) per row from integer shape columns (CRC-32 of their values), the same
    on every device and every run, so a held-out set is held out everywhere."""
    keys = ["x".join(str(int(v)) for v in values) for values in zip(*columns)]
    return np.fromiter((zlib.crc32(k.encode()) % GROUP_SETS for k in keys), dtype=np.int64, count=len(keys))
