"""Hardware catalog: public spec figures per device, looked up by id or vendor name.

Each device is one YAML file in ``conf/hardware/<id>.yaml``. The estimators use these figures as features, so a
device with no measurements can still be described (and predicted) from its yaml alone.

A board run below its rated power (``power_limit_w`` under ``tdp_w``; e.g. torchtitan's H100s "at the default 500 W
power limit") holds a lower clock under sustained load. The file gives the rated figures (``max_clock_mhz``,
``peak_tflops`` at ``tdp_w``) and the limit; at load, the clock is scaled by ``(power_limit_w / tdp_w) ** (1/3)``
(dynamic power grows with frequency x voltage squared, and voltage with frequency under DVFS, so power ~ f^3), and
so is every ``peak_tflops`` entry (they are SMs x FLOP/clock x clock). So ``max_clock_mhz`` and ``peak_tflops``
of a loaded spec are the board's as it runs, and the estimators' clock and peak features and the roofline use them;
``rated_clock_mhz`` keeps the file's figure. Memory bandwidth is not scaled (HBM has its own clock).
"""
from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from stepcast.profiling.classify import canonical_dtype
from stepcast.profiling.paths import HARDWARE_DIR, user_hardware_dir
from stepcast import settings
from stepcast.errors import InputError, UnknownNameError

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")


#: per compute capability, what one SM holds (CUDA C++ Programming Guide, "Technical Specifications per Compute
#: Capability"): (resident threads, resident blocks, opt-in shared memory per block in KiB, None: the SM's shared
#: memory less 1 KiB). The emulated driver reports these (emulate/driver/device.py); the engine sizes launches by them.
SM_LIMITS: dict[tuple[int, int], tuple[int, int, int | None]] = {
    (6, 0): (2048, 32, 48), (6, 1): (2048, 32, 48), (7, 0): (2048, 32, 96), (7, 5): (1024, 16, 64),
    (8, 0): (2048, 32, None), (8, 6): (1536, 16, None), (8, 7): (1536, 16, None), (8, 9): (1536, 24, None),
    (9, 0): (2048, 32, None), (10, 0): (2048, 32, None), (10, 3): (2048, 32, None), (12, 0): (1536, 32, None),
    (12, 1): (1536, 32, None),
}


class UnknownHardwareError(UnknownNameError):
    """Raised for an id or device name that is not in the catalog; its message lists the catalog."""


class HardwareSpec(BaseModel):
    """Public spec figures of one device. Bandwidths are GB/s (1e9 B/s), unidirectional per device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    kind: Literal["gpu", "cpu"]
    vendor: str
    aliases: list[str] = []
    architecture: str
    compute_capability: tuple[int, int] | None = None
    sm_count: int = Field(gt=0, description="SMs on a GPU; physical cores on a CPU")
    max_clock_mhz: float = Field(gt=0)
    base_clock_mhz: float | None = Field(default=None, gt=0, description="the spec sheet's base clock: what the "
                                         "board guarantees under sustained load within tdp_w (max_clock_mhz is "
                                         "its boost); as the file gives it, never scaled by power_limit_w")
    memory_gib: float = Field(gt=0)
    memory_bandwidth_gbps: float = Field(gt=0)
    l2_cache_mib: float = Field(gt=0)
    shared_memory_per_sm_kib: float | None = None
    peak_tflops: dict[str, float]
    nvlink_bandwidth_gbps: float | None = None
    nvlink_topology: Literal["switch", "pairs"] | None = Field(
        default=None, description="how a node's NVLink joins its GPUs: 'switch' (every GPU on NVSwitches, SXM boards) "
        "or 'pairs' (two-board bridges, PCIe cards, PCIe beyond the pair); required with nvlink_bandwidth_gbps")
    pcie_bandwidth_gbps: float | None = None
    network_bandwidth_gbps: float | None = Field(default=None, description="one NIC's bandwidth (the scale-out "
                                                  "network, GB/s one way); a GPU sends over one")
    gpus_per_node: int = Field(default=8, gt=0, description="GPUs of one host (one OS, what --nproc fills)")
    nvlink_domain_gpus: int = Field(
        default=8, gt=0, description="GPUs one NVLink fabric joins: a collective whose ranks all lie in one domain "
        "runs at NVLink rates, the scale-out network starts past it. Default the host's gpus_per_node (an 8-GPU "
        "HGX board); a whole number of hosts, more than one only through NVLink switches (nvlink_topology 'switch': "
        "GB200 / GB300 NVL72, 18 hosts of 4 GPUs on one NVSwitch fabric)")
    network_nics_per_node: int | None = Field(
        default=None, gt=0, description="scale-out NICs per node; default one per GPU (gpus_per_node), as on DGX and "
        "HGX nodes with rail-optimised networks. A ring across nodes runs one channel per NIC its node's ranks reach, "
        "so its bus bandwidth grows with them (NCCL maintainers, NVIDIA/nccl#412: 24 GB/s inter-node with one 200 Gb/s "
        "NIC, 'add more NICs ... up to' the NVLink bandwidth; nccl-tests#175: 4 x 200 Gb/s, 100 GB/s theoretical); an "
        "all-to-all or a send does not aggregate NICs (nccl-tests#267)")
    gpus_per_pcie_switch: int = Field(
        default=2, gt=0, description="GPUs that meet under one PCIe switch (peer-to-peer without the CPU root "
        "complex); a ring over more crosses the root complex. Default 2: the 8-GPU servers' usual layout, e.g. AWS's "
        "NCCL topology file for p4d.24xlarge (aws-ofi-nccl, topology/p4d-24xl-topo.xml: 'each group has 2 GPUs and "
        "1 NIC behind a PCIe switch'), or the whole node where it holds fewer; at most gpus_per_node")
    tdp_w: float | None = None
    power_limit_w: float | None = Field(default=None, gt=0, description="configured board power limit, if below "
                                        "tdp_w: clock and peaks are derived from it (module docstring)")
    rated_clock_mhz: float | None = Field(default=None, description="set at load: max_clock_mhz as the file gives "
                                          "it, before a power limit scales it")

    @field_validator("gpus_per_pcie_switch")
    @classmethod
    def _switch_within_node(cls, value: int, info: ValidationInfo) -> int:
        """A switch holds no more GPUs than the node does (a node's GPUs all under one switch is ``gpus_per_node``)."""
        node = info.data.get("gpus_per_node")
        if node is not None and value > node:
            raise ValueError(f"is {value}, more than gpus_per_node ({node})")
        return value

    @model_validator(mode="after")
    def _nvlink_has_a_topology(self):
        """A node's NVLink figure means nothing without how it joins the GPUs (all through switches, or in pairs)."""
        if bool(self.nvlink_bandwidth_gbps) != (self.nvlink_topology is not None):
            raise ValueError("nvlink_topology ('switch' or 'pairs') is set exactly when nvlink_bandwidth_gbps is")
        return self

    @field_validator("nvlink_domain_gpus")
    @classmethod
    def _domain_of_whole_hosts(cls, value: int, info: ValidationInfo) -> int:
        """An NVLink domain is whole hosts, and spans several only where NVLink switches join them."""
        host = info.data.get("gpus_per_node")
        if host is None:
            return value
        if value % host:
            raise ValueError(f"is {value}, expected a multiple of gpus_per_node ({host}): a domain holds whole hosts")
        if value > host and info.data.get("nvlink_topology") != "switch":
            raise ValueError(f"is {value}, more than one host's {host} GPUs: only NVLink switches join hosts "
                             "(nvlink_topology 'switch')")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_domain_is_the_host(cls, data):
        """A file without ``nvlink_domain_gpus`` has one host's GPUs in its NVLink domain."""
        if isinstance(data, dict) and data.get("nvlink_domain_gpus") is None:
            data = dict(data) | {"nvlink_domain_gpus": data.get("gpus_per_node",
                                                                 cls.model_fields["gpus_per_node"].default)}
        return data

    @model_validator(mode="before")
    @classmethod
    def _default_switch_within_node(cls, data):
        """A file without ``gpus_per_pcie_switch`` gets 2, or its whole node where that holds fewer GPUs."""
        if isinstance(data, dict) and data.get("gpus_per_pcie_switch") is None:
            node = data.get("gpus_per_node", cls.model_fields["gpus_per_node"].default)
            data = dict(data) | {"gpus_per_pcie_switch": min(2, node) if isinstance(node, int) and node > 0 else 2}
        return data

    @model_validator(mode="before")
    @classmethod
    def _apply_power_limit(cls, data):
        """Scale the clock and peaks of a power-limited board (module docstring); other boards are unchanged."""
        if not isinstance(data, dict) or data.get("rated_clock_mhz") is not None:
            return data
        limit, tdp = data.get("power_limit_w"), data.get("tdp_w")
        if limit is None:
            return data
        if tdp is None:
            raise ValueError("power_limit_w needs tdp_w (the power the rated clock and peaks hold at)")
        scale = min(1.0, float(limit) / float(tdp)) ** (1.0 / 3.0)
        data = dict(data)
        data["rated_clock_mhz"] = data.get("max_clock_mhz")
        if isinstance(data.get("max_clock_mhz"), (int, float)):
            data["max_clock_mhz"] = data["max_clock_mhz"] * scale
        if isinstance(data.get("peak_tflops"), dict):
            data["peak_tflops"] = {k: (v * scale if isinstance(v, (int, float)) else v)
                                   for k, v in data["peak_tflops"].items()}
        return data

    @property
    def power_clock_scale(self) -> float:
        """Sustained clock over the rated one (1.0 for a board at its rated power)."""
        return self.max_clock_mhz / self.rated_clock_mhz if self.rated_clock_mhz else 1.0

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a dtype; dtypes without tensor-core support fall back to the fp32 rate."""
        key = canonical_dtype(dtype) or dtype
        if key.startswith("fp8"):  # one fp8 rate for both formats
            key = "fp8"
        if key in self.peak_tflops:
            return self.peak_tflops[key] * 1e12
        if key == "fp8":  # no fp8 units: emulated through fp16 at best
            return self.peak_tflops.get("fp16", self.peak_tflops["fp32"]) * 1e12
        return self.peak_tflops["fp32"] * 1e12

    @property
    def max_threads_per_sm(self) -> int:
        """Resident threads one SM holds (:data:`SM_LIMITS`; 2048 for a capability it does not list)."""
        return SM_LIMITS.get(tuple(self.compute_capability or ()), (2048,))[0]

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @property
    def memory_bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_bandwidth_gbps * 1e9

    @property
    def intra_node_bandwidth(self) -> float:
        """Bytes per second between devices of one node: NVLink when present, else PCIe."""
        return (self.nvlink_bandwidth_gbps or self.pcie_bandwidth_gbps or 16.0) * 1e9

    @property
    def inter_node_bandwidth(self) -> float:
        """Bytes per second of one NIC (what one GPU's traffic across nodes crosses)."""
        return (self.network_bandwidth_gbps or 12.5) * 1e9

    @property
    def nics_per_node(self) -> int:
        return self.network_nics_per_node or self.gpus_per_node

    @property
    def hosts_per_nvlink_domain(self) -> int:
        return self.nvlink_domain_gpus // self.gpus_per_node

    @property
    def nics_per_nvlink_domain(self) -> int:
        """Scale-out NICs of one NVLink domain: what a collective's traffic leaving the domain can add up."""
        return self.nics_per_node * self.hosts_per_nvlink_domain

    def ranks_per_nvlink_domain(self, ranks_per_host: int) -> int:
        """Ranks one NVLink domain holds when each of its hosts runs ``ranks_per_host`` (at most a host's GPUs)."""
        return min(ranks_per_host, self.gpus_per_node) * self.hosts_per_nvlink_domain


def normalise_name(name: str) -> str:
    """Device names compared without case, spaces or punctuation ("NVIDIA A100-SXM4-80GB" ~ "nvidia a100 sxm4 80gb")."""
    return re.sub(r"[^a-z0-9]+", "", name.lower())


def load_spec(path: Path) -> HardwareSpec:
    """Read one catalog file; a malformed file raises ValueError naming the file and the field."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of spec fields")
    try:
        spec = HardwareSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise InputError(f"{path}: field '{field}': {err['msg']}") from None
    if spec.id != path.stem:
        raise InputError(f"{path}: field 'id' is '{spec.id}', expected the file name '{path.stem}'")
    return spec


@functools.lru_cache(maxsize=8)
def load_catalog(directory: Path | None = None) -> dict[str, HardwareSpec]:
    """Every device of the catalog: ``directory``, else STEPCAST_HARDWARE_DIR, else the shipped catalog with the
    user's own entries (:mod:`profiling.describe_cpu`'s, in the user hardware folder) over it."""
    configured = directory or settings.get("STEPCAST_HARDWARE_DIR")
    folders = [Path(configured)] if configured else [HARDWARE_DIR, user_hardware_dir()]
    return {p.stem: load_spec(p) for folder in dict.fromkeys(folders) for p in sorted(folder.glob("*.yaml"))}


def lookup(id_or_name: str, catalog: dict[str, HardwareSpec] | None = None) -> HardwareSpec:
    """Find a device by catalog id (``h100-sxm``) or vendor name (``NVIDIA H100 80GB HBM3``)."""
    catalog = catalog if catalog is not None else load_catalog()
    if id_or_name in catalog:
        return catalog[id_or_name]
    wanted = normalise_name(id_or_name)
    for spec in catalog.values():
        if wanted in {normalise_name(spec.id), normalise_name(spec.name)} | {normalise_name(a) for a in spec.aliases}:
            return spec
    raise UnknownHardwareError(
        f"unknown hardware '{id_or_name}': expected one of {', '.join(sorted(catalog))} "
        f"(or a vendor name listed as an alias in conf/hardware/*.yaml)"
    )


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_hardware_id(model_name: str | None = None, cores: int | None = None) -> str:
    """A stable id for this machine's CPU, e.g. ``cpu-intel-xeon-2c``."""
    model_name = model_name or cpu_model_name()
    cores = cores or os.cpu_count() or 1
    slug = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$", " ", model_name.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-")
    return f"cpu-{slug}-{cores}c"


def detect() -> HardwareSpec:
    """The device this process would run on: the first CUDA GPU when present, else this machine's CPU."""
    try:
        import torch

        if torch.cuda.is_available():
            return lookup(torch.cuda.get_device_name(0))
    except ImportError:
        pass
    hw_id = cpu_hardware_id()
    catalog = load_catalog()
    if hw_id in catalog:
        return catalog[hw_id]
    raise UnknownHardwareError(
        f"this machine's CPU ('{cpu_model_name()}') has no catalog entry conf/hardware/{hw_id}.yaml: "
        f"write one (python -m stepcast.profiling.describe_cpu writes it from /proc/cpuinfo)"
    )
