"""Benchmarks of ingest against curl and astropy, run side by side on a loopback S3 server,
directly or through Toxiproxy link profiles (bench/links.py).

`python -m bench [--quick]` runs them all (bench/run_all.py, `--only NAME,...`); each is also
`python -m bench.GROUP.NAME`, grouped by what it measures: reads/, cutouts/, publish/, cluster/,
study/ and engine/. Every bench module exposes NAME, build_parser(), run(env, args) -> results
dict, to_markdown(results) and main(argv). What they share sits beside the groups: common/ (the
store, timing, results, tables, options), links.py (link profiles), mpirun.py and the per-rank
wrappers _rank_peak.py and _rank_record.py.
"""
