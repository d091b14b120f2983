"""Per-row hardware figures from the catalog, vectorised.

Kernel frames name their device by catalog id (``hardware`` column). Estimators need the device's spec figures for
every row (peak FLOP/s for the row's dtype, memory bandwidth, SM count, ...). Looking a spec up per row in Python
would cost more than the model itself, so the catalog is turned once into small numpy tables indexed by integer
codes, and rows gather from them with ``np.take``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stepcast.profiling.hardware import HardwareSpec, load_catalog, lookup

#: Spec figures used as model features; every one is a plain number taken from conf/hardware/<id>.yaml.
SPEC_FEATURES: tuple[str, ...] = (
    "hw_is_gpu",
    "hw_sm_count",
    "hw_clock_mhz",
    "hw_memory_bandwidth_gbps",
    "hw_l2_cache_mib",
    "hw_smem_per_sm_kib",
    "hw_peak_fp32_tflops",
    "hw_compute_capability",
)


def spec_vector(spec: HardwareSpec) -> dict[str, float]:
    """The numeric spec features of one device (missing optional figures become NaN; xgboost handles NaN)."""
    cc = spec.compute_capability
    return {
        "hw_is_gpu": float(spec.kind == "gpu"),
        "hw_sm_count": float(spec.sm_count),
        "hw_clock_mhz": float(spec.max_clock_mhz),
        "hw_memory_bandwidth_gbps": float(spec.memory_bandwidth_gbps),
        "hw_l2_cache_mib": float(spec.l2_cache_mib),
        "hw_smem_per_sm_kib": float(spec.shared_memory_per_sm_kib or np.nan),
        "hw_peak_fp32_tflops": float(spec.peak_tflops["fp32"]),
        "hw_compute_capability": float(cc[0] * 10 + cc[1]) if cc else np.nan,
    }


@dataclass(frozen=True)
class RowHardware:
    """Spec figures gathered for every row of a frame (arrays of the frame's length)."""

    spec: dict[str, np.ndarray]  # SPEC_FEATURES -> values
    peak_flops: np.ndarray  # FLOP/s for the row's dtype
    memory_bandwidth: np.ndarray  # B/s
    intra_node_bandwidth: np.ndarray  # B/s
    inter_node_bandwidth: np.ndarray  # B/s, one NIC
    nvlink_domain_gpus: np.ndarray  # a collective's "node": the GPUs one NVLink fabric joins (catalog)
    nics_per_domain: np.ndarray  # the scale-out NICs of those GPUs' hosts
    is_gpu: np.ndarray  # bool
    codes: np.ndarray  # index into ``devices`` of every row
    devices: tuple[str, ...]  # catalog id of each distinct device in the frame
    device_spec: dict[str, np.ndarray]  # SPEC_FEATURES -> one value per distinct device

    def per_row(self, per_device: np.ndarray) -> np.ndarray:
        """Spread one value per distinct device (a check done once per device, not per row) over the rows."""
        return np.asarray(per_device)[self.codes]


@functools.lru_cache(maxsize=64)
def _spec(hw_id: str) -> HardwareSpec:
    return lookup(hw_id, load_catalog())


@functools.lru_cache(maxsize=64)
def _vector(hw_id: str) -> dict[str, float]:
    return spec_vector(_spec(hw_id))


@functools.lru_cache(maxsize=256)
def _peak(hw_id: str, dtype: str) -> float:
    return _spec(hw_id).peak_flops(dtype)


def _codes(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from stepcast.estimator.frames import factorize

    return factorize(values)


def row_hardware(hardware: pd.Series | np.ndarray, dtype: pd.Series | np.ndarray) -> RowHardware:
    """Gather the catalog's figures for each row. Unknown ids raise UnknownHardwareError (which lists the catalog)."""
    hw_codes, hw_ids = _codes(hardware)
    dt_codes, dtypes = _codes(dtype)
    specs = [_spec(str(h)) for h in hw_ids]
    peak = np.array([[_peak(str(h), str(d)) for d in dtypes] for h in hw_ids], dtype=np.float64)
    vectors = [_vector(str(h)) for h in hw_ids]
    device_spec = {name: np.array([v[name] for v in vectors], dtype=np.float64) for name in SPEC_FEATURES}
    spec_cols = {name: values[hw_codes] for name, values in device_spec.items()}

    def per_device(values: list[float]) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)[hw_codes]

    return RowHardware(
        spec=spec_cols,
        peak_flops=peak[hw_codes, dt_codes],
        memory_bandwidth=per_device([s.memory_bandwidth for s in specs]),
        intra_node_bandwidth=per_device([s.intra_node_bandwidth for s in specs]),
        inter_node_bandwidth=per_device([s.inter_node_bandwidth for s in specs]),
        nvlink_domain_gpus=per_device([s.nvlink_domain_gpus for s in specs]),
        nics_per_domain=per_device([s.nics_per_nvlink_domain for s in specs]),
        is_gpu=per_device([s.kind == "gpu" for s in specs]).astype(bool),
        codes=np.asarray(hw_codes),
        devices=tuple(s.id for s in specs),
        device_spec=device_spec,
    )
