"""First touch of a fresh output: numpy's np.empty (huge pages advised) against ingest.buffers.

Every rank fills a fresh output array. numpy advises transparent huge pages for arrays of 4 MiB
or more; ingest's buffers (ingest/buffers.py) advise against them. Each sample is a new process
(bench/reads/_touch_once.py) that allocates --size-mib MiB and writes every byte once, after a pause
of --pause-s in which nothing runs: on a VM that hands free memory back to its host, that is
when a job's output lands on memory the host has taken back. The two allocators alternate,
round by round, so both see the same machine.

    python -m bench.reads.pages [--size-mib 256] [--repeats 10] [--pause-s 1.5]

Printed: each allocator's fill time (median, min-max) and its spread (slowest / fastest), and
ingest's over numpy's, paired by round. The target is on ingest's spread, which is what a
makespan prediction needs steady: at most 1.25.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file (python bench/reads/pages.py): make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common

NAME = "pages"
SIZES = {"size_mib": (256, 64), "repeats": (10, 3)}  # full, --quick
TOUCH_ONCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_touch_once.py")
ALLOCATORS = ("numpy", "ingest")
SPREAD_TARGET = 1.25  # ingest's slowest fill / its fastest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.pages", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=SIZES["size_mib"][0])
    parser.add_argument("--pause-s", type=float, default=1.5,
                        help="idle seconds before each sample (default 1.5: BENCHMARKS.md measured "
                             "memory going back to this VM's host after about 1 s)")
    return parser


def touch_candidate(allocator: str, size_mib: int, pause_s: float) -> common.Candidate:
    argv = [sys.executable, TOUCH_ONCE, "--allocator", allocator, "--mib", str(size_mib)]

    def run() -> dict:
        time.sleep(pause_s)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    return common.Candidate(allocator, run, {"command": f"python bench/reads/_touch_once.py --allocator {allocator} "
                                                        f"--mib {size_mib}", "pause_s": pause_s})


def _spread(samples: list[dict], metric: str = "fill_wall_s") -> dict:
    values = [s[metric] for s in samples]
    value = max(values) / min(values)
    return {"samples": [value], **common.stats([value]), "metric": f"slowest / fastest {metric}"}


def run(env, args) -> dict:
    """Both allocators, interleaved, a fresh process per sample (env: unused, no server needed)."""
    common.settle(args, **SIZES)
    log = common.logger(args)
    candidates = [touch_candidate(name, args.size_mib, args.pause_s) for name in ALLOCATORS]
    if log:
        log(f"{NAME}: {args.size_mib} MiB per fill, {args.repeats} interleaved rounds, {args.pause_s:g} s idle before each")
    results = common.run_interleaved(candidates, args.repeats, warmup=args.warmup, log=log)
    ratios = {"fill_wall_ingest_over_numpy": common.paired_ratio(results, "ingest", "numpy", "fill_wall_s"),
              "spread_ingest": _spread(results["ingest"]["samples"]),
              "spread_numpy": _spread(results["numpy"]["samples"])}
    return {
        "config": {"size_mib": args.size_mib, "repeats": args.repeats, "warmup": args.warmup,
                   "pause_s": args.pause_s, "thp": _thp_settings()},
        "candidates": results,
        "ratios": ratios,
        "targets": {"spread_ingest": common.target("<=", SPREAD_TARGET)},
    }


def _thp_settings() -> dict:
    """The kernel's transparent-huge-page policy, for the record ([bracketed] is the one in force)."""
    found = {}
    for name in ("enabled", "defrag"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
                found[name] = f.read().strip()
        except OSError:
            found[name] = None
    return found


def to_markdown(results: dict) -> str:
    cfg, cands = results["config"], results["candidates"]
    rows = []
    for name in ALLOCATORS:
        s = cands[name]["summary"]
        rows.append([name, common.spread(s["fill_wall_s"], "{:.3f}"), common.spread(s["fill_cpu_s"], "{:.3f}"),
                     f"{s['minor_faults']['median']:.0f}", f"{results['ratios'][f'spread_{name}']['median']:.2f}"])
    thp = cfg.get("thp") or {}
    head = (f"### First touch of a fresh {cfg['size_mib']} MiB output ({cfg['repeats']} interleaved rounds, "
            f"a new process each, {cfg['pause_s']:g} s idle before each; THP enabled: {thp.get('enabled')}, "
            f"defrag: {thp.get('defrag')})\n\n")
    table = common.markdown_table(["allocator", "fill s median (min-max)", "CPU s median (min-max)",
                                   "minor faults", "spread (slowest / fastest)"], rows)
    return head + table + "\n\n" + common.ratios_table(results["ratios"], results["targets"])


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, server=False, **SIZES)  # memory only: no server


if __name__ == "__main__":
    sys.exit(main())
