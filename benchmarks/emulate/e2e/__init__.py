"""End-to-end checks of the emulator against published whole-model measurements (``python -m
benchmarks.emulate.e2e``): one module per source (:mod:`.neusight`, :mod:`.torchtitan`); each emulation runs through
the public ``stepcast run`` (:func:`emulate.emulation.emulate_script`) and is cached per commit
(:mod:`.cache`)."""
