"""stepcast's benchmarks and diagnosis: how well the product predicts, against public measurements. Not part of the
installed package: run from a checkout as ``python -m benchmarks.<package>.<name>`` (``benchmarks.emulate``: the
emulator end to end and per kernel class; ``benchmarks.estimator``: the kernel-runtime estimators). The product
(emulate/, estimator/, profiling/, stepcast/) never imports this tree (tests/benchmarks/test_product_independence.py).
"""
