"""Benchmarks of reading an object: whole objects, subcubes, strategies, scaling, HDF5, the staging
download, memory, first touch of the output, and probe rounds (`python -m bench.reads.NAME`).
bench/reads/shared.py holds the boxes, the self-tuned read and the oracle they all use."""
