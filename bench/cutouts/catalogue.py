"""Cut-outs of a catalogue: `ingest cutouts` vs staging the cube and cutting locally vs cutout-fits' loop.

One cube with a WCS on the bench server; catalogues of --counts sources spread uniformly over it,
each source a WALLABY-sized cut-out scaled to the cube's pixels (bench/cutouts/_setup.py says
how); on each link profile (loopback; acacia through Toxiproxy), interleaved per catalogue:
- `ingest cutouts` under mpiexec (--ranks ranks; 1: alone): wall time from launch to exit, its report's
  makespan, requests and wire bytes per source, every rank's peak RSS against the bound the
  report states (+ 150 MB for the interpreter and libraries, as bench.reads.memory);
- the staging baseline: ingest's staging download of the whole cube, then every box cut with
  numpy from the local file and written with astropy (one process);
- astropy + fsspec `section`, one source at a time (what cutout-fits does), on --sample sources;
- the floor (bench/cutouts/_floor.py): a process that imports numpy, astropy.wcs and urllib3 and
  reads the bytes ingest's plan read from a presigned URL, and does nothing else: what no cut-out
  job that converts the sky with astropy beats.
Every candidate's cut-outs are checked against the cube, bit for bit, on the sampled sources.
Ratios: astropy loop / ingest per source (target >= 20), staging / ingest wall time (target >= 1,
"never slower"), peak RSS / bound (target <= 1). Then "on paper" (bench/cutouts/_paper.py): a
WALLABY-sized catalogue on an ASKAP-sized cube, planned and predicted, no data moved.

    python -m bench.cutouts.catalogue [--shape 512x512x512] [--counts 100,1000,10000] [--profiles loopback,acacia]
                            [--ranks 2] [--sample 8] [--paper-sources 30000] [--quick]

Each candidate's cut-outs a second from launch to exit are in the tables too. Issue 60's cell,
10,000 cut-outs of about 24 KB from a 1 GiB cube on 2 ranks (target: at least 1,000 a second):

    python -m bench.cutouts.catalogue --shape 1024x1024x256 --counts 10000 --profiles loopback \
        --size "8arcsec 40km/s" --paper-sources 0
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.cutouts import _runs as runs
from bench import common, links
from bench.cutouts._setup import source_boxes, wallaby_size_text, wcs_cube, write_catalogue
from ingest.testbed.synth import parse_fits_shape
from ingest.units import MiB

NAME = "cutouts"
TARGET_LOOP_PER_SOURCE = 20.0  # astropy loop's seconds per source / ingest's (issue 44)
TARGET_STAGING = 1.0  # staging + local cut wall time / ingest's: never slower
TARGET_MEMORY = 1.0  # a rank's peak RSS / (stated bound + slack)
# option: (full run, --quick)
SIZES = {"shape": ("512x512x512", "64x64x48"), "counts": ("100,1000,10000", "8,32"), "sample": (8, 2),
         "size": (wallaby_size_text(), "4arcsec 40km/s"), "paper_sources": (30000, 300), "repeats": (1, 1),
         "warmup": (0, 0)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.cutouts.catalogue", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--shape", default=None, help="cube NAXIS1xNAXIS2xNAXIS3, float32 (default 512x512x512 = "
                                                      "512 MiB, --quick 64x64x48); --size-mib is not used")
    parser.add_argument("--counts", default=None, help="catalogue sizes (default 100,1000,10000; --quick 8,32)")
    parser.add_argument("--profiles", default="loopback,acacia", help="link profiles (default loopback,acacia)")
    parser.add_argument("--ranks", type=int, default=2,
                        help="ranks of `ingest cutouts` under mpiexec; 1: one process started alone, no launcher "
                             "(default 2)")
    parser.add_argument("--sample", type=int, default=None,
                        help="sources the astropy loop cuts, and every candidate's outputs are checked on "
                             "(default 8, --quick 2)")
    parser.add_argument("--size", default=None, help="each cut-out's --size (default: WALLABY's, scaled to the "
                                                     f"cube: {SIZES['size'][0]!r}; --quick {SIZES['size'][1]!r})")
    parser.add_argument("--paper-sources", type=int, default=None,
                        help="sources of the on-paper catalogue (default 30000, --quick 300; 0 skips it)")
    parser.add_argument("--paper-ranks", default="25,100", help="rank counts on paper (default 25,100)")
    parser.add_argument("--timeout-s", type=float, default=900.0,
                        help="longest one command may run before it is stopped and recorded as timed out (default 900)")
    parser.add_argument("--ingest-args", default="", help="more `ingest cutouts` options, e.g. '--no-probe'")
    parser.add_argument("--seed", type=int, default=44, help="where the sources fall (default 44)")
    parser.add_argument("--reference-tree", default=None,
                        help="another copy of the repository (e.g. the code before a change): its `ingest cutouts` "
                             "runs too, interleaved, as candidate ingest_before")
    return parser


def _candidates(env, cube, profile: str, catalogue: str, boxes: list, sample: list, work_dir: str,
                args) -> list[common.Candidate]:
    url = env.presign(cube, profile=profile)
    info = {"ingest": {"ranks": args.ranks}, "staging": {"threads": 4, "chunk_bytes": 16 * MiB}, "astropy_loop": {}}

    def ingest() -> dict:
        got = runs.ingest_cutouts(env, cube, profile, catalogue, args.size, args.ranks, work_dir, args.timeout_s,
                                  shlex.split(args.ingest_args), info["ingest"], len(boxes))
        if got["status"] == "ok":
            got["verified"] = runs.verify_outputs(got.pop("out_dir"), sample, cube.path)
            shutil.rmtree(os.path.join(work_dir, "ingest_out"), ignore_errors=True)
        return got

    def staging() -> dict:
        got = runs.staging_baseline(env, cube, profile, boxes, work_dir, args.timeout_s, info["staging"])
        if got["status"] == "ok":
            got["verified"] = runs.verify_outputs(got.pop("out_dir"), sample, cube.path)
            shutil.rmtree(os.path.join(work_dir, "staging_out"), ignore_errors=True)
        return got

    wire = {"bytes": cube.data_bytes}  # until an ingest round says what its plan read

    def ingest_noting_wire() -> dict:
        got = ingest()
        if got.get("status") == "ok":
            wire["bytes"] = got["bytes_wire"]
        return got

    cands = []
    if args.reference_tree:  # the same job by another tree's code, interleaved with this one's
        info["ingest_before"] = {"ranks": args.ranks, "tree": args.reference_tree}

        def before() -> dict:
            got = runs.ingest_cutouts(env, cube, profile, catalogue, args.size, args.ranks, work_dir, args.timeout_s,
                                      shlex.split(args.ingest_args), info["ingest_before"], len(boxes),
                                      tree=args.reference_tree)
            if got["status"] == "ok":
                got["verified"] = runs.verify_outputs(got.pop("out_dir"), sample, cube.path)
                shutil.rmtree(os.path.join(work_dir, "ingest_out"), ignore_errors=True)
            return got

        cands.append(common.Candidate("ingest_before", before, info["ingest_before"]))
    info["floor"] = {}
    return cands + [common.Candidate("ingest", ingest_noting_wire, info["ingest"]),
            common.Candidate("floor", lambda: runs.floor(env, url, wire["bytes"], len(boxes), args.timeout_s,
                                                         info["floor"]), info["floor"]),
            common.Candidate("staging", staging, info["staging"]),
            common.Candidate("astropy_loop", lambda: _not_raising(runs.astropy_loop, url, sample, work_dir, cube.path,
                                                                  info["astropy_loop"]), info["astropy_loop"])]


def _not_raising(fn, *args) -> dict:
    """A candidate's sample, or its failure recorded (fsspec gives up on a loaded machine's server
    with a timeout): one candidate's failure is a row of the results, not the end of the run."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded in the sample
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[-1500:]}


def _pairs(cell: dict, a: str, b: str, metric_a: str, metric_b: str) -> tuple[list, list, bool]:
    """Round by round, a's metric_a and b's metric_b where both ran, and whether any of b's was
    stopped at its time limit (its metric then a lower bound, the ratio an upper bound)."""
    xs, ys, bounded = [], [], False
    for sa, sb in zip(cell[a]["samples"], cell[b]["samples"]):
        if sa.get("status") == "ok" and sb.get("status") in ("ok", "timeout") and sb.get(metric_b) is not None:
            xs.append(sa[metric_a])
            ys.append(sb[metric_b])
            bounded = bounded or sb["status"] == "timeout"
    return xs, ys, bounded


def cell_ratios(key: str, cell: dict) -> tuple[dict, dict]:
    """The cell's ratios and their targets; rounds where a candidate did not finish are left out
    (the failure is in the results' `failures`)."""
    ratios, targets = {}, {}
    specs = [("astropy_loop/ingest per source", "astropy_loop", "per_source_s", "wall_per_source_s",
              common.target(">=", TARGET_LOOP_PER_SOURCE)),
             ("staging/ingest", "staging", "wall_s", "wall_s", common.target(">=", TARGET_STAGING)),
             # Both without process launch and imports: the child's stage + cut, ingest's prepare + makespan.
             ("staging/ingest (no launch)", "staging", "work_s", "work_s", None),
             # The floor: what the loop's ratio would be for a job that only imports and reads, and
             # how much of ingest's wall time is that floor.
             ("astropy_loop/floor per source", "astropy_loop", "per_source_s", "wall_per_source_s", None, "floor"),
             ("floor/ingest", "floor", "wall_s", "wall_s", None)]
    if "ingest_before" in cell:
        specs += [("staging/ingest_before", "staging", "wall_s", "wall_s", None, "ingest_before"),
                  ("ingest_before/ingest", "ingest_before", "wall_s", "wall_s", None)]
    for name, other, metric_other, metric_ingest, tgt, *denominator in specs:
        below = (denominator or ["ingest"])[0]
        if other not in cell or below not in cell:
            continue
        xs, ys, bounded = _pairs(cell, other, below, metric_other, metric_ingest)
        if not xs:
            continue
        bound = {"upper_bound": f"{below} stopped at --timeout-s"} if bounded else {}
        ratio = common.ratio_of(xs, ys, numerator=other, denominator=below,
                                metric=f"{metric_other} / {metric_ingest}", **bound)
        ratios[f"{key}:{name}"] = ratio
        # An upper bound below its target is a certain miss; one above it proves nothing, so it
        # carries no target (and no verdict).
        if tgt and not (bounded and common.verdict(ratio, tgt) == "PASS"):
            targets[f"{key}:{name}"] = tgt
    ok = [s for s in cell["ingest"]["samples"] if s.get("status") == "ok"]
    if ok:
        ratios[f"{key}:peak_rss/bound"] = common.ratio_of([s["peak_rss_max_bytes"] for s in ok],
                                                         [s["memory_bound_bytes"] + runs.SLACK_BYTES for s in ok],
                                                         numerator="largest rank peak RSS",
                                                         denominator="report's memory_bound_bytes + 150 MB")
        targets[f"{key}:peak_rss/bound"] = common.target("<=", TARGET_MEMORY)
    before = [s for s in cell.get("ingest_before", {}).get("samples", []) if s.get("status") == "ok"]
    if before:
        ratios[f"{key}:peak_rss/bound (before)"] = common.ratio_of(
            [s["peak_rss_max_bytes"] for s in before], [s["memory_bound_bytes"] + runs.SLACK_BYTES for s in before],
            numerator="largest rank peak RSS", denominator="report's memory_bound_bytes + 150 MB")
    return ratios, targets


def paper(args, log) -> dict:
    """The on-paper figures, from a process of its own (its one plan holds every box's runs)."""
    if not args.paper_sources:
        return {}
    if log:
        log(f"{NAME}: on paper, {args.paper_sources} sources on the ASKAP-sized cube")
    cmd = [sys.executable, "-m", "bench.cutouts._paper", "--sources", str(args.paper_sources), "--ranks",
           args.paper_ranks]
    done = subprocess.run(cmd, cwd=common.REPO_ROOT, capture_output=True, text=True, timeout=args.timeout_s)
    if done.returncode != 0:
        return {"status": "failed", "error": done.stderr[-1500:]}
    return {"status": "ok", "command": " ".join(cmd[1:]), **json.loads(done.stdout.strip().splitlines()[-1])}


def run(env: common.BenchEnv, args) -> dict:
    common.settle(args, **SIZES)
    log = common.logger(args)
    profiles = links.parse_profiles(args.profiles)
    counts = common.counts("--counts", args.counts)
    cube = wcs_cube(env, parse_fits_shape(args.shape))
    work_dir = tempfile.mkdtemp(prefix="cutouts-", dir=env.cache_dir)
    try:
        inputs = {}
        for n in counts:  # catalogues and boxes once, outside every timing
            catalogue = write_catalogue(os.path.join(work_dir, f"catalogue_{n}.csv"), cube, n, args.seed + n)
            boxes = source_boxes(cube, catalogue, args.size)
            sample = random.Random(args.seed).sample(boxes, min(args.sample, len(boxes)))
            inputs[n] = (catalogue, boxes, sample)
        cells = {}
        for profile in profiles:
            for n in counts:
                catalogue, boxes, sample = inputs[n]
                if log:
                    log(f"{NAME} [{profile}]: {n} sources ({len(boxes)} on the cube), {args.repeats} round(s)")
                cands = _candidates(env, cube, profile, catalogue, boxes, sample, work_dir, args)
                cells[f"{profile}:{n}"] = {"profile": profile, "sources": n, "with_box": len(boxes),
                                           "needed_bytes": sum(4 * _volume(b) for _, b in boxes),
                                           **common.run_interleaved(cands, args.repeats, args.warmup, log=log)}
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    ratios, targets = {}, {}
    for key, cell in cells.items():
        r, t = cell_ratios(key, cell)
        ratios.update(r)
        targets.update(t)
    failures = [f"{key} {name}: {s['status']}: {s.get('error', '')[-300:]}" for key, cell in cells.items()
                for name in ("ingest", "staging", "ingest_before") if name in cell
                for s in cell[name]["samples"] if s.get("status") != "ok"]
    return {"config": {"shape_fits": args.shape, "counts": counts, "profiles": profiles, "ranks": args.ranks,
                       "sample": args.sample, "size": args.size, "repeats": args.repeats, "seed": args.seed,
                       "ingest_args": args.ingest_args, "timeout_s": args.timeout_s,
                       "reference_tree": args.reference_tree},
            "cube": cube.describe(), "links": {p: env.link(p).describe() for p in profiles}, "cells": cells,
            "paper": paper(args, log), "ratios": ratios, "targets": targets, "failures": failures}


def _volume(box) -> int:
    out = 1
    for a, b in box:
        out *= b - a
    return out


def to_markdown(results: dict) -> str:
    from bench.cutouts._report import markdown

    return markdown(results)


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, **SIZES)


if __name__ == "__main__":
    sys.exit(main())
