"""The ``stepcast`` console command: one entry point for the emulator, the estimators and the profiler.

The work is done by :mod:`emulate`, :mod:`estimator` and :mod:`profiling`; this package only parses the command
line and hands each subcommand to the module that owns it, so ``python -m <package>`` keeps working unchanged."""
