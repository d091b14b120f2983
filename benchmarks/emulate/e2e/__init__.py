"""End-to-end checks of the emulator against published whole-model measurements (``python -m
benchmarks.emulate.e2e``): one module per source (:mod:`.neusight`, :mod:`.torchtitan`), and :mod:`.emulation`, which
runs a script through the public ``python -m emulate run`` and reads what it wrote."""
