"""NeuSight importer on the real files: the (B, M, N, K) -> (batch, m, k, n) mapping, units, devices."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.importers import neusight

DEVICES = {"a100-pcie-40gb", "p100", "p4", "t4", "v100-pcie-32gb"}


@pytest.fixture(scope="module")
def rows(shared_data: Path) -> pd.DataFrame:
    return neusight.load(shared_data)


def test_families_devices_and_units(rows, shared_data):
    assert set(rows["family"]) == {"gemm", "elementwise", "norm"}
    assert set(rows["hardware"]) == DEVICES
    assert (rows["dtype"] == "fp32").all()
    assert rows["runtime_us"].notna().all() and (rows["runtime_us"] > 0).all()
    raw = pd.read_csv(shared_data / neusight.TRAIN_DIR / "softmax.csv")
    first = raw.iloc[0]
    match = rows[(rows["group"] == "neusight/softmax") & (rows["rows"] == first["B"]) & (rows["cols"] == first["H"])
                 & (rows["hardware"] == "p100")]
    assert match["runtime_us"].iloc[0] == pytest.approx(first["Latency"] * 1000.0)


def test_gemm_output_tiles_match_the_launch_grid(rows):
    # cuBLAS sgemm_<tm>x<tn> tiles the output column-major: grid.x covers n, grid.y covers m.
    gemm = rows[rows["family"] == "gemm"]
    tiles = gemm["kernel_name"].str.extract(r"sgemm_(\d+)x(\d+)_(?:nn|tn|nt)$").dropna().astype(int)
    grid = gemm.loc[tiles.index, "grid"].str.split(",", expand=True).astype(int)
    assert len(tiles) > 100_000
    assert (grid[0] == np.ceil(gemm.loc[tiles.index, "n"] / tiles[0])).all()
    assert (grid[1] == np.ceil(gemm.loc[tiles.index, "m"] / tiles[1])).all()
    # grid.z is the batch of a bmm (for batch 1, cuBLAS may use it for split-K instead)
    batched = gemm.index[(gemm["gemm_op"] == "bmm") & (gemm["batch"] > 1)].intersection(tiles.index)
    assert len(batched) > 50_000
    assert (gemm.loc[batched, "batch"] == grid.loc[batched, 2]).all()


def test_a_known_bmm_row(rows, shared_data):
    raw = pd.read_csv(shared_data / neusight.TRAIN_DIR / "collect/bmm/p2.1.0/NVIDIA A100-PCIE-40GB.csv")
    first = raw.iloc[0]  # B=6, M=27, N=21, K=390: [6, 27, 21] @ [6, 21, 390]
    row = rows[(rows["gemm_op"] == "bmm") & (rows["hardware"] == "a100-pcie-40gb")].iloc[0]
    assert (row["batch"], row["m"], row["k"], row["n"]) == (first["B"], first["M"], first["N"], first["K"])
    assert row["kernel_name"] == first["Kernel Name"] and row["grid"] == "4,1,6" and row["block"] == "256,1,1"


def test_elementwise_and_norm_sizes(rows, shared_data):
    raw = pd.read_csv(shared_data / neusight.TRAIN_DIR / "elem.csv")
    ew = rows[rows["family"] == "elementwise"]
    assert len(ew) == len(raw)
    assert sorted(ew["numel"]) == sorted(raw["B"] * raw["H"])
    assert set(ew["op"]) == {"add", "mul", "div", "pow", "add_scalar", "mul_scalar", "div_scalar", "pow_scalar",
                             "relu", "gelu", "tanh"}
    norm = rows[rows["family"] == "norm"]
    assert set(norm["op"]) == {"layer_norm", "softmax"} and (norm["pass"] == "fwd").all()
