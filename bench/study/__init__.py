"""Benchmarks that repeat the study's own measurements: seed 001's box on the acacia profile (seed001)."""
