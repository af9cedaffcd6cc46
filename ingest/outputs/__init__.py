"""Outputs: what a run leaves behind. JSON reports (data first, tables drawn from them), per-rank
FITS subcubes, and the atomic-write helpers every output uses (complete or absent)."""
