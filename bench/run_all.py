"""Run every benchmark on one server and one cube, write each one's JSON, print a markdown summary.

    python -m bench [--quick] [--size-mib 1024] [--repeats 3] [--only whole_object,subcube,...]

--quick: small cubes and one round of everything (a minute or two); a full run takes ~20 min.

Each benchmark keeps its own defaults for its own options (threads, chunk sizes); run it alone
(`python -m bench.NAME --help`) to change them. `python -m bench --summarize FILE.json ...`
renders tables from results already written, without running anything.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a file (python bench/run_all.py): make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common
from bench.cluster import collectives, commands as cluster_commands, makespan as cluster_makespan, predictions
from bench.cutouts import catalogue as cutouts, tiles as cutouts_tiles, writes as cutout_writes
from bench.engine import engine, startup
from bench.publish import local as publish
from bench.reads import (hdf5, memory, open_vs_read, pages, prestage, rounds, scaling, staging, strategies, subcube,
                         whole_object)
from bench.study import seed001
from ingest.testbed.signals import unwind_on_signals
from ingest.units import GiB

# The registry: a benchmark is a module with NAME, build_parser, run(env, args),
# to_markdown(results), added here (in the order they run and print).
BENCHES = {module.NAME: module for module in (whole_object, subcube, strategies, scaling, predictions, rounds, memory,
                                                    pages, prestage, hdf5, engine, open_vs_read, staging, seed001,
                                                    publish, cutouts, cutout_writes, cutouts_tiles)}
# Benchmarks that run on their own (the emulated cluster's need root and network namespaces;
# start-up times its own launches), whose result files --summarize renders all the same.
RUN_ALONE = {module.NAME: module for module in (cluster_makespan, cluster_commands, collectives, startup)}
COMMON_OPTIONS = ("quick", "size_mib", "repeats", "warmup", "results_dir", "cache_dir", "quiet")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--only", default=",".join(BENCHES),
                        help=f"comma-separated benchmarks to run (default all: {','.join(BENCHES)})")
    parser.add_argument("--summarize", nargs="+", metavar="JSON", default=None,
                        help="print the tables of these result files and exit")
    return parser


def render(results: dict) -> str:
    """Markdown for one result file's contents, by its `bench` name."""
    return {**BENCHES, **RUN_ALONE}[results["bench"]].to_markdown(results)


def load_results(paths: list[str]) -> list[dict]:
    """The result files named, each checked to be one a benchmark here wrote (SystemExit naming
    the file otherwise), so a summary is never cut short by a file in the middle of the list."""
    known = {**BENCHES, **RUN_ALONE}
    loaded = []
    for path in paths:
        try:
            with open(path) as f:
                results = json.load(f)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--summarize: {path}: not a result file ({exc})") from None
        name = results.get("bench") if isinstance(results, dict) else None
        if name not in known:
            raise SystemExit(f"--summarize: {path}: bench {name!r} is none of {sorted(known)}")
        loaded.append(results)
    return loaded


def header(results_list: list[dict]) -> str:
    """Where and how the results were produced (from the first result's record)."""
    first = results_list[0]
    m = first["machine"]
    git = m.get("git") or {}
    return (f"## ingest benchmarks\n\n`{first['command']}` at {first['created_utc']}; "
            f"{m['nproc']} cores, {m['memory_bytes'] / GiB:.0f} GiB, load {m['loadavg'][0]:.2f}, "
            f"Python {m['python']}, ingest {m['packages'].get('ingest')}, "
            f"commit {str(git.get('commit'))[:10]}{' (dirty)' if git.get('dirty') else ''}"
            + (f", ingest/ sources sha1 {m['ingest_sources_sha1'][:12]}" if m.get("ingest_sources_sha1") else ""))


def targets_table(results_list: list[dict]) -> str:
    """Every ratio that has a target, from every result: value, target, PASS/BELOW."""
    rows = []
    for results in results_list:
        for key, tgt in results.get("targets", {}).items():
            ratio = results["ratios"][key]
            if not isinstance(tgt, dict):  # results written before targets carried their direction
                continue
            rows.append([results["bench"], key, common.spread(ratio), common.target_text(tgt),
                         common.verdict(ratio, tgt)])
    if not rows:
        return "### Targets\n\n(no targeted ratios in these results)"
    return "### Targets (median of the per-round ratios, min-max)\n\n" + common.markdown_table(
        ["bench", "ratio", "median (min-max)", "target", "verdict"], rows)


def main(argv=None) -> int:
    unwind_on_signals()  # killed, it still stops its server and Toxiproxy (ingest.testbed.signals)
    args = common.settle(build_parser().parse_args(argv))
    if args.summarize:
        loaded = load_results(args.summarize)
        print("\n\n".join([header(loaded), targets_table(loaded)] + [render(r) for r in loaded]))
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"--only: unknown benchmark(s) {unknown}; choose from {list(BENCHES)}")
    written = []
    t0 = time.perf_counter()
    with common.BenchEnv(cache_dir=args.cache_dir) as env:
        for name in names:
            module = BENCHES[name]
            module_args = module.build_parser().parse_args([])  # the benchmark's own defaults
            for option in COMMON_OPTIONS:
                setattr(module_args, option, getattr(args, option))
            results = module.run(env, module_args)
            path = common.write_results(name, results, args.results_dir)
            written.append(json.loads(path.read_text()))
            print(f"wrote {path} ({time.perf_counter() - t0:.0f} s so far)", file=sys.stderr)
    print("\n\n".join([header(written), targets_table(written)] + [render(r) for r in written]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
