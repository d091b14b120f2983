"""Which kernel cuBLAS runs for each GEMM row: the recorded launch where a row has one, else cuBLASLt's own heuristic
on a virtual device (``emulate.driver.gemm_choice``), cached by shape, dtype, layout, device and cuBLAS version.

The heuristic asked is the one of the cuBLAS the row's source measured with, where that is known
(:data:`SOURCE_CUBLAS`: its wheel is fetched once with ``--fetch-cublas``), since cuBLAS's kernel choices move between
versions; rows of other sources, and rows without a source (an emulated step), ask the installed wheel's cuBLAS.
A source whose cuBLAS is not fetched here, or cannot run or has no labels of a device, falls back to the installed
wheel's labels, with a warning; the label column says which version answered. cuBLAS 12.1 runs on the emulated Volta,
Ampere and Ada devices; on Hopper its ``cublasLtCreate`` fails until the emulated driver answers its cluster-occupancy
probe for clusters of 18 CTAs (tests/emulate/test_gemm_choice.py).

A row's label is three columns: ``kernel_name`` and ``grid`` ("x,y,z") of the main kernel, and ``kernel_label``
(``recorded`` when the measurement or trace named the kernel, ``cublaslt-<version>`` when the heuristic of that
cuBLASLt version chose it). Rows that cannot be labelled keep both empty, and the kernel-configuration features
read them as missing:

- GPUs whose architecture the wheel's cuBLAS no longer supports (CUDA 13 dropped Maxwell, Pascal and Volta: P100,
  P4, V100; ``cublasLtCreate`` refuses them on the virtual device), and CPUs;
- batched GEMMs without a recorded kernel, and dtypes ``gemm_choice`` does not ask for (TF32, fp8).

Rows without a recorded kernel are asked as ``torch.nn.functional.linear`` lays them out (x (m, k) times W (n, k)
transposed: cuBLAS's T/N problem with m and n swapped), which is what every such source measured (aiconfigurator,
Vidur, LLMCompass) and what an emulated Linear layer runs.

The cache is one parquet file per device (``device_key``: the driver build and the device's answers) and cuBLAS
version under ``<cache>/gemm_labels/`` (see
``profiling.paths.cache_root``; fetched cuBLAS libraries live under ``<cache>/cublas/<version>/``), written to a
temporary name and renamed after each chunk, so an interrupted labelling resumes where it stopped. Labelling costs
about 2.5 ms per new shape on one core (one child process per chunk of shapes).

    python -m stepcast.estimator.kernel_labels --fetch-cublas 12.1.3.1 [--wheel FILE.whl]   # once: the cuBLAS Vidur ran
    python -m stepcast.estimator.kernel_labels [--sources aiconfigurator,vidur] [--hardware h100-sxm,...]   # fill the
    cache python -m stepcast.estimator.kernel_labels --sources neusight,kineto --drift   # recorded kernels vs today's
    heuristic

How far the cuBLAS version moves labels (``--drift``, cuBLAS wheel 13.1.1.3 against the kernels NeuSight recorded
with its older cuBLAS, fp32 plain GEMMs): the same architecture path on 99.9 % of the A100 PCIe and T4 rows, the
same path and output tile on 59.9 % (A100 PCIe, 6,533 rows) and 73.9 % (T4, 6,534 rows); on the 96 A100-SXM
profiler-trace GEMMs (HTA, fp32) 93.8 % and 62.5 %. So a label names the kind of kernel well across versions, and
its tile about two times in three.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import logging
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from stepcast.estimator.frames import Kernels, as_frame, by_code, factorize
from stepcast.profiling.atomic import atomic_path
from stepcast.profiling.paths import cache_root
from stepcast.errors import InputError, MissingFileError, UnavailableError, cli_main

log = logging.getLogger(__name__)

#: dtypes the heuristic is asked about (emulate.driver.gemm_choice.DTYPES)
LABEL_DTYPES = ("bf16", "fp16", "fp32")
#: compute capabilities the wheel's cuBLAS (CUDA 13) supports; older GPUs cannot be labelled, only recorded
MIN_COMPUTE_CAPABILITY = (7, 5)
#: shapes per child process (a child's set-up costs ~0.5 s; its launch log grows with every shape)
CHUNK = 2000
KEY = ["m", "n", "k", "dtype"]
LABEL_COLUMNS = ("kernel_name", "grid", "kernel_label")

#: the cuBLAS version each source measured with, where the source's own files say so; other sources: the wheel's
SOURCE_CUBLAS = {
    # Vidur's profiles (2024) were taken in sarathi-serve's environment (vidur/profiling/README.md: "keep the
    # sarathi-serve/env virtual environment activated"), whose requirements.txt pins torch == 2.3; torch 2.1-2.3's
    # PyPI wheels (CUDA 12.1) pin nvidia-cublas-cu12==12.1.3.1.
    "vidur": "12.1.3.1",
}
#: pip distribution and libcublasLt inside the wheel, by cuBLAS major version
CUBLAS_WHEELS = {"12": ("nvidia-cublas-cu12", "nvidia/cublas/lib/libcublasLt.so.12")}


class CublasMissingError(MissingFileError):
    """A source's cuBLAS has not been fetched
    (``python -m stepcast.estimator.kernel_labels --fetch-cublas VERSION``)."""


@cache
def cublas_wheel_version() -> str:
    """The installed cuBLAS wheel's version: the part of the cache key that moves the heuristic's choices."""
    try:
        return importlib.metadata.version("nvidia-cublas")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@cache
def can_label(hardware: str) -> bool:
    """Whether the wheel's cuBLASLt runs on a virtual ``hardware`` (a GPU of compute capability >= 7.5)."""
    from stepcast.profiling.hardware import UnknownHardwareError, lookup

    try:
        spec = lookup(hardware)
    except (UnknownHardwareError, KeyError):
        return False
    return spec.kind == "gpu" and spec.compute_capability is not None \
        and tuple(spec.compute_capability) >= MIN_COMPUTE_CAPABILITY


def cublas_home(version: str) -> Path:
    """Where a fetched cuBLAS version's libcublasLt lives."""
    return cache_root() / "cublas" / version


def cublaslt_library(version: str | None) -> Path | None:
    """The libcublasLt to ask for ``version`` (None: the installed wheel's, which ``gemm_choice`` finds itself);
    CublasMissingError with the command that fetches it when it is not here."""
    if version is None or version == cublas_wheel_version():
        return None
    major = version.split(".")[0]
    if major not in CUBLAS_WHEELS:
        raise CublasMissingError(f"cuBLAS {version}: no wheel known for major version {major} (CUBLAS_WHEELS)")
    path = cublas_home(version) / Path(CUBLAS_WHEELS[major][1]).name
    if not path.is_file():
        raise CublasMissingError(f"cuBLAS {version} not found at {path}: "
                                 f"python -m stepcast.estimator.kernel_labels --fetch-cublas {version}")
    return path


def fetch_cublas(version: str, wheel: Path | None = None) -> Path:
    """Unpack ``version``'s libcublasLt from ``wheel`` (default: ``pip download`` of that version) into
    ``cublas_home(version)``; returns the library's path."""
    major = version.split(".")[0]
    if major not in CUBLAS_WHEELS:
        raise InputError(f"--fetch-cublas {version}: no wheel known for major version {major} (CUBLAS_WHEELS)")
    dist, member = CUBLAS_WHEELS[major]
    with tempfile.TemporaryDirectory(prefix="stepcast-cublas-") as tmp:
        if wheel is None:
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", f"{dist}=={version}", "-d", tmp]
            run = subprocess.run(pip, capture_output=True, text=True)
            found = sorted(Path(tmp).glob("*.whl"))
            if run.returncode != 0 or not found:
                tail = (run.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise UnavailableError(f"pip download {dist}=={version} failed: {tail}")
            wheel = found[0]
        out = cublas_home(version) / Path(member).name
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
                out.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(out) as tmp_out, tmp_out.open("wb") as dst:
                    while chunk := src.read(1 << 24):
                        dst.write(chunk)
        except (KeyError, zipfile.BadZipFile, OSError) as exc:
            raise InputError(f"{wheel}: cannot unpack {member} ({exc})") from exc
    return out


@cache
def device_key(hardware: str) -> str:
    """What the virtual ``hardware`` answers a library's device queries with: the driver build and the device's
    attributes and modelled layout. A change to either can move the heuristic's choices (the answer for 17-18-block
    clusters moved 105 of 369 H100 choices), so label caches are kept per key."""
    from stepcast.emulate.driver.build import driver_key
    from stepcast.emulate.driver.device import driver_environment
    from stepcast.profiling.hardware import lookup

    env = driver_environment(lookup(hardware))
    text = driver_key() + "".join(f"{k}={env[k]};" for k in sorted(env))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def cache_file(hardware: str, cache_dir: Path | None = None, cublas: str | None = None) -> Path:
    """The label cache of one device (``device_key``) and cuBLAS version (default: the installed wheel's)."""
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "gemm_labels"
    return root / f"{hardware}-cublas{cublas or cublas_wheel_version()}-device{device_key(hardware)}.parquet"


def read_cache(hardware: str, cache_dir: Path | None = None, cublas: str | None = None) -> pd.DataFrame:
    path = cache_file(hardware, cache_dir, cublas)
    if not path.is_file():
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("m", "n", "k")}
                            | {c: pd.Series(dtype=object) for c in ("dtype", *LABEL_COLUMNS)})
    return pd.read_parquet(path)


def _write_cache(frame: pd.DataFrame, hardware: str, cache_dir: Path | None, cublas: str | None) -> None:
    path = cache_file(hardware, cache_dir, cublas)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def query(shapes: pd.DataFrame, hardware: str, cache_dir: Path | None = None, chunk: int = CHUNK,
          cublas: str | None = None) -> pd.DataFrame:
    """Label the (m, n, k, dtype) rows of ``shapes`` (torch Linear's m, n, k) missing from the cache by asking
    cuBLASLt version ``cublas`` (default: the wheel's) on the virtual ``hardware``; returns the whole cache of that
    device and version."""
    from stepcast.emulate.driver.gemm_choice import choose, torch_linear_gemm

    known = read_cache(hardware, cache_dir, cublas)
    shapes = shapes[KEY].drop_duplicates()
    todo = shapes.merge(known[KEY], on=KEY, how="left", indicator=True)
    todo = todo[todo["_merge"] == "left_only"][KEY]
    library = cublaslt_library(cublas) if len(todo) else None
    for start in range(0, len(todo), chunk):
        part = todo.iloc[start:start + chunk]
        gemms = [torch_linear_gemm(int(m), int(n), int(k), str(d)) for m, n, k, d in part.itertuples(index=False)]
        choices = choose(gemms, hardware, library=library)
        labels = part.assign(kernel_name=[c.kernel for c in choices],
                             grid=[",".join(map(str, c.main_launch.grid)) if c.main_launch else "" for c in choices],
                             kernel_label=[f"cublaslt-{c.cublaslt_version}" for c in choices])
        known = pd.concat([known, labels.astype({"m": "int64", "n": "int64", "k": "int64"})], ignore_index=True)
        _write_cache(known, hardware, cache_dir, cublas)
        log.info("%s, cuBLAS %s: labelled %d of %d new shapes", hardware, cublas or cublas_wheel_version(),
                 min(start + chunk, len(todo)), len(todo))
    return known


def _labelable(frame: pd.DataFrame) -> np.ndarray:
    """Rows the heuristic can be asked about (no recorded kernel, plain GEMM, supported dtype, labellable GPU)."""
    recorded = frame["kernel_name"].notna().to_numpy() if "kernel_name" in frame.columns else np.zeros(len(frame), bool)
    batch = pd.to_numeric(frame["batch"], errors="coerce").fillna(1).to_numpy() if "batch" in frame.columns \
        else np.ones(len(frame))
    codes, uniques = factorize(frame["hardware"])
    hw_ok = by_code(np.array([can_label(str(u)) for u in uniques] + [False]), codes)
    return ~recorded & (batch == 1) & (_codes(frame["dtype"], LABEL_DTYPES) >= 0) & hw_ok


def _codes(values: pd.Series, vocabulary: tuple[str, ...]) -> np.ndarray:
    """Integer codes of a string column over ``vocabulary`` (-1 elsewhere), computed once per distinct value."""
    codes, uniques = factorize(values)
    return by_code(np.array([vocabulary.index(str(u)) if str(u) in vocabulary else -1 for u in uniques] + [-1]), codes)


def _keys(rows: pd.DataFrame) -> np.ndarray:
    """One 64-bit hash per (m, n, k, dtype) row: a vectorised lookup key."""
    keys = pd.DataFrame({c: rows[c].to_numpy(dtype=np.int64) for c in ("m", "n", "k")}
                        | {"dtype": _codes(rows["dtype"], LABEL_DTYPES)})
    return pd.util.hash_pandas_object(keys, index=False).to_numpy()


@cache
def _lookup(path: Path, mtime_ns: int) -> tuple[pd.Index, np.ndarray]:
    """A device's cache as (key index, label columns as an object array); reread when the file changes."""
    labels = pd.read_parquet(path)
    return pd.Index(_keys(labels)), labels[list(LABEL_COLUMNS)].to_numpy(dtype=object)


def _cached_labels(hardware: str, cache_dir: Path | None, cublas: str | None) -> tuple[pd.Index, np.ndarray] | None:
    path = cache_file(hardware, cache_dir, cublas)
    try:
        return _lookup(path, path.stat().st_mtime_ns)
    except FileNotFoundError:
        return None


def source_cublas(frame: pd.DataFrame) -> np.ndarray:
    """The cuBLAS version each row's labels come from: its source's (SOURCE_CUBLAS), else None (the wheel's)."""
    if "source" not in frame.columns:
        return np.full(len(frame), None, dtype=object)
    codes, uniques = factorize(frame["source"])
    return by_code(np.array([SOURCE_CUBLAS.get(str(u)) for u in uniques] + [None], dtype=object), codes)


#: (cuBLAS version, device) pairs whose child failed in this process: asked once, then the wheel's labels
_FAILED: set[tuple[str, str]] = set()


@cache
def _warn_missing(version: str, reason: str) -> None:
    log.warning("%s: rows measured with cuBLAS %s take the installed wheel's labels", reason, version)


def _available(version: str | None, cache_dir: Path | None, hardware: str) -> str | None:
    """``version`` when its labels can be had (fetched library, or a cache already there), else None (the wheel's)."""
    if version is None or cache_file(hardware, cache_dir, version).is_file():
        return version
    try:
        cublaslt_library(version)
    except CublasMissingError as exc:
        _warn_missing(version, str(exc))
        return None
    return version


def label_gemms(frame: pd.DataFrame, *, ask: bool = False, cache_dir: Path | None = None) -> pd.DataFrame:
    """``frame`` (GEMM rows) with ``kernel_name``, ``grid`` and ``kernel_label`` filled where a label is known:
    recorded launches are kept as they are; other rows take the cached heuristic label of their device and of the
    cuBLAS their source ran (``source_cublas``), and with ``ask`` the heuristic is asked for the shapes not yet
    cached. The frame itself is not changed."""
    columns = {c: (frame[c].to_numpy(dtype=object, copy=True) if c in frame.columns
                   else np.full(len(frame), None, dtype=object)) for c in LABEL_COLUMNS}
    recorded = pd.notna(columns["kernel_name"]) & pd.isna(columns["kernel_label"])
    columns["kernel_label"][recorded] = "recorded"
    todo = _labelable(frame)
    if todo.any():
        positions = np.flatnonzero(todo)
        rows = frame.iloc[positions]
        codes, devices = factorize(rows["hardware"])
        versions = source_cublas(rows)
        groups = pd.DataFrame({"device": codes, "cublas": pd.Series(versions, dtype=object).fillna("")})
        for (code, version), members in groups.groupby(["device", "cublas"], sort=True).indices.items():
            device = str(devices[code])
            cublas = _available(version or None, cache_dir, device)
            mine = np.zeros(len(rows), dtype=bool)
            mine[members] = True
            part = rows[mine]
            if ask:
                shapes = pd.DataFrame({c: part[c].to_numpy(dtype=np.int64) for c in ("m", "n", "k")}
                                      | {"dtype": part["dtype"].astype(str).to_numpy()})
                if (cublas, device) in _FAILED:
                    cublas = None
                try:
                    query(shapes, device, cache_dir, cublas=cublas)
                except (RuntimeError, OSError) as exc:
                    if cublas is None:
                        raise
                    _FAILED.add((cublas, device))
                    _warn_missing(cublas, f"cuBLAS {cublas} on {device}: {exc}")
                    cublas = None
                    query(shapes, device, cache_dir)
            table = _cached_labels(device, cache_dir, cublas)
            if table is None and cublas is not None:  # the source's cuBLAS is here but never labelled this device
                _warn_missing(cublas, f"no cuBLAS {cublas} labels of {device} cached")
                table = _cached_labels(device, cache_dir, None)
            if table is None:
                continue
            index, values = table
            found = index.get_indexer(_keys(part))
            hit = found >= 0
            target = positions[mine][hit]
            for j, column in enumerate(LABEL_COLUMNS):
                columns[column][target] = values[found[hit], j]
    return frame.assign(**columns)


#: at most this many distinct unlabelled shapes are asked of cuBLASLt when a model needs labels (an emulated step
#: has tens to hundreds; a million random shapes would take a quarter of an hour, so larger frames use the cache only)
ASK_LIMIT = 5000
#: set by ``cache_only``: no model asks cuBLASLt, whatever the number of shapes
_CACHE_ONLY = False


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """Within the block, models label GEMMs from the cache alone: what a benchmark needs for figures that do not
    depend on which of its folds happened to hold few enough shapes to ask cuBLASLt (and so fill the cache)."""
    global _CACHE_ONLY
    before, _CACHE_ONLY = _CACHE_ONLY, True
    try:
        yield
    finally:
        _CACHE_ONLY = before


def label_for_features(frame: Kernels) -> Kernels:
    """What a kernel-configuration model predicts from: ``frame`` labelled (``label_gemms``), asking cuBLASLt for
    uncached shapes when there are at most ``ASK_LIMIT`` of them; rows left unlabelled predict without a label.
    The light form of a few rows (``KernelColumns``) is labelled too, as a frame: a GEMM predicted on its own must
    get the label it gets among others (unlabelled, a 1-row bf16 2048^3 GEMM was predicted 108 us against 34)."""
    if not len(frame):
        return frame
    frame = as_frame(frame)
    todo = _labelable(frame)
    if not todo.any():
        return frame
    rows = frame[todo]
    ask = not _CACHE_ONLY and (len(rows) <= ASK_LIMIT or len(
        pd.unique(_keys(rows) ^ factorize(rows["hardware"])[0].astype(np.uint64))) <= ASK_LIMIT)
    try:
        return label_gemms(frame, ask=ask)
    except (RuntimeError, OSError) as exc:  # no compiler or cuBLAS wheel here: predict without labels, and say so
        log.warning("kernel labels unavailable (%s): GEMMs predicted without their kernel configuration", exc)
        return label_gemms(frame, ask=False)


def version_drift(frame: pd.DataFrame, *, ask: bool = True, cache_dir: Path | None = None) -> pd.DataFrame:
    """How far the wheel's cuBLAS moved the labels of measured rows: for rows with a recorded kernel (measured with
    an older cuBLAS) that the heuristic can also answer (plain Linear-layout GEMMs on a labellable GPU), the share
    whose heuristic label has the recorded kernel's architecture path, and its path and output tile, per source and
    device."""
    from stepcast.estimator.kernel_config import NAME_FEATURES, parse_name

    recorded = frame[frame["kernel_name"].notna()] if "kernel_name" in frame.columns else frame.iloc[:0]
    asked = label_gemms(recorded.drop(columns=[c for c in LABEL_COLUMNS if c in recorded.columns]), ask=ask,
                        cache_dir=cache_dir)
    keep = asked["kernel_name"].notna().to_numpy()
    path, tm, tn = (NAME_FEATURES.index(c) for c in ("kc_path", "kc_tile_m", "kc_tile_n"))

    def described(names: pd.Series) -> list[tuple[float, float, float]]:
        return [(f[path], f[tm], f[tn]) for f in map(parse_name, names.astype(str))]

    old, new = described(recorded["kernel_name"][keep]), described(asked["kernel_name"][keep])
    rows = recorded[keep].assign(same_path=[a[0] == b[0] for a, b in zip(old, new)],
                                 same_path_and_tile=[a == b for a, b in zip(old, new)])
    return (rows.groupby([rows["source"].astype(str), rows["hardware"].astype(str)])
            .agg(rows=("same_path", "size"), same_path=("same_path", "mean"),
                 same_path_and_tile=("same_path_and_tile", "mean")).reset_index())


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.estimator.kernel_labels",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default="aiconfigurator,vidur,llmcompass",
                        help="comma-separated sources whose unlabelled GEMM rows are labelled")
    parser.add_argument("--hardware", default="", help="comma-separated catalog ids (default: every labellable one)")
    parser.add_argument("--drift", action="store_true",
                        help="instead: how often the heuristic's label matches the recorded kernel of measured rows")
    parser.add_argument("--fetch-cublas", metavar="VERSION",
                        help="instead: fetch that cuBLAS version's libcublasLt (e.g. 12.1.3.1, what Vidur ran)")
    parser.add_argument("--wheel", type=Path, help="with --fetch-cublas: unpack this wheel instead of pip download")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.fetch_cublas:
        print(fetch_cublas(args.fetch_cublas, args.wheel))
        return 0
    from stepcast.estimator.data import load_measurements

    data = load_measurements(families=["gemm"], sources=[s.strip() for s in args.sources.split(",") if s.strip()])
    wanted = {h.strip() for h in args.hardware.split(",") if h.strip()}
    if wanted:
        data = data[data["hardware"].astype(str).isin(wanted)]
    if args.drift:
        print(version_drift(data).round(3).to_string(index=False))
        return 0
    labelled = label_gemms(data, ask=True)
    counts = labelled["kernel_label"].fillna("none").groupby(labelled["hardware"].astype(str)).value_counts()
    print(counts.to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
