"""One module per kernel family: the shapes real models produce, how to build and run one point, and its cost."""
from __future__ import annotations

from stepcast.profiling.ops.base import FamilyBench
from stepcast.profiling.ops.attention import AttentionBench
from stepcast.profiling.ops.collective import CollectiveBench
from stepcast.profiling.ops.elementwise import ElementwiseBench
from stepcast.profiling.ops.gemm import GemmBench
from stepcast.profiling.ops.norm import NormBench
from stepcast.profiling.ops.optimizer import OptimizerBench

BENCHES: dict[str, FamilyBench] = {b.family: b for b in (
    GemmBench(), AttentionBench(), ElementwiseBench(), NormBench(), OptimizerBench(), CollectiveBench(),
)}

__all__ = ["BENCHES", "FamilyBench"]
