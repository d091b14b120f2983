"""Benchmarks of the emulator: end to end (``.e2e``), per kernel class, capture and simulator speed, scale."""
