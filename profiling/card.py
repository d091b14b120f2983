"""``datasets/<hardware>/card.json``: how a dataset was measured (hardware fingerprint, versions, timing method).

Profiles taken with different library versions or timing methods must not be mixed silently, so a run that would
append to a dataset measured under another fingerprint is refused (see :func:`check_compatible`).
"""
from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepcast.profiling.atomic import atomic_path
from stepcast.profiling.hardware import HardwareSpec, cpu_model_name
from stepcast.profiling.schema import SCHEMA_VERSION, DatasetSchemaError

Timing = Literal["cuda_event", "perf_counter"]


class Fingerprint(BaseModel):
    """The machine and software a dataset was measured on. GPU fields are null on a CPU run."""

    model_config = ConfigDict(extra="forbid")

    device_name: str
    kind: Literal["gpu", "cpu"]
    sm_count: Optional[int] = None
    clock_mhz: Optional[float] = None
    memory_gib: Optional[float] = None
    driver: Optional[str] = None
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    nccl: Optional[str] = None
    torch: str
    python: str
    cpu_model: str
    cpu_count: int = Field(gt=0)
    threads: int = Field(gt=0, description="torch intra-op threads used for the measurements")
    platform: str


class FamilySummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    points: int = Field(ge=0)
    ok: int = Field(ge=0)
    failed: int = Field(ge=0)


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(ge=1)
    hardware: str
    timing: Timing
    created: datetime
    updated: datetime
    fingerprint: Fingerprint
    measure: dict[str, Any] = {}
    families: dict[str, FamilySummary] = {}


def _nvidia_driver() -> Optional[str]:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml absent or no driver: read the kernel module's version instead
        try:
            return Path("/proc/driver/nvidia/version").read_text().split("Kernel Module")[1].split()[0]
        except (OSError, IndexError):
            return None


def _nccl_version() -> Optional[str]:
    try:
        import torch.cuda.nccl as nccl

        version = nccl.version()
    except Exception:  # a build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def current_fingerprint(spec: HardwareSpec, device: str) -> Fingerprint:
    """Describe this process's machine; ``device`` is "cuda" or "cpu"."""
    import torch

    gpu: dict[str, Any] = {}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        nccl = _nccl_version()
        gpu = {
            "device_name": props.name,
            "sm_count": props.multi_processor_count,
            "clock_mhz": getattr(props, "clock_rate", 0) / 1000 or spec.max_clock_mhz,
            "memory_gib": round(props.total_memory / 2**30, 2),
            "driver": _nvidia_driver(),
            "cuda": torch.version.cuda,
            "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
            "nccl": nccl,
        }
    else:
        gpu = {"device_name": cpu_model_name(), "sm_count": spec.sm_count, "clock_mhz": spec.max_clock_mhz,
               "memory_gib": spec.memory_gib}
    return Fingerprint(
        kind="gpu" if device == "cuda" else "cpu",
        torch=torch.__version__,
        python=platform.python_version(),
        cpu_model=cpu_model_name(),
        cpu_count=os.cpu_count() or 1,
        threads=torch.get_num_threads(),
        platform=platform.platform(terse=True),
        **gpu,
    )


def read_card(path: Path) -> Card:
    """Read and validate a card; a malformed one raises DatasetSchemaError naming the file and the field."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetSchemaError(f"{path}: not a readable JSON card ({exc.__class__.__name__})") from None
    try:
        return Card.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise DatasetSchemaError(f"{path}: field '{field}': {err['msg']}") from None


def write_card(card: Card, path: Path) -> Path:
    """Validate and write atomically."""
    path = Path(path)
    Card.model_validate(card.model_dump())
    with atomic_path(path) as tmp:
        tmp.write_text(card.model_dump_json(indent=2) + "\n")
    return path


# Fields that change what a measurement means; a dataset must not mix values of these.
COMPATIBILITY_FIELDS = ("device_name", "kind", "torch", "cuda", "cudnn")


def check_compatible(existing: Card, fingerprint: Fingerprint, timing: Timing, path: Path) -> None:
    """Refuse to append to a dataset measured with another device, library version or timing method."""
    if existing.schema_version != SCHEMA_VERSION:
        raise DatasetSchemaError(f"{path}: field 'schema_version': {existing.schema_version}, "
                                 f"expected {SCHEMA_VERSION}")
    if existing.timing != timing:
        raise DatasetSchemaError(f"{path}: field 'timing': dataset measured with {existing.timing}, this run uses "
                                 f"{timing}; choose another output_dir")
    for name in COMPATIBILITY_FIELDS:
        old, new = getattr(existing.fingerprint, name), getattr(fingerprint, name)
        if old != new:
            raise DatasetSchemaError(f"{path}: field 'fingerprint.{name}': dataset measured with '{old}', this run "
                                     f"has '{new}'; choose another output_dir")


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)
