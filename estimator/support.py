"""Training support of a learned estimator: what it has seen, so predictions outside it can be flagged.

A row is in range when each shape feature (log2 of the family's numeric key columns) lies within the training
minimum and maximum and its device was in the training data. For a collective, "its device" means the device running
that collective at that topology (op, ranks, ranks per node): NCCL's algorithm and links change with them, and a
measured device's held-out topologies are predicted worse than by the alpha-beta model (Vidur's A40 at 8 ranks,
trained on its 2-rank rows: 383 % against 41 %), so a device measured only at other rank counts or ops counts as
unseen there.

``spec_in_range`` is looser: the device's kind (GPU/CPU) was seen and each spec figure lies within the training
range widened by ``spec_tolerance`` (a factor); the router falls back to the roofline where even that fails (see
:mod:`estimator.router`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from stepcast.estimator.features import SHAPE_COLUMNS
from stepcast.estimator.frames import Kernels, factorize, num, text
from stepcast.estimator.hardware_table import SPEC_FEATURES, RowHardware

#: per family, the key columns that qualify a device: the (device, values) combination must have been seen
SEEN_WITH: dict[str, tuple[str, ...]] = {"collective": ("op", "ranks", "ranks_per_node")}
TEXT_KEYS = ("op",)

#: spec figures compared by ratio (a device may be up to this factor beyond the training range)
SPEC_RANGE_FEATURES = ("hw_sm_count", "hw_memory_bandwidth_gbps", "hw_peak_fp32_tflops", "hw_clock_mhz")


@dataclass
class Support:
    family: str
    shape_min: dict[str, float] = field(default_factory=dict)
    shape_max: dict[str, float] = field(default_factory=dict)
    spec_min: dict[str, float] = field(default_factory=dict)
    spec_max: dict[str, float] = field(default_factory=dict)
    hardware: list[str] = field(default_factory=list)
    kinds: list[float] = field(default_factory=list)  # hw_is_gpu values seen
    spec_tolerance: float = 2.0
    configurations: list[str] = field(default_factory=list)  # "device/op/ranks/ranks_per_node" seen (SEEN_WITH)

    @classmethod
    def fit(cls, family: str, frame: Kernels, hw: RowHardware, spec_tolerance: float = 2.0) -> "Support":
        """``hw``: the frame's catalog figures (``estimator.hardware_table.row_hardware``; a feature pass has them)."""
        shapes = {c: np.log2(np.maximum(num(frame, c), 1e-30)) for c in SHAPE_COLUMNS[family]}
        spec = {c: hw.spec[c] for c in SPEC_RANGE_FEATURES}
        return cls(
            family=family,
            shape_min={c: float(np.nanmin(v)) for c, v in shapes.items()},
            shape_max={c: float(np.nanmax(v)) for c, v in shapes.items()},
            spec_min={c: float(np.nanmin(v)) for c, v in spec.items()},
            spec_max={c: float(np.nanmax(v)) for c, v in spec.items()},
            hardware=sorted({str(h) for h in factorize(frame["hardware"])[1]}),
            kinds=sorted({float(k) for k in np.unique(hw.spec["hw_is_gpu"])}),
            spec_tolerance=spec_tolerance,
            configurations=sorted(set(configuration_keys(family, frame))) if family in SEEN_WITH else [],
        )

    def shape_in_range(self, frame: Kernels) -> np.ndarray:
        ok = np.ones(len(frame), dtype=bool)
        for c, lo in self.shape_min.items():
            v = np.log2(np.maximum(num(frame, c), 1e-30))
            ok &= (v >= lo - 1e-9) & (v <= self.shape_max[c] + 1e-9)
        return ok

    def seen(self, devices) -> np.ndarray:
        """Whether each catalog id was in the training data."""
        return np.array([str(d) in self.hardware for d in devices], dtype=bool)

    def hardware_seen(self, frame: Kernels, hw: RowHardware | None = None) -> np.ndarray:
        """Per row: its device was seen (in the row's configuration, for SEEN_WITH families). ``hw``: the frame's
        devices when already resolved (the feature pass has them), else they are factorised here."""
        if hw is not None:
            devices = hw.per_row(self.seen(hw.devices))
        else:
            codes, uniques = factorize(frame["hardware"])
            devices = self.seen(uniques)[codes]
        return devices & self.configuration_seen(frame)

    def configuration_seen(self, frame: Kernels) -> np.ndarray:
        """Whether each row's device was seen in the row's configuration (all True for families without one)."""
        if self.family not in SEEN_WITH or not self.configurations:
            return np.ones(len(frame), dtype=bool)
        codes, uniques = factorize(configuration_keys(self.family, frame))
        return np.isin(np.asarray(uniques, dtype=object), self.configurations)[codes]

    def in_range(self, frame: Kernels) -> np.ndarray:
        return self.shape_in_range(frame) & self.hardware_seen(frame)

    def spec_in_range(self, spec: dict[str, np.ndarray]) -> np.ndarray:
        """Per entry of the spec arrays (pass one entry per distinct device and spread it, not one per row)."""
        ok = np.isin(spec["hw_is_gpu"], self.kinds)
        for c, lo in self.spec_min.items():
            v = spec[c]
            ok &= (v >= lo / self.spec_tolerance) & (v <= self.spec_max[c] * self.spec_tolerance)
        return ok

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Support":
        return cls(**data)


def configuration_keys(family: str, frame: Kernels) -> np.ndarray:
    """"device/value/value" per row, over the family's SEEN_WITH columns."""
    keys = np.asarray(frame["hardware"], dtype=object).astype(str)
    for c in SEEN_WITH[family]:
        values = text(frame, c).astype(str) if c in TEXT_KEYS else np.char.mod("%g", num(frame, c))
        keys = np.char.add(np.char.add(keys, "/"), values)
    return keys.astype(object)


assert set(SPEC_RANGE_FEATURES) <= set(SPEC_FEATURES)
