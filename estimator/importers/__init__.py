"""Importers of public GPU measurements into training rows (one module per source; see ``estimator.data``).

Each module exposes ``load(root: Path) -> pd.DataFrame`` (rows in the schema of ``estimator.importers.common``)
and ``input_files(root: Path) -> list[Path]`` (what it reads, for the cache key). ``root`` is the shared data folder
(``profiling.paths.shared_data_root()``), except for ``profiler`` whose root is the project's ``datasets/`` folder.

``neusight_inmodel`` (NeuSight's per-operator times inside whole-model runs) has the same interface but is not a
training source of the estimators (not in ``SOURCES``): its rows calibrate predicted kernel times to in-step times
per GPU and family (``emulate.sim.instep``), holding out the model the end-to-end benchmark evaluates.
``aiconfigurator_moe`` (fused mixture-of-experts layers) has it too and is not one either: a fused MoE layer is no
kernel family of ``profiling.families``; its rows fit ``estimator.moe`` (``python -m benchmarks.emulate.moe``).
"""
from __future__ import annotations

from types import ModuleType

from stepcast.estimator.importers import (
                                 aiconfigurator_attention,
                                 aiconfigurator_gemm,
                                 aiconfigurator_nccl,
                                 kineto,
                                 llmcompass,
                                 neusight,
                                 profiler,
                                 vidur,
                                 vidur_attention,
                                 vidur_network,
)
from stepcast.estimator.importers.common import SOURCES, TRAINING_COLUMNS, DataImportError

#: source name (the ``source`` column) -> the modules that produce its rows
IMPORTERS: dict[str, tuple[ModuleType, ...]] = {
    "profiler": (profiler,),
    "vidur": (vidur, vidur_network, vidur_attention),
    "neusight": (neusight,),
    "kineto": (kineto,),
    "llmcompass": (llmcompass,),
    "aiconfigurator": (aiconfigurator_gemm, aiconfigurator_attention, aiconfigurator_nccl),
}
assert tuple(IMPORTERS) == SOURCES

__all__ = ["IMPORTERS", "SOURCES", "TRAINING_COLUMNS", "DataImportError"]
