"""Seed 001's box, scaled, on the acacia profile: the self-tuned read on the native engine vs on
urllib3 (the plan ingest chose before the native engine), side by side.

The box is seed 001's subcube in proportion (2151/5851 of each spatial side, 1893/6668 of the
channels, centred) of a cube whose rows are as long as the study's (5851 float32 pixels), so
each needed row is 8.4 KiB with 15 KiB of other pixels between rows, as in the study; only the
number of rows and channels is scaled down. Whether the tuner reads those 15 KiB gaps or skips
them is then the study's trade-off, and cheaper requests move it towards fewer wasted bytes. Both
reads run as the MPI driver does (header, probe, choose, read) and are checked value for value.
Targets (issue 12): native wire bytes <= 1.3x the needed bytes, and native time <= urllib3's.
A third candidate forces the zero-waste plan on the native engine after the same probe, so the
table shows what reading only the needed bytes costs here beside what the tuner chose.

    python -m bench.study.seed001 [--size-mib 256] [--profiles acacia]
"""
from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np

from bench import common, links
from bench.reads import shared as reads
from ingest.units import MiB

NAME = "seed001"
ENGINES = ("native", "urllib3")
# The zero-waste plan forced on the native engine after the same probe: what the target asks the
# tuner to reach, timed beside what it chose, so the trade-off is a measurement, not a claim.
ZERO_WASTE = {"strategy": "auto", "max_gap_bytes": 0, "threads": 64}
WIRE_TARGET = 1.3
SEED001_ROW_PIXELS = 5851  # NAXIS1 of the study's cube: its rows, and so its gaps, at full length
TIME_TARGET = 1.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.study.seed001", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=256)
    parser.add_argument("--profiles", default="acacia", help="link profiles (default acacia)")
    return parser


SIZES = {"size_mib": (256, 64)}


def _candidate(name: str, engine: str, url: str, region, want: np.ndarray, overrides=None) -> common.Candidate:
    def run() -> dict:
        read = reads.tuned_read(url, region, method="presigned", engine=engine, overrides=overrides)
        reads.check_same(read.data, want, f"seed001 {name}")
        return reads.tuned_sample(read)
    return common.Candidate(name, run, {"engine": engine, "overrides": overrides})


def run(env: common.BenchEnv, args) -> dict:
    args = common.settle(args, **SIZES)
    rows = 512
    shape = (max(8, round(args.size_mib * MiB / (rows * SEED001_ROW_PIXELS * 4))), rows, SEED001_ROW_PIXELS)
    cube = env.cube(0, shape=shape)
    region = reads.seed001_box(shape)
    want = reads.expected(cube, region)
    needed = want.nbytes
    results: dict = {"shape": list(shape), "box": reads.region_text(region), "needed_bytes": needed, "cells": {},
                     "ratios": {}, "targets": {}}
    for profile in links.parse_profiles(args.profiles):
        url = env.presign(cube, profile=profile)
        candidates = [_candidate(e, e, url, region, want) for e in ENGINES]
        candidates.append(_candidate("native zero-waste", "native", url, region, want, ZERO_WASTE))
        cell = common.run_interleaved(candidates, args.repeats, args.warmup, common.logger(args))
        results["cells"][profile] = cell
        wire = [s["wire_bytes"] / needed for s in cell["native"]["samples"]]
        results["ratios"][f"{profile}:native_wire/needed"] = {**common.stats(wire), "samples": wire}
        results["targets"][f"{profile}:native_wire/needed"] = common.target("<=", WIRE_TARGET)
        key = f"{profile}:native_time/urllib3_time"
        results["ratios"][key] = common.paired_ratio(cell, "native", "urllib3", "elapsed_s")
        results["targets"][key] = common.target("<=", TIME_TARGET)
        key = f"{profile}:zero-waste_time/native_time"  # > 1: the tuner was right to read the gaps
        results["ratios"][key] = common.paired_ratio(cell, "native zero-waste", "native", "elapsed_s")
        urllib3_wire = [s["wire_bytes"] / needed for s in cell["urllib3"]["samples"]]
        results["ratios"][f"{profile}:urllib3_wire/needed"] = {**common.stats(urllib3_wire), "samples": urllib3_wire}
    return results


def to_markdown(results: dict) -> str:
    lines = [f"### Seed 001's box, scaled: {results['box']} of {tuple(results['shape'])} float32 "
             f"({results['needed_bytes'] / MiB:.1f} MiB needed)"]
    for profile, cell in results["cells"].items():
        rows = [[name, c["samples"][-1]["choice"], common.spread(c["summary"]["elapsed_s"], "{:.3f}"),
                 common.spread(c["summary"]["requests"], "{:.0f}"),
                 common.spread(c["summary"]["wire_bytes"], "{:.1f}", MiB)] for name, c in cell.items()]
        lines += ["", f"`{profile}`:", "", common.markdown_table(
            ["engine", "tuner's choice (last round)", "elapsed s", "requests", "wire MiB"], rows)]
    lines += ["", common.ratios_table(results["ratios"], results["targets"])]
    return "\n".join(lines)


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, **SIZES)


if __name__ == "__main__":
    raise SystemExit(main())
