"""Benchmarks of writing back: `ingest publish` against assembling the file and uploading it, on
one machine through link profiles (local) and on the emulated cluster (cluster)."""
