"""Kernel-configuration features of GEMM rows: what the kernel that runs is (``estimator.kernel_labels``), as numbers.

From the kernel's name: its architecture path (nvjet, the sm_xx xmma kernels, CUTLASS, cuBLAS's prebuilt
``<arch>_sgemm`` / ``<arch>_<dtype>_s16816gemm`` kernels, gemv and small-GEMM kernels), the SM generation it was
built for, whether it uses tensor cores, its output tile M x N, K tile and pipeline stages, intra-CTA K slices
(``sliced1xN``), cluster shape, split-K (named; the slices a grid z beyond the batch holds, or for a named split-K
kernel whose z holds none, the CTAs beyond its output tiles) and the alignment it was built for.
From the recorded grid: the CTAs launched and their waves over the SMs (a persistent kernel's: its tiles over its
CTAs, :func:`launch_waves`). From the tile and the shape: tile quantisation (the output area the tiles cover over
the useful area), tile waves and the K iterations per split.
The alignment class of the shape itself (the largest power of two, up to 16 bytes, dividing its leading dimensions)
is computed for every row, labelled or not.

Every CUDA version's spelling of a kind of kernel gives the same features (tests/estimator/test_kernel_config.py has
one case per naming scheme): cuBLAS 13's ``nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_TNT`` and cuBLAS 12.8's
``nvjet_tst_256x128_64x4_2x4_v_bz_coopA_NNT`` (any operand-type tag: ``tst``, ``hsh``, ``tss``, ``qqtst``...);
cuDNN's implicit-GEMM convolutions (``sm80_xmma_fprop_implicit_gemm_*``, CUTLASS 2's ``cutlass_tensorop_
s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4``, which names no architecture) as the GEMMs they are. cuBLAS 12.8
names no SM in its nvjet kernels; nvjet kernels are generated at run time for the GPU they run on (cuBLAS 13 tags
them with exactly that GPU's SM), so :func:`kernel_config_features` takes such a kernel's SM generation from the
row's device when the caller gives it, and leaves it NaN otherwise. A CUTLASS 3 name's stage count ``0`` means
"chosen by the builder", not zero stages: NaN. Kernels that are no GEMM (attention, elementwise, Inductor's Triton
kernels, whose autotuned tile is not in their name) are path ``other``.

Shapes are read as the labels ask them (``torch.nn.functional.linear``; ``kernel_labels``): cuBLAS's M is the
row's ``n`` and its N the row's ``m``, which is also the orientation of NeuSight's recorded grids. Rows without a
label get NaN for every name- and grid-derived feature (tree models route missing values; the MLP zero-fills).

Names are parsed once per distinct name and grids once per distinct grid, so a frame of a million rows costs a
handful of numpy passes.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from stepcast.estimator.frames import Kernels, by_code, factorize

#: architecture paths, in the order the name patterns are tried; the feature is the index
PATHS = ("nvjet", "xmma", "cutlass", "prebuilt", "gemv", "small", "other")
_SM_OF_FAMILY = {"maxwell": 50, "pascal": 60, "volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90}

#: name-derived features, in order
NAME_FEATURES = ("kc_path", "kc_sm", "kc_tensor", "kc_tile_m", "kc_tile_n", "kc_tile_k", "kc_stages", "kc_slices",
                 "kc_cluster", "kc_split_k_named", "kc_align")
#: every feature this module adds, in order
FEATURES = NAME_FEATURES + ("kc_labelled", "kc_log2_ctas", "kc_grid_waves", "kc_grid_last_wave", "kc_split_k",
                            "kc_log2_tile_overhead", "kc_tile_waves", "kc_tile_last_wave", "kc_log2_k_iters",
                            "kc_shape_align_bytes")

_PAIR = r"(\d+)x(\d+)"
#: tensor-core kernels: the op class, or the MMA instruction shape cuBLAS / CUTLASS 2 name (h884, s1688, s16816, i8816)
_TENSOR = re.compile(r"tensorop|[hsi](?:884|1688|16816|161616|8816|16832)|hmma|imma|nvjet|xmma|wmma|gmma")
#: a CUTLASS 2 name inside a mangled or demangled template name (cuBLAS's ``cutlass_80_...``, cuDNN's archless ones)
_CUTLASS2 = re.compile(r"(cutlass_(?:\d+_|(?=wmma|tensorop|simt))\w*?_align\d+)")
_GEMM_OR_CONV = r"(?:gemm|fprop|dgrad|wgrad)"


def _strip(name: str) -> str:
    """The kernel's own name out of a mangled or demangled CUTLASS template name."""
    found = _CUTLASS2.search(name)
    return found.group(1) if found else name


@lru_cache(maxsize=4096)
def parse_name(name: str) -> tuple[float, ...]:
    """NAME_FEATURES of one kernel name (NaN where the name does not say; the module docstring lists the schemes)."""
    nan = float("nan")
    path, sm, tm, tn, tk, stages, slices, cluster, split, align = "other", nan, nan, nan, nan, nan, 1.0, 1.0, 0.0, nan
    s = _strip(name)
    low = s.lower()
    tensor = float(bool(_TENSOR.search(low)) and not re.search(r"sgemm|simt|ffma", low))  # ffma: xmma's SIMT fp32
    # nvjet: [sm<N>_]<operand types>_<tile M>x<N>_<K tile>x<stages>_<cluster M>x<N>[_2cta]_<raster>_..._[splitK_]<ops>
    if found := re.match(r"nvjet_(?:sm(\d+)_)?\w*?_" + _PAIR + "_" + _PAIR + "_" + _PAIR, s):
        path, sm = "nvjet", float(found.group(1)) if found.group(1) else nan
        tm, tn, tk, stages = (float(found.group(i)) for i in (2, 3, 4, 5))
        cluster = float(found.group(6)) * float(found.group(7))
        split = float("splitk" in low)
    elif found := re.search(r"sm(\d+)_xmma", low):
        path, sm = "xmma", float(found.group(1))
        if tile := re.search(r"tilesize(\d+)x(\d+)x(\d+)", low):
            tm, tn, tk = (float(tile.group(i)) for i in (1, 2, 3))
        if stage := re.search(r"stage(\d+)", low):
            stages = float(stage.group(1))
        if cl := re.search(r"cluster(\d+)x(\d+)", low):
            cluster = float(cl.group(1)) * float(cl.group(2))
        split = float("segment_k_on" in low or "splitk" in low or "split_k" in low)
    elif found := re.match(r"cutlass_(?:(\d+)_)?\w*?" + _GEMM_OR_CONV + r"\w*?_" + _PAIR + "_" + _PAIR, s):
        # CUTLASS 2: cuBLAS's names carry the architecture (cutlass_80_...), cuDNN's convolution kernels do not
        path, sm = "cutlass", float(found.group(1)) if found.group(1) else nan
        tm, tn, tk, stages = (float(found.group(i)) for i in (2, 3, 4, 5))
    elif found := re.match(r"cutlass3x_sm(\d+)_\w*?" + _GEMM_OR_CONV + r"\w*?_(\d+)x(\d+)x(\d+)_"
                           r"(?:(\d+)x(\d+)x\d+_(\d+)_)?", s):
        # CUTLASS 3 (cuBLAS's sm_100 fp32 path): tile M x N x K, then cluster M x N x K and stages (0: the builder's)
        path, sm = "cutlass", float(found.group(1))
        tm, tn, tk = (float(found.group(i)) for i in (2, 3, 4))
        if found.group(5):
            cluster = float(found.group(5)) * float(found.group(6))
            stages = float(found.group(7)) or nan
    elif found := re.match(r"(maxwell|pascal|volta|turing|ampere|ada|hopper)_\w*?gemm\w*?_" + _PAIR, low):
        path, sm = "prebuilt", float(_SM_OF_FAMILY[found.group(1)])
        tm, tn = float(found.group(2)), float(found.group(3))
        if st := re.search(r"stages_" + _PAIR, low):
            tk, stages = float(st.group(1)), float(st.group(2))
    elif "gemv" in low:
        path = "gemv"
    elif found := re.search(r"sgemm_(\d+)x(\d+)x(\d+)", low):
        path = "small"
        tm, tn, tk = (float(found.group(i)) for i in (1, 2, 3))
    elif re.search(r"gemmsn|gemmk1|gemm_small|dot_kernel", low):
        path = "small"
    if sl := re.search(r"sliced1x(\d+)", low):
        slices = float(sl.group(1))
    if al := re.search(r"align(?:a)?(\d+)", low):  # xmma names A's alignment (aligna8) and C's (alignc8)
        align = float(al.group(1))
    return (float(PATHS.index(path)), sm, tensor, tm, tn, tk, stages, slices, cluster, split, align)


def _grid(values: pd.Series | np.ndarray) -> np.ndarray:
    """(rows, 3) float array of "x,y,z" grids (NaN where absent or unreadable)."""
    codes, uniques = factorize(values)
    parsed = np.full((len(uniques) + 1, 3), np.nan)
    for i, text in enumerate(uniques):
        parts = str(text).replace("(", "").replace(")", "").replace("[", "").replace("]", "").split(",")
        try:
            dims = [float(p) for p in parts if p.strip()]
        except ValueError:
            continue
        if len(dims) == 3:
            parsed[i] = dims
    return by_code(parsed, codes)


def shape_alignment_bytes(n: np.ndarray, k: np.ndarray, element_bytes: np.ndarray) -> np.ndarray:
    """Largest power of two, at most 16 bytes, dividing the leading dimensions of a Linear layer's operands (k for
    both inputs, n for the output): 16 lets a kernel use 128-bit loads, 2 (one 16-bit element) forces align1."""
    elements = np.gcd(np.asarray(k, dtype=np.int64), np.asarray(n, dtype=np.int64))
    elements = np.maximum(elements, 1)
    lowest = (elements & -elements).astype(np.float64)
    return np.minimum(lowest * element_bytes, 16.0)


def persistent_kernel(features: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of :func:`kernel_config_features`, whether its kernel is persistent: a grid of at most one CTA per SM
    that loops over the tiles (cuBLAS's nvjet and sm90 xmma kernels, CUTLASS 3's for sm_90 and later), so its grid
    says how many tiles run at once, not how many there are."""
    path = features["kc_path"]
    return np.isin(path, (PATHS.index("nvjet"), PATHS.index("xmma"))) \
        | ((path == PATHS.index("cutlass")) & (features["kc_sm"] >= 90))


def launch_waves(persistent: np.ndarray, ctas: np.ndarray, pieces: np.ndarray,
                 sms: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """The waves a launch runs and the CTA-sized pieces of work they fill (for the last wave's fill): ceil(CTAs /
    SMs), or, for a :func:`persistent_kernel` whose grid is under its ``pieces`` (tile x K-slice pairs), the pieces
    over the CTAs running at once (128 CTAs for 1,024 tiles: 8 waves). Where the pieces are unknown (NaN), or the
    grid is not under them, the grid's waves."""
    looped = persistent & (ctas < pieces)
    waves = np.where(looped, np.ceil(pieces / np.minimum(ctas, sms)), np.ceil(ctas / sms))
    return waves, np.where(looped, pieces, ctas)


def kernel_config_features(frame: Kernels, m: np.ndarray, n: np.ndarray, k: np.ndarray, batch: np.ndarray,
                           sms: np.ndarray, element_bytes: np.ndarray,
                           compute_capability: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """FEATURES of every row (see the module docstring). ``compute_capability``: each row's device as 10 x major +
    minor (90 for sm_90; NaN for none), the SM generation of nvjet kernels whose name does not tag it."""
    rows = len(m)
    out: dict[str, np.ndarray] = {}
    # a frame or the light columns of a few rows (estimator.frames.KernelColumns: an emulated step's recorded launches)
    names = frame["kernel_name"] if "kernel_name" in frame.columns else None
    if names is not None:
        codes, uniques = factorize(names)
        valid = np.array([isinstance(u, str) and u != "" for u in uniques] + [False])
        missing = (np.nan,) * len(NAME_FEATURES)
        table = np.array([parse_name(u) if ok else missing for u, ok in zip(uniques, valid)] + [missing],
                         dtype=np.float64)
        codes = np.where(codes < 0, len(uniques), codes)
        parsed = table[codes]
        labelled = valid[codes].astype(np.float64)
    else:
        parsed = np.full((rows, len(NAME_FEATURES)), np.nan)
        labelled = np.zeros(rows)
    for i, name in enumerate(NAME_FEATURES):
        out[name] = parsed[:, i]
    if compute_capability is not None:  # cuBLAS 12's nvjet_tst_*: generated for the device it runs on
        untagged = (out["kc_path"] == PATHS.index("nvjet")) & np.isnan(out["kc_sm"])
        out["kc_sm"] = np.where(untagged, np.asarray(compute_capability, dtype=np.float64), out["kc_sm"])
    out["kc_labelled"] = labelled
    grids = frame["grid"] if "grid" in frame.columns else None
    grid = _grid(grids) if grids is not None else np.full((rows, 3), np.nan)
    grid[labelled == 0] = np.nan
    ctas = grid.prod(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["kc_log2_ctas"] = np.log2(ctas)
        tm, tn = out["kc_tile_m"], out["kc_tile_n"]
        tiles = np.ceil(n / tm) * np.ceil(m / tn) * batch  # cuBLAS M is the row's n (module docstring)
        # split-K: named, or CTAs along z beyond the batch (CUTLASS and the prebuilt kernels put the slices there);
        # a named split-K kernel without slices along z whose grid holds more CTAs than output tiles runs the
        # surplus on K: cuBLAS's nvjet split-K kernels launch the slices along x and y (128 CTAs for the 8 tiles
        # of a K = 65,536 GEMM: 16 slices), so the split is CTAs / tiles, which for a stream-K partition (not a
        # whole number) is each CTA's share of the tiles' K loops
        z_split = np.where(grid[:, 2] > batch, grid[:, 2] / batch, 1.0)
        out["kc_split_k"] = np.where(np.isnan(grid[:, 2]), np.where(out["kc_split_k_named"] > 0, np.nan, 1.0),
                                     np.maximum(z_split, 1.0))
        flat = (out["kc_split_k_named"] > 0) & (out["kc_split_k"] == 1.0) & (ctas > tiles)
        out["kc_split_k"] = np.where(flat, ctas / tiles, out["kc_split_k"])
        pieces = tiles * np.where(np.isnan(out["kc_split_k"]), 1.0, out["kc_split_k"])
        grid_waves, filled = launch_waves(persistent_kernel(out), ctas, pieces, sms)
        out["kc_grid_waves"] = grid_waves
        out["kc_grid_last_wave"] = filled / (grid_waves * sms)
        out["kc_log2_tile_overhead"] = np.log2(tiles * tm * tn / (m * n * batch))
        tile_waves = np.ceil(tiles / sms)
        out["kc_tile_waves"] = tile_waves
        out["kc_tile_last_wave"] = tiles / (tile_waves * sms)
        split = np.where(np.isnan(out["kc_split_k"]), 1.0, out["kc_split_k"])
        out["kc_log2_k_iters"] = np.log2(np.ceil(k / (out["kc_tile_k"] * split)))
    unlabelled = labelled == 0
    if unlabelled.any():
        for name in FEATURES:
            if name in out and name != "kc_labelled":
                out[name] = np.where(unlabelled, np.nan, out[name])
    out["kc_shape_align_bytes"] = shape_alignment_bytes(n, k, element_bytes)
    return {name: out[name] for name in FEATURES}
