"""One module per kernel family: the shapes real models produce, how to build and run one point, and its cost."""
from __future__ import annotations

from profiling.ops.base import FamilyBench
from profiling.ops.attention import AttentionBench
from profiling.ops.collective import CollectiveBench
from profiling.ops.elementwise import ElementwiseBench
from profiling.ops.gemm import GemmBench
from profiling.ops.norm import NormBench
from profiling.ops.optimizer import OptimizerBench

BENCHES: dict[str, FamilyBench] = {b.family: b for b in (
    GemmBench(), AttentionBench(), ElementwiseBench(), NormBench(), OptimizerBench(), CollectiveBench(),
)}

__all__ = ["BENCHES", "FamilyBench"]
