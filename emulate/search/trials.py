"""One trial = one emulation (``stepcast run``, rank deduplication on), and the cache of their results.

A trial's result is decided by the script's content, its arguments and environment, the target (the hardware
spec itself, GPU count, nodes) and the estimator version (the default bundle's SHA256SUMS, or STEPCAST_ESTIMATOR,
and the stepcast version); the cache key is the SHA-256 of exactly these, so a repeated or resumed search runs
nothing it has run before, and a changed script or retrained estimator runs everything again. Results are files
``<cache>/trials/<key>.json`` written atomically (a search killed mid-trial leaves no half-written result).

Outcome of a trial (``status``): ``ok`` (the report's iteration time and peak memory); ``oom``: the script raised
torch's OutOfMemoryError on the virtual GPU (cudaMalloc fails beyond the target's memory), read from the ranks'
sidecars (``rank<N>.log.ops.json`` field ``status``) or the script's output, so the configuration is infeasible;
``error``: the script failed otherwise (the last line of its output says why). ``ok``, ``oom`` and a script's own
failure (``emulate run`` exit 3: a rank failed) are cached; an interrupted emulation (exit 128 + N) raises
:class:`TrialInterrupted`, and a failure of the emulator itself (any other exit: bad input, a crash, a timeout) is
returned with ``transient: true`` and not cached, so fixing the tooling and rerunning the search retries it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from stepcast.emulate import config
from stepcast.profiling.atomic import write_json_atomic
from stepcast.profiling.paths import MODELS_DIR, cache_root
from stepcast import settings
from stepcast.errors import Interrupted

OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory")
EXIT_RANK_FAILED = 3  # emulate run: the script failed on some rank (emulate.launcher.EXIT_RANK_FAILED)
CACHE_FORMAT = 1


class TrialInterrupted(Interrupted):
    """The emulation was stopped by a signal (the search is being interrupted): nothing is cached. The search
    command reports it as an interrupted search (exit 130), its results so far cached."""


@dataclass
class TrialResult:
    """What a search knows about one configuration."""
    config: dict[str, Any]
    status: str                      # ok | oom | error | pruned
    iteration_time_ms: float | None = None
    peak_memory_bytes: int | None = None
    tokens_per_s: float | None = None
    reason: str | None = None        # why oom/error/pruned
    emulation_s: float = 0.0         # wall seconds the emulation took (when it ran, or when the cached one ran)
    cached: bool = False
    key: str | None = None
    warnings: list[str] = field(default_factory=list)
    predicted_peak_gib: float | None = None   # the learned memory model's prediction before it ran (or was pruned)

    @property
    def feasible(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("cached")
        return doc


def default_cache_dir() -> Path:
    return cache_root() / "search"


def estimator_version() -> str:
    """What decides a trial's timings besides its script and target: the estimator the emulator loads, the host
    model (counted or measured, and the costs it counts with: emulate/host_call_costs.json) and the stepcast
    version."""
    try:
        stepcast = version("stepcast")
    except PackageNotFoundError:
        stepcast = "unknown"
    costs = Path(config.HOST_CALL_COSTS_FILE)
    host = f"host={config.HOST_MODEL}:" + (hashlib.sha256(costs.read_bytes()).hexdigest()[:16] if costs.is_file()
                                           else "no-costs")
    chosen = settings.get("STEPCAST_ESTIMATOR")
    if chosen:
        return f"{chosen};{host};stepcast={stepcast}"
    sums = MODELS_DIR / "xgboost" / "SHA256SUMS"
    digest = hashlib.sha256(sums.read_bytes()).hexdigest() if sums.is_file() else "no-bundle"
    return f"xgboost:{digest};{host};stepcast={stepcast}"


@dataclass(frozen=True)
class Target:
    """Where the trials run: the hardware id, its spec as JSON (so a changed catalog entry is a new target), ranks."""
    hardware: str
    spec_json: str
    nproc: int
    nodes: int
    memory_gib: float


def trial_key(script: Path, args: list[str], env: dict[str, str], target: Target, estimator: str) -> str:
    doc = {"format": CACHE_FORMAT, "script_sha256": hashlib.sha256(script.read_bytes()).hexdigest(), "args": args,
           "env": sorted(env.items()), "spec": target.spec_json, "nproc": target.nproc, "nodes": target.nodes,
           "estimator": estimator}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class TrialCache:
    """Results by key, one JSON file each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / "trials"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self.directory / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def put(self, key: str, doc: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.directory / f"{key}.json", doc)


def run_trial(script: Path, args: list[str], env: dict[str, str], target: Target, timeout_s: float | None = None
              ) -> dict[str, Any]:
    """Emulate one configuration (:func:`emulate.emulation.emulate_script`, the one way an emulation is run);
    the cacheable outcome (status, iteration time, peak memory, reason, seconds)."""
    from stepcast.emulate.emulation import emulate_script

    with tempfile.TemporaryDirectory(prefix="stepcast-search-") as tmp:
        trace_dir = Path(tmp) / "traces"
        done = emulate_script(script, list(args), target.hardware, nproc=target.nproc, timeout_s=timeout_s,
                              kernels=False, env={**os.environ, **env}, options=["--nodes", str(target.nodes)],
                              trace_dir=trace_dir)
        seconds = done["wall_s"]
        if done["ok"]:
            doc = done["report"]
            return {"status": "ok", "iteration_time_ms": float(doc["iteration_time_ms"]),
                    "peak_memory_bytes": doc.get("peak_memory_bytes"), "warnings": doc.get("warnings", []),
                    "emulation_s": seconds}
        code = done["returncode"]
        if code is None:
            return {"status": "error", "reason": f"emulation took longer than {timeout_s:g} s",
                    "emulation_s": seconds, "transient": True}
        if code > 128:
            raise TrialInterrupted(code - 128, f"emulation stopped by signal {code - 128}")
        oom = out_of_memory(trace_dir, done["output"])
        if oom is not None:
            return {"status": "oom", "reason": oom, "emulation_s": seconds}
        lines = [line for line in done["output"].strip().splitlines() if line.strip()]
        return {"status": "error", "reason": f"exit {code}: {(lines or ['no output'])[-1][:300]}",
                "emulation_s": seconds, "transient": code != EXIT_RANK_FAILED}


def out_of_memory(trace_dir: Path, output: str) -> str | None:
    """The out-of-memory message of a failed emulation, from the ranks' sidecars or else the output; None if the
    failure was something else."""
    for sidecar in sorted(trace_dir.glob("rank*.log.ops.json")):
        try:
            status = json.loads(sidecar.read_text()).get("status", {})
        except (OSError, json.JSONDecodeError):
            continue
        if status.get("exit") == "exception" and "OutOfMemoryError" in status.get("type", ""):
            rank = sidecar.name.split(".")[0]
            return f"{rank}: {status.get('message', 'out of memory')[:200]}"
    for line in output.splitlines():
        if any(marker in line for marker in OOM_MARKERS):
            return line.strip()[:200]
    return None
