"""Kernel-runtime estimators: predict a kernel's runtime (microseconds) from its description and the hardware.

``estimator.load(source)`` is the one entry point; see :mod:`estimator.registry`.
"""
from stepcast.estimator.base import KernelEstimator

__all__ = ["KernelEstimator", "load"]


def load(source=None, **kwargs) -> KernelEstimator:
    """Load an estimator: ``None`` (shipped defaults), a name ("roofline", "xgboost", an entry point), a local bundle
    path, or an MLflow registry URI (``models:/kernel-runtime-gemm@champion``)."""
    from stepcast.estimator.registry import load as _load

    return _load(source, **kwargs)
