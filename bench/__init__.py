"""Benchmarks of ingest against curl and astropy, run side by side on a loopback S3 server,
directly or through Toxiproxy link profiles (bench/links.py).

`python -m bench [--quick]` runs them all; each is also `python -m bench.NAME`. Every module
exposes NAME, build_parser(), run(env, args) -> results dict, to_markdown(results) and main(argv).
"""
