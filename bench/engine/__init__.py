"""Benchmarks of the request engine and a rank's start-up: engines side by side (engine) and the
time from launch to a rank's first byte (startup)."""
