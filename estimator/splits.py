"""Train/test splits that say how an estimator generalises.

- ``random``: rows at random (interpolation between measured points);
- ``held_out_shapes``: whole groups held out (``group``: a Vidur model, a profiler sampling set): one fold per group
  when there are at least three, else a random fifth of the distinct shapes held out across every device. A group
  that is the only data of one of its devices is not held out whole (that would test an unseen device, which is
  ``leave_one_hardware_out``'s job): its fold holds out a random fifth of that group's distinct shapes instead;
- ``leave_one_hardware_out``: one fold per device (trained on the others, described to the model by its spec);
- ``out_of_range``: the rows with the largest work (top decile of FLOPs + bytes) held out, trained on the rest;
- ``fixed_eval``: a stable fifth of rows chosen by a hash of each row's kernel columns, the same for every run
  over the same data, so champion comparisons in the model registry are like for like.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stepcast.estimator.workload import work
from stepcast.profiling.families import key_columns
from stepcast.errors import InputError

SPLITS = ("random", "held_out_shapes", "leave_one_hardware_out", "out_of_range")


@dataclass(frozen=True)
class Fold:
    split: str
    name: str  # which group/device is held out ("all" for single-fold splits)
    train: np.ndarray  # integer positions
    test: np.ndarray


def _positions(mask: np.ndarray) -> np.ndarray:
    return np.flatnonzero(mask)


def shape_hash(frame: pd.DataFrame, with_hardware: bool = False) -> np.ndarray:
    family = str(frame["family"].iat[0])
    cols = [c for c in key_columns(family) if c != "hardware" or with_hardware]
    return pd.util.hash_pandas_object(frame[cols], index=False).to_numpy()


def random_split(frame: pd.DataFrame, test_share: float = 0.2, seed: int = 0) -> Iterator[Fold]:
    test = np.random.default_rng(seed).random(len(frame)) < test_share
    yield Fold("random", "all", _positions(~test), _positions(test))


def held_out_shapes(frame: pd.DataFrame, test_share: float = 0.2, seed: int = 0) -> Iterator[Fold]:
    groups = frame["group"].astype(str).to_numpy() if "group" in frame else np.full(len(frame), "")
    distinct = pd.unique(groups)
    if len(distinct) >= 3:
        hardware = frame["hardware"].astype(str).to_numpy()
        for g in distinct:
            test = groups == g
            if set(pd.unique(hardware[test])) <= set(pd.unique(hardware[~test])):
                yield Fold("held_out_shapes", str(g), _positions(~test), _positions(test))
            else:  # the group alone measures a device: hold out a fifth of its shapes, keep the device seen
                test &= _some_shapes(frame, test_share, seed)
                yield Fold("held_out_shapes", f"{g} (a fifth of its shapes)", _positions(~test), _positions(test))
        return
    test = _some_shapes(frame, test_share, seed)
    yield Fold("held_out_shapes", "shapes", _positions(~test), _positions(test))


def _some_shapes(frame: pd.DataFrame, share: float, seed: int) -> np.ndarray:
    """Rows whose shape (key columns but the device) is in a random ``share`` of the distinct shapes."""
    h = shape_hash(frame)
    shapes = pd.unique(h)
    chosen = np.random.default_rng(seed).random(len(shapes)) < share
    return np.isin(h, shapes[chosen])


def leave_one_hardware_out(frame: pd.DataFrame) -> Iterator[Fold]:
    hardware = frame["hardware"].astype(str).to_numpy()
    devices = pd.unique(hardware)
    if len(devices) < 2:
        return
    for device in devices:
        test = hardware == device
        yield Fold("leave_one_hardware_out", str(device), _positions(~test), _positions(test))


def out_of_range(frame: pd.DataFrame, test_share: float = 0.1) -> Iterator[Fold]:
    w = work(str(frame["family"].iat[0]), frame)
    size = w.flops + w.bytes + w.wire_bytes
    test = size >= np.quantile(size, 1.0 - test_share)
    yield Fold("out_of_range", "largest", _positions(~test), _positions(test))


def fixed_eval(frame: pd.DataFrame, share: int = 5) -> Fold:
    test = shape_hash(frame, with_hardware=True) % np.uint64(share) == 0
    return Fold("fixed_eval", "hash", _positions(~test), _positions(test))


def folds(split: str, frame: pd.DataFrame, seed: int = 0) -> Iterator[Fold]:
    """Folds of one split over a single-family frame."""
    if split == "random":
        return random_split(frame, seed=seed)
    if split == "held_out_shapes":
        return held_out_shapes(frame, seed=seed)
    if split == "leave_one_hardware_out":
        return leave_one_hardware_out(frame)
    if split == "out_of_range":
        return out_of_range(frame)
    raise InputError(f"unknown split '{split}': expected one of {', '.join(SPLITS)}")
