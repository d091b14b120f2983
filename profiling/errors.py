"""Kept only for :mod:`emulate.e2e.diagnose`, which imports :func:`report` from here and is moving to the
``benchmarks/`` tree in the same issue (#35); errors and their reporting live in :mod:`stepcast.errors`, and this
module goes once that import points there."""

from stepcast.errors import report

__all__ = ["report"]
