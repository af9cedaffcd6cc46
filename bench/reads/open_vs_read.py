"""Ten small reads through one `ingest.open` vs ten `ingest.read_subcube` calls, side by side.

`read_subcube` opens the object, reads its header and plans from scratch on every call; one
`open` does the first two once and keeps its connections. Same cube, same ten boxes (a few
channels of a small sky window each, spread over the cube), same source, interleaved round by
round; every result is checked against the local file. The finding per method and link is the
per-round ratio of times read_subcube / open (> 1: one open is faster), the open included.

    python -m bench.reads.open_vs_read [--size-mib 64] [--methods presigned,s3] [--profiles loopback,acacia]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ingest
from bench import common, links
from bench.reads import shared as reads
from ingest.units import MiB

NAME = "open"
SIZES = {"size_mib": (64, 64)}  # full, --quick: the reads are small, the cube's size barely matters
N_READS = 10
BOX_CHANNELS, BOX_SIDE = 4, 32  # one small read: 4 channels of a 32 x 32 window


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reads.open_vs_read", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser, size_mib=SIZES["size_mib"][0])
    parser.add_argument("--methods", default="presigned,s3", help="presigned and/or s3 (default both)")
    parser.add_argument("--profiles", default="loopback", help="link profiles (default loopback; also acacia, wan)")
    parser.add_argument("--seed", type=int, default=1, help="where the ten boxes fall (default 1)")
    return parser


def small_boxes(shape: tuple[int, ...], seed: int) -> list[tuple]:
    """N_READS boxes of BOX_CHANNELS x BOX_SIDE x BOX_SIDE at seeded random places in the cube."""
    rng = np.random.default_rng(seed)
    nchan, ny, nx = shape
    c, s = min(BOX_CHANNELS, nchan), min(BOX_SIDE, ny, nx)
    out = []
    for _ in range(N_READS):
        c0, y0, x0 = (int(rng.integers(0, n - k + 1)) for n, k in ((nchan, c), (ny, s), (nx, s)))
        out.append((slice(c0, c0 + c), slice(y0, y0 + s), slice(x0, x0 + s)))
    return out


def _timed(read_all, server_pid: int) -> dict:
    srv0, cpu0, t0 = common.cpu_pid_s(server_pid), common.cpu_self_s(), time.perf_counter()
    extra = read_all()
    return {"elapsed_s": time.perf_counter() - t0, "cpu_s": common.cpu_self_s() - cpu0,
            "server_cpu_s": common.cpu_pid_s(server_pid) - srv0, **extra}


def open_candidate(source: str, options: dict, boxes: list, wants: list, pid: int) -> common.Candidate:
    def read_all() -> dict:
        t0 = time.perf_counter()
        with ingest.open(source, **options) as cube:
            open_s = time.perf_counter() - t0
            for box, want in zip(boxes, wants):
                reads.check_same(cube[box], want, "open")
            return {"open_s": open_s, "requests": cube.stats.requests, "wire_bytes": cube.stats.bytes_wire}

    info = {"reader": f"with ingest.open(source) as cube: cube[box] x {N_READS} (open, header and close included)"}
    return common.Candidate("open", lambda: _timed(read_all, pid), info)


def read_subcube_candidate(source: str, options: dict, boxes: list, wants: list, pid: int) -> common.Candidate:
    def read_all() -> dict:
        for box, want in zip(boxes, wants):
            reads.check_same(ingest.read_subcube(source, box, **options), want, "read_subcube")
        return {}

    info = {"reader": f"ingest.read_subcube(source, box) x {N_READS}, each opening and reading the header"}
    return common.Candidate("read_subcube", lambda: _timed(read_all, pid), info)


def run_cell(env: common.BenchEnv, args, cube: common.Cube, method: str, profile: str, log) -> dict:
    boxes = small_boxes(cube.shape, args.seed)
    wants = [reads.expected(cube, box) for box in boxes]
    source, options = env.source(cube, method, profile)
    if log:
        log(f"{NAME} [{method} {profile}]: {N_READS} boxes of {BOX_CHANNELS}x{BOX_SIDE}x{BOX_SIDE}; "
            f"{args.repeats} rounds + {args.warmup} warm-up")
    candidates = [open_candidate(source, options, boxes, wants, env.server_pid),
                  read_subcube_candidate(source, options, boxes, wants, env.server_pid)]
    results = common.run_interleaved(candidates, args.repeats, args.warmup, log=log)
    ratio = common.paired_ratio(results, "read_subcube", "open", "elapsed_s")
    return {"method": method, "profile": profile, "boxes": [reads.region_text(b) for b in boxes],
            "box_bytes": int(wants[0].nbytes), "candidates": results, "ratio": ratio}


def run(env: common.BenchEnv, args) -> dict:
    common.settle(args, **SIZES)
    log = common.logger(args)
    cube = env.cube(args.size_mib * MiB)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    profiles = links.parse_profiles(args.profiles)
    cells = {f"{m}:{p}": run_cell(env, args, cube, m, p, log) for p in profiles for m in methods}
    return {
        "config": {"size_mib": args.size_mib, "methods": methods, "profiles": profiles, "repeats": args.repeats,
                   "warmup": args.warmup, "reads": N_READS, "box": [BOX_CHANNELS, BOX_SIDE, BOX_SIDE],
                   "seed": args.seed},
        "cube": cube.describe(),
        "cells": cells,
        "ratios": {name: cell["ratio"] for name, cell in cells.items()},
        "notes": [
            "ratio: read_subcube time / open time for the same ten boxes, per interleaved round (> 1: one "
            "open is faster); open's time includes opening, the header and closing.",
            "Every box is compared with numpy on the local file: identical values.",
        ],
    }


def to_markdown(results: dict) -> str:
    cfg = results["config"]
    out = [f"### Ten small reads: one `ingest.open` vs ten `read_subcube` ({cfg['reads']} boxes of "
           f"{'x'.join(map(str, cfg['box']))}, {cfg['repeats']} interleaved rounds)", ""]
    rows = []
    for name, cell in results["cells"].items():
        s_open = cell["candidates"]["open"]["summary"]
        s_read = cell["candidates"]["read_subcube"]["summary"]
        rows.append([name, common.spread(s_open["elapsed_s"], "{:.3f}"), common.spread(s_open["open_s"], "{:.4f}"),
                     common.spread(s_read["elapsed_s"], "{:.3f}"), common.spread(cell["ratio"])])
    out.append(common.markdown_table(["method:link", "open: ten reads s", "of which open s", "read_subcube x10 s",
                                      "ratio read_subcube/open"], rows))
    return "\n".join(out)


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, **SIZES)


if __name__ == "__main__":
    sys.exit(main())
