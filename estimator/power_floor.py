"""The power floor: no compute kernel finishes faster than its board's power lets it do its FLOPs.

    time >= useful FLOPs x energy per FLOP(silicon, dtype) / the board's running power

A board that sustains R FLOP/s within P watts spends at most P / R joules per FLOP, so each training device bounds
the energy per FLOP of its silicon (its SM design and SM count, :func:`silicon_keys`) at a dtype from above; the
floor takes, per (silicon, dtype), the least such figure over the devices fitted (``fit`` at ``FLOOR_QUANTILE``: each
device's fastest GEMM of ``MIN_FLOPS`` or more, the sizes it applies to), so it never binds on a measured row of the
GEMMs it was fitted on and only says what those devices' best kernels show: the same die at the same power cannot run
that dtype faster. What it adds is the board's power: the same die run at a lower limit (``power_limit_w``, e.g.
torchtitan's H100s at 500 of 700 W) gets a proportionally lower ceiling, whatever the model predicting the row learned
(a learned model asked about a board it never saw extrapolates in the clock and peak figures, and a dtype it never saw,
such as fp8, not at all). Other dies get no floor, even of the same generation: a smaller or lower-clocked die runs at
lower voltage and spends less per FLOP (a 70 W T4 does fp32 at 0.74 of a V100's joules per FLOP, a 75 W P4 at 0.61
of a P100's), and a generation's dies differ in datapath (GA100's fp32 against GA102's and AD102's doubled fp32), so a
generation's figure capped unseen boards far below what they do (L40S fp32 GEMMs at 25 TFLOP/s from the A100 PCIe's
figure; each GPU held out end to end on NeuSight's labels, the T4 got worse with it).

A fixed energy per FLOP makes a power-bound rate proportional to the power. Two cases make a lower-power board do
better than that, and the floor then too strict: the fitted board's best kernel was clock- rather than power-limited
(its figure overstates the energy; H100 and H200 GEMMs at 700 W reach 0.71-0.85 of their rated bf16/fp8 peak at
best, the clocks a power limiter holds), or a lower limit lowers the voltage and with it the energy per FLOP (the
catalog's (limit / tdp)^(1/3) clock rule, ``profiling.hardware``, is that case taken whole). One die at two powers in
the data sides with the fixed energy: aiconfigurator's fastest GEMMs on the B200 (1,000 W) and the GB200's B200
(1,200 W) scale with power^0.78 (bf16, 1,674 / 1,929 TFLOP/s) and power^1.09 (fp8, 2,865 / 3,493), not power^(1/3)
(``sustained_rates`` of those rows).

The figures ship with a bundle as data (``power_floor.json``, in its SHA256SUMS, described in its card), fitted on
the bundle's GEMM training rows plus aiconfigurator's per-tensor fp8 GEMM tables (``estimator.importers.
aiconfigurator_gemm``: evidence of what the fp8 datapath sustains, not training rows). A silicon or dtype without
a fitted figure gets no floor; so does a bundle without the file. ``estimator.router.FamilyRouter`` applies it to
every row of the families it covers (GEMMs), whichever model ran the row, and labels the rows it raised.

    python -m stepcast.estimator.power_floor_bundle --bundle models/xgboost     # fit and add to an existing bundle

The tiled GEMM model (``estimator.tiled``) uses the board power and fit (at its own quantile) per generation
(:func:`generation_keys`) for its power cap, a learned model's feature and bound rather than a floor over every model.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stepcast.estimator.frames import Kernels, factorize
from stepcast.estimator.workload import work
from stepcast.errors import InputError

FORMAT = "stepcast-power-floor"
FILENAME = "power_floor.json"     # next to a bundle's manifest.json
#: families the floor covers: their useful FLOPs are what the fitted GEMMs measured
FAMILIES = ("gemm",)
#: GEMMs of at least this many FLOPs run long enough for a board to settle at its power limit
MIN_FLOPS = 1e10
#: devices with fewer such GEMMs say nothing about their generation's energy per FLOP
MIN_ROWS = 20
#: the floor's quantile of each device's sustained FLOP/s: its fastest GEMM, so the floor never binds on a measured row
FLOOR_QUANTILE = 1.0
#: relative difference below which a time counts as on the floor, not under it (rounding)
TIE = 1e-9
#: what a row's prediction is labelled with when the floor raised it (after its model's name@version)
LABEL = "+power_floor"
#: a floor file's keys (:func:`silicon_keys`)
_SILICON_KEY = re.compile(r"^\d+\.\d+x\d+/\w+$")
RULE = ("time >= useful FLOPs x energy per FLOP / board power for GEMMs of at least 1e10 FLOPs, where board power is "
        "the board's power_limit_w (else tdp_w) and energy per FLOP is, per silicon (compute capability and SM count) "
        "and dtype, the least of watts / fastest FLOP/s over the fitted devices' GEMMs of at least 1e10 FLOPs (20 or "
        "more each); no figure, no floor")


def key_dtype(dtype: str) -> str:
    """The dtype part of a silicon key: the fp8 formats share one datapath and peak (as ``peak_flops`` has it)."""
    return "fp8" if dtype.startswith("fp8") else dtype


#: the dtype part of the generation keys of fp16 and bf16: one tensor-core datapath at one rated peak, and one
#: energy per FLOP where a die was measured at both (its fastest GEMMs: A100 1.38 / 1.37 pJ, H100 0.83 / 0.78,
#: bf16 / fp16, ``models/xgboost/power_floor.json``)
HALF = "fp16|bf16"


def datapath(dtype: str) -> str:
    """The dtype part of a generation key: :func:`key_dtype`, with fp16 and bf16 one datapath (:data:`HALF`). A
    generation's figure is the least over its devices, and a dtype measured on one die only would give the
    generation that die's figure: the A40's fp16 (2.5 pJ, a 300 W GA102) capped a held-out A100's fp16 GEMMs at half
    their measured rate while the L40S's bf16 (1.5 pJ) left its bf16 ones theirs. The floor keeps the two apart
    (:func:`silicon_keys`): it is one die's fastest GEMM at each dtype exactly and must not bind on a measured row."""
    return HALF if dtype in ("fp16", "bf16") else key_dtype(dtype)


def _key_table(frame: Kernels, silicon: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(table of keys per (device, dtype) code pair, watts per device, device codes, dtype codes) over a frame's
    distinct values, so that a per-row column costs one gather (a row without a value takes the last entry, as
    ``estimator.frames.by_code`` has it). Keys are generation keys, or with ``silicon`` :func:`silicon_keys`."""
    from stepcast.profiling.hardware import lookup

    codes, devices = factorize(frame["hardware"])
    dcodes, dtypes = factorize(frame["dtype"])
    specs = [lookup(str(d)) for d in devices]
    majors = [(_silicon(s) if silicon else f"{s.compute_capability[0]}") if s.compute_capability and s.tdp_w
              else "" for s in specs] + [""]
    watts = np.array([float(s.power_limit_w or s.tdp_w or np.nan) for s in specs] + [np.nan])
    kinds = [(key_dtype if silicon else datapath)(str(d)) for d in dtypes] + [""]
    table = np.array([[f"{m}/{k}" if m and k else "" for k in kinds] for m in majors], dtype=object)
    return table, watts, np.where(codes < 0, len(majors) - 1, codes), np.where(dcodes < 0, len(kinds) - 1, dcodes)


def generation_keys(frame: Kernels) -> np.ndarray:
    """"<compute capability major>/<datapath>" per row (:func:`datapath`): energy per FLOP is a property of the SM
    generation (its process) and of the unit that runs the dtype; "" for devices without a compute capability or
    board power."""
    table, _, codes, dcodes = _key_table(frame)
    return table[codes, dcodes]


def _silicon(spec) -> str:
    """"<compute capability>x<SMs>": one die configuration, whatever its memory, board or power limit."""
    return f"{spec.compute_capability[0]}.{spec.compute_capability[1]}x{spec.sm_count}"


def silicon_keys(frame: Kernels) -> np.ndarray:
    """"<compute capability>x<SMs>/<dtype>" per row: the floor's keys. A figure transfers only to the same silicon
    (the same SM design and SM count: the H100 SXM's to its 96 GB board at 500 W, the H200's to the H100), not across
    a generation: boards of one generation differ in energy per FLOP by more than the floor may err (the A100's fp32
    figure would cap the L40S's fp32 GEMMs at half what its datapath does, and a 70 W T4 does fp32 at 0.77 of a
    V100's joules per FLOP, lower voltage and clocks); "" for devices without a compute capability or board power."""
    table, _, codes, dcodes = _key_table(frame, silicon=True)
    return table[codes, dcodes]


def board_watts(frame: Kernels) -> np.ndarray:
    """Power each row's board runs at: its ``power_limit_w`` where the catalog sets one, else ``tdp_w``; NaN where
    it has neither."""
    _, watts, codes, _ = _key_table(frame)
    return watts[codes]


def row_joules(frame: Kernels, joules_per_flop: dict[str, float]) -> np.ndarray:
    """Per row, its generation's energy per FLOP (``joules_per_flop`` by ``generation_keys``); NaN without one."""
    return _joules_and_watts(frame, joules_per_flop)[0]


def _joules_and_watts(frame: Kernels, joules_per_flop: dict[str, float], silicon: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (its key's energy per FLOP or NaN, its board's running power); keys as :func:`_key_table`'s."""
    table, watts, codes, dcodes = _key_table(frame, silicon)
    figures = np.array([[joules_per_flop.get(k, np.nan) for k in row] for row in table], dtype=np.float64)
    return figures[codes, dcodes], watts[codes]


def sustained_rates(frame: Kernels, runtime_us: np.ndarray, quantile: float, silicon: bool = False
                    ) -> dict[tuple[str, str], tuple[float, float, int]]:
    """(key, device) -> (watts, ``quantile`` of its FLOP/s over GEMMs of ``MIN_FLOPS`` or more, rows) for every
    device with ``MIN_ROWS`` such GEMMs; keys are generation keys, or with ``silicon`` :func:`silicon_keys`."""
    keys = silicon_keys(frame) if silicon else generation_keys(frame)
    flops = work("gemm", frame).flops
    watts = board_watts(frame)
    hardware = np.asarray(frame["hardware"], dtype=object).astype(str)
    big = (flops >= MIN_FLOPS) & (keys != "") & np.isfinite(watts)
    out = {}
    for key, device in sorted({(k, h) for k, h in zip(keys[big], hardware[big])}):
        rows = big & (keys == key) & (hardware == device)
        if rows.sum() >= MIN_ROWS:
            rate = float(np.quantile(flops[rows] / (runtime_us[rows] * 1e-6), quantile))
            out[(key, device)] = (float(watts[rows][0]), rate, int(rows.sum()))
    return out


def fit_joules_per_flop(frame: Kernels, runtime_us: np.ndarray, quantile: float = FLOOR_QUANTILE
                        ) -> dict[str, float]:
    """Per SM generation and datapath (``generation_keys``), the least energy per FLOP a device implies: its board power
    over its sustained FLOP/s (``quantile`` of its GEMMs over ``MIN_FLOPS``). A device that reaches R FLOP/s within
    P watts spends at most P / R joules per FLOP, so the least is the tightest figure."""
    out: dict[str, float] = {}
    for (key, _), (watts, rate, _) in sustained_rates(frame, np.asarray(runtime_us, dtype=np.float64),
                                                      quantile).items():
        out[key] = min(out.get(key, np.inf), watts / rate)
    return out


def energy_us(frame: Kernels, joules_per_flop: dict[str, float], joules: np.ndarray | None = None,
              flops: np.ndarray | None = None, silicon: bool = False) -> np.ndarray:
    """Per GEMM row, the time (us) its useful ``flops`` (default: the row's) take at its board's running power:
    FLOPs x energy per FLOP (its key's, or ``joules`` per row) / watts; NaN where there is no figure. Keys are
    generation keys, or with ``silicon`` :func:`silicon_keys`."""
    figures, watts = _joules_and_watts(frame, joules_per_flop, silicon)
    if flops is None:
        flops = work("gemm", frame).flops
    return flops * (figures if joules is None else joules) / watts * 1e6


@dataclass
class PowerFloor:
    """Energy per FLOP per silicon key (:func:`silicon_keys`) and where each figure came from."""

    joules_per_flop: dict[str, float] = field(default_factory=dict)
    boards: dict[str, str] = field(default_factory=dict)       # key -> the device whose figure is the least
    meta: dict[str, Any] = field(default_factory=dict)

    def floor_us(self, frame: Kernels) -> np.ndarray:
        """Per row (rows of ``FAMILIES`` only), the least time its board's power allows; NaN without a figure and
        below ``MIN_FLOPS``: the figures hold for kernels long enough to settle at the board's power, and a shorter
        one, timed alone, runs on energy its board stored while idle (NeuSight's T4 and P4, timed one op at a time,
        reach up to 1.2x the floor below 1e10 FLOPs; the floor of every size bound 48 of those rows)."""
        flops = work("gemm", frame).flops
        return np.where(flops >= MIN_FLOPS, energy_us(frame, self.joules_per_flop, flops=flops, silicon=True),
                        np.nan)

    def apply(self, frame: Kernels, predicted_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(predictions raised to the floor where below it, which rows were raised) for rows of one family of
        ``FAMILIES``."""
        floor = self.floor_us(frame)
        raised = np.isfinite(floor) & (floor > predicted_us)
        if not raised.any():
            return predicted_us, raised
        return np.where(raised, floor, predicted_us), raised

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "rule": RULE, "families": list(FAMILIES),
                "joules_per_flop": self.joules_per_flop, "boards": self.boards, "meta": self.meta}

    @classmethod
    def from_json(cls, doc: Any, source: Path | str) -> "PowerFloor":
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InputError(f"{source}: field 'format': expected '{FORMAT}'")
        figures = doc.get("joules_per_flop")
        if not isinstance(figures, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in figures.values()):
            raise InputError(f"{source}: field 'joules_per_flop': expected an object of "
                             "'<compute capability>x<SMs>/<dtype>' -> positive number")
        bad = [k for k in figures if not (isinstance(k, str) and _SILICON_KEY.match(k))]
        if bad:
            raise InputError(f"{source}: field 'joules_per_flop': key '{bad[0]}' is not "
                             "'<compute capability>x<SMs>/<dtype>'")
        return cls({k: float(v) for k, v in figures.items()}, dict(doc.get("boards") or {}),
                   dict(doc.get("meta") or {}))


def fit(frame: Kernels, runtime_us: np.ndarray, quantile: float = FLOOR_QUANTILE) -> PowerFloor:
    """The floor of GEMM rows ``frame`` (measured ``runtime_us``): each key's least energy per FLOP, the device it
    comes from and every device's figure (``meta['devices']``)."""
    rates = sustained_rates(frame, np.asarray(runtime_us, dtype=np.float64), quantile, silicon=True)
    figures: dict[str, float] = {}
    boards: dict[str, str] = {}
    for (key, device), (watts, rate, _) in rates.items():
        if watts / rate < figures.get(key, np.inf):
            figures[key], boards[key] = watts / rate, device
    devices = [{"key": key, "device": device, "watts": watts, "sustained_tflops": round(rate / 1e12, 1),
                "rows": rows, "picojoules_per_flop": round(watts / rate * 1e12, 4)}
               for (key, device), (watts, rate, rows) in rates.items()]
    return PowerFloor(figures, boards, {"quantile": quantile, "min_flops": MIN_FLOPS, "min_rows": MIN_ROWS,
                                        "devices": devices})


def binding(floor: PowerFloor, frame: Kernels, times_us: np.ndarray) -> dict[str, Any]:
    """How often and how far the floor lies above ``times_us`` of GEMM rows ``frame`` (measured or predicted):
    rows with a floor, rows below it, and the largest and median raise (floor / time - 1) among those."""
    floor = floor.floor_us(frame)
    has = np.isfinite(floor)
    ratio = floor[has] / np.asarray(times_us, dtype=np.float64)[has]
    below = ratio > 1.0 + TIE   # the row that sets a figure lies on it
    return {"rows": int(has.sum()), "raised": int(below.sum()),
            "max_raise": float(ratio[below].max() - 1.0) if below.any() else 0.0,
            "median_raise": float(np.median(ratio[below]) - 1.0) if below.any() else 0.0}


def read(path: Path) -> PowerFloor:
    from stepcast.estimator.bundle import read_json

    return PowerFloor.from_json(read_json(path), Path(path))


def for_bundle(root: Path) -> PowerFloor | None:
    """The floor shipped next to a bundle's manifest, or None (the caller has verified its checksum)."""
    from stepcast.estimator.bundle import read_extra

    return read_extra(root, FILENAME, PowerFloor.from_json)


def write(path: Path, floor: PowerFloor) -> None:
    from stepcast.estimator.bundle import write_json_atomic

    write_json_atomic(Path(path), floor.to_json())

