"""One profiling run: resolve the hardware, plan each family, measure what is missing, write the dataset and card.

Called by ``stepcast profile`` (the Hydra app in :mod:`profiling.__main__`) with the composed config.
"""
from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from stepcast.profiling import distributed
from stepcast.profiling.card import (
    Card, FamilySummary, check_compatible, current_fingerprint, now, read_card, write_card,
)
from stepcast.profiling.families import FAMILIES
from stepcast.profiling.hardware import HardwareSpec, UnknownHardwareError, detect, lookup
from stepcast.profiling.ops import BENCHES
from stepcast.profiling.ops.base import describe_failure
from stepcast.profiling.ops.collective import measure_points
from stepcast.profiling.paths import datasets_dir
from stepcast.profiling.plan import plan_family, select_sweep
from stepcast.profiling.progress import make_progress
from stepcast.profiling.sampling import ConfigError, Point, point_id
from stepcast.profiling.schema import SCHEMA_VERSION
from stepcast.profiling.store import FamilyStore, ShardWriter
from stepcast.profiling.timing import L2Flusher, MeasureSettings, Measurement, measure_cpu, measure_cuda

log = logging.getLogger("profiling")


@dataclass(frozen=True)
class Target:
    spec: HardwareSpec
    device: str  # "cuda" | "cpu"

    @property
    def timing(self) -> str:
        return "cuda_event" if self.device == "cuda" else "perf_counter"


@dataclass
class FamilyResult:
    planned: int = 0
    already: int = 0
    measured: int = 0
    failed: int = 0
    seconds: float = 0.0


@dataclass
class RunResult:
    hardware: str
    output: Path
    families: dict[str, FamilyResult] = field(default_factory=dict)

    @property
    def measured(self) -> int:
        return sum(f.measured for f in self.families.values())


def resolve_hardware(name: str) -> Target:
    """``auto``: the first CUDA GPU, else this CPU. An id or vendor name: that catalog entry, which must be here."""
    try:
        spec = detect() if name == "auto" else lookup(name)
    except UnknownHardwareError as exc:
        raise ConfigError(f"hardware: {exc}") from None
    if spec.kind == "gpu" and not torch.cuda.is_available():
        raise ConfigError(f"hardware: '{spec.id}' is a GPU but CUDA is not available on this machine")
    if spec.kind == "gpu" and name != "auto":
        here = torch.cuda.get_device_name(0)
        if _catalog_id(here) not in (None, spec.id):
            raise ConfigError(f"hardware: '{spec.id}' was asked for but this machine's GPU is '{here}'")
    return Target(spec, "cuda" if spec.kind == "gpu" else "cpu")


def _catalog_id(device_name: str) -> str | None:
    """The catalog id of a device name, None for a device the catalog does not know (its yaml may be new)."""
    try:
        return lookup(device_name).id
    except UnknownHardwareError:
        return None


def check_families(families: Any) -> list[str]:
    names = [families] if isinstance(families, str) else list(families or [])
    if not names:
        raise ConfigError(f"families: empty; expected some of {', '.join(FAMILIES)}")
    for name in names:
        if name not in FAMILIES:
            raise ConfigError(f"families: unknown family '{name}': expected one of {', '.join(FAMILIES)}")
    return names


#: numeric run settings: (type, smallest value, may be null)
RUN_SETTINGS: dict[str, tuple[type, float, bool]] = {
    "budget_minutes": (float, 0, False),  # 0 measures nothing but merges what an interrupted run left
    "max_points": (int, 1, True),
    "shard_points": (int, 1, False),
    "seed": (int, 0, False),
    "threads": (int, 1, True),
}


def check_settings(cfg: Any) -> None:
    """Each numeric run setting is a number of the right kind and range (one line naming the setting otherwise)."""
    for name, (kind, low, nullable) in RUN_SETTINGS.items():
        value = cfg.get(name)
        if value is None and nullable:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        whole = kind is float or (number and float(value).is_integer())
        if not number or not whole or value < low:
            expected = ("a number of minutes >= 0" if name == "budget_minutes" else
                        f"a whole number >= {low:g}" + (" or null" if nullable else ""))
            raise ConfigError(f"{name}: expected {expected}, got {value!r}")


def make_row(point: Point, result: Measurement | str, timing: str, threads: int | None) -> dict[str, Any]:
    """One dataset row: the point's columns, then the measurement or the failure."""
    row: dict[str, Any] = {**point.values, "point_id": point.id, "sample": point.sample, "threads": threads}
    if isinstance(result, Measurement):
        row.update(result.as_row(), status="ok", error=None)
    else:
        row.update(median_us=None, min_us=None, mean_us=None, std_us=None, reps=0, timing=timing, kernels=None,
                   status="failed", error=result[:500] or "failed")
    return row


def measure_point(point: Point, target: Target, settings: MeasureSettings, flush: L2Flusher | None
                  ) -> Measurement | str:
    """Build and time one point; any failure (OOM, unsupported dtype or backend) comes back as its message."""
    bench = BENCHES[point.values["family"]]
    fn = None
    try:
        with bench.context(point.values, target.device):
            fn = bench.build(point.values, target.device)
            if target.device == "cuda":
                return measure_cuda(fn, settings, flush)
            return measure_cpu(fn, settings)
    except Exception as exc:
        return describe_failure(exc)
    finally:
        del fn
        if target.device == "cuda":
            gc.collect()
            torch.cuda.empty_cache()


class Runner:
    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.families = check_families(cfg.families)
        check_settings(cfg)
        self.target = resolve_hardware(str(cfg.hardware))
        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        self.settings = MeasureSettings.from_config(cfg.measure)
        root = Path(cfg.output_dir) if cfg.get("output_dir") else datasets_dir()
        self.output = root / self.target.spec.id
        self.world = distributed.external_world()
        self.rank = self.world[0] if self.world else 0
        self.console = Console(stderr=True)

    # -- planning -------------------------------------------------------------------------------------------------
    def plan(self) -> dict[str, list[Point]]:
        kind = self.target.spec.kind
        return {f: plan_family(f, select_sweep(self.cfg[f], kind, f), self.target.spec.id, int(self.cfg.seed),
                               self.cfg.get("max_points")) for f in self.families}

    # -- the run --------------------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        plans = self.plan()
        result = RunResult(self.target.spec.id, self.output)
        fingerprint = current_fingerprint(self.target.spec, self.target.device)
        card_path = self.output / "card.json"
        existing = read_card(card_path) if card_path.exists() else None
        if existing is not None:
            check_compatible(existing, fingerprint, self.target.timing, card_path)
        stores = {f: FamilyStore(self.output, f) for f in self.families}
        todo: dict[str, list[Point]] = {}
        for family, points in plans.items():
            done = stores[family].done_ids() if self.rank == 0 else set()
            todo[family] = [p for p in points if p.id not in done]
            result.families[family] = FamilyResult(planned=len(points), already=len(points) - len(todo[family]))
        order = sorted(self.families, key=lambda f: f != "collective") if self.world else self.families
        budget_s = float(self.cfg.budget_minutes) * 60.0
        started = time.monotonic()
        progress = make_progress(self.console, enabled=bool(self.cfg.get("progress", True)) and self.rank == 0)
        tasks = {f: progress.add_task(f, total=len(todo[f]), current="") for f in order}
        flush = L2Flusher(int(self.target.spec.l2_cache_mib * 2**20)) \
            if self.target.device == "cuda" and self.settings.l2_flush else None
        try:
            with progress:
                for i, family in enumerate(order):
                    deadline = self._family_deadline(order[i:], budget_s - (time.monotonic() - started))
                    self._run_family(family, todo[family], stores[family], deadline, flush, progress,
                                     tasks[family], result.families[family])
        finally:
            if self.rank == 0:
                self._finish(stores, fingerprint, existing)
        if self.rank == 0:
            self._report(result)
        return result

    def _family_deadline(self, families: list[str], remaining_s: float) -> float:
        """The time.time() at which the first of ``families`` stops: its budget_share of what is left."""
        shares = [float(select_sweep(self.cfg[f], self.target.spec.kind, f).get("budget_share", 1.0))
                  for f in families]
        return time.time() + max(0.0, remaining_s) * shares[0] / max(sum(shares), 1e-9)

    def _run_family(self, family: str, points: list[Point], store: FamilyStore, deadline: float,
                    flush: L2Flusher | None, progress: Progress, task: TaskID, outcome: FamilyResult) -> None:
        """Measure ``points`` until done or ``deadline``, flushing rows to shards as they come."""
        started = time.monotonic()
        writer = ShardWriter(store, int(self.cfg.shard_points))
        if family == "collective":
            rows = self._collective_rows(points, deadline, progress, task)
        elif self.rank == 0:
            rows = self._local_rows(points, deadline, flush, progress, task)
        else:
            rows = iter(())
        try:
            for row in rows:  # other ranks take part in the collectives; rank 0 alone writes
                if self.rank == 0:
                    writer.add(row)
                    outcome.measured += 1
                    outcome.failed += row["status"] == "failed"
        finally:
            writer.flush()
            outcome.seconds = time.monotonic() - started

    def _local_rows(self, points: list[Point], deadline: float, flush: L2Flusher | None, progress: Progress,
                    task: TaskID) -> Iterator[dict[str, Any]]:
        threads = torch.get_num_threads() if self.target.device == "cpu" else None
        for point in points:
            if time.time() >= deadline:
                return
            progress.update(task, current=point.label())
            outcome = measure_point(point, self.target, self.settings, flush)
            progress.advance(task)
            yield make_row(point, outcome, self.target.timing, threads)

    def _collective_rows(self, points: list[Point], deadline: float, progress: Progress, task: TaskID
                         ) -> Iterator[dict[str, Any]]:
        """Collectives: through the external process group (torchrun / submitit), else one local world of ranks."""
        device, timing = self.target.device, self.target.timing
        threads = 1 if device == "cpu" else None
        backend = "nccl" if device == "cuda" else "gloo"
        runnable: list[Point] = []
        for point in points:
            if point.values["backend"] == backend:
                runnable.append(point)
            else:  # recorded as failed: this dataset's device cannot run that backend
                progress.advance(task)
                yield make_row(point, f"backend {point.values['backend']} does not run on this {device} dataset "
                                      f"(use {backend})", timing, threads)
        if self.world:
            measured = self._external_collectives(runnable, deadline)
        else:
            measured = self._local_collectives(runnable, backend, deadline, progress, task)
        by_id = {p.id: p for p in runnable}
        for kind, values, outcome in measured:
            point = by_id[point_id(values)]
            if kind == "start":
                progress.update(task, current=point.label())
                continue
            progress.advance(task)
            yield make_row(point, outcome, timing, threads)

    def _local_collectives(self, points: list[Point], backend: str, deadline: float, progress: Progress,
                           task: TaskID) -> Iterator[tuple[str, dict[str, Any], Any]]:
        """One world of local ranks as large as the largest point; smaller points run in subgroups of it."""
        device = self.target.device
        local: list[Point] = []
        for point in points:
            ranks, per_node = point.values["ranks"], point.values["ranks_per_node"]
            if per_node != ranks:
                log.info("skipping %s: needs %d nodes (run it under torchrun)", point.label(), ranks // per_node)
            elif device == "cuda" and ranks > torch.cuda.device_count():
                log.info("skipping %s: needs %d GPUs, this node has %d", point.label(), ranks,
                         torch.cuda.device_count())
            else:
                local.append(point)
        if not local:
            return iter(())
        local.sort(key=lambda p: p.values["ranks"])
        world = local[-1].values["ranks"]
        progress.update(task, current=f"starting {world} {backend} ranks")
        return distributed.run_local_world([dict(p.values) for p in local], world, backend, device, self.settings,
                                           deadline)

    def _external_collectives(self, points: list[Point], deadline: float
                              ) -> Iterator[tuple[str, dict[str, Any], Any]]:
        """Every rank of the launcher's world measures the points of exactly that world (rank 0's list)."""
        rank, world, per_node = self.world
        distributed.init_external(self.target.device)
        mine = [p for p in points if p.values["ranks"] == world and p.values["ranks_per_node"] == per_node]
        shared: list[Any] = [[dict(p.values) for p in mine], deadline]
        dist.broadcast_object_list(shared, src=0)  # rank 0's view of what is missing, and its deadline
        return measure_points(shared[0], self.settings, self.target.device, shared[1])

    # -- output ---------------------------------------------------------------------------------------------------
    def _finish(self, stores: dict[str, FamilyStore], fingerprint: Any, existing: Card | None) -> None:
        summaries = dict(existing.families) if existing else {}
        for family, store in stores.items():
            store.consolidate()
            frame = store.read()
            if len(frame):
                ok = int((frame["status"] == "ok").sum())
                summaries[family] = FamilySummary(points=len(frame), ok=ok, failed=len(frame) - ok)
        if not summaries:
            return
        card = Card(
            schema_version=SCHEMA_VERSION, hardware=self.target.spec.id, timing=self.target.timing,
            created=existing.created if existing else now(), updated=now(), fingerprint=fingerprint,
            measure={**self.settings.__dict__, "threads": fingerprint.threads}, families=summaries,
        )
        self.output.mkdir(parents=True, exist_ok=True)
        write_card(card, self.output / "card.json")

    def _report(self, result: RunResult) -> None:
        table = Table(title=f"{result.hardware} -> {result.output}")
        for col in ("family", "planned", "already there", "measured now", "failed now", "seconds"):
            table.add_column(col, justify="left" if col == "family" else "right")
        for family, r in result.families.items():
            table.add_row(family, str(r.planned), str(r.already), str(r.measured), str(r.failed), f"{r.seconds:.1f}")
        self.console.print(table)


def run(cfg: Any) -> RunResult:
    return Runner(cfg).run()
