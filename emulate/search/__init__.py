"""Configuration search with the emulator as the evaluator (the Maya approach): ``stepcast search``.

A search varies a training script's own arguments or environment (TP/PP/DP degrees, micro-batch, recomputation,
...) over a space declared in a Hydra config (``conf/search/*.yaml``), rules out layouts that break a constraint or
cannot fit before any emulation runs, emulates the rest one trial at a time (``stepcast run``, rank
deduplication on), records out-of-memory trials as infeasible, caches every result by the hash of what decides it,
and reports the cheapest configuration with its speed-up over a baseline the user names.

Modules, one job each: :mod:`.space` (the config, the space, constraints and the cheap checks), :mod:`.trials`
(one emulation per trial and the result cache), :mod:`.samplers` (Optuna's CMA-ES, random and grid samplers
driving the loop, local jobs), :mod:`.ray_adapter` (the same loop on a Ray cluster), :mod:`.tracking` (MLflow,
the plot and the terminal summary), :mod:`.cli` (the command).
"""
