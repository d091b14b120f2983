"""End-to-end checks of the emulator against published whole-model measurements (``python -m
emulate.e2e_benchmark``): one module per source (:mod:`.neusight`, :mod:`.torchtitan`), and :mod:`.emulation`, which
runs a script through the public ``python -m emulate run`` and reads what it wrote."""
