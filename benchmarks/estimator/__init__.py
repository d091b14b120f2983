"""Benchmarks and diagnosis of the kernel-runtime estimators (``python -m benchmarks.estimator.accuracy``)."""
