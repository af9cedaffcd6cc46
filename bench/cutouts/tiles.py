"""A catalogue's cut-outs over a collection of tiles against the same cut-outs from one cube, side by side.

--tiles N (a square number, default 16) SIN tile cubes on a grid, each with its own tangent point
and a BEAMS table, neighbours overlapping by OVERLAP_PX pixels, and one cube of the same total
bytes (N tiles' pixels on one SIN plane about the field's centre, the same channels). One catalogue
of --sources sources (default 10,000) of one size (SIZE), uniform over the tiles' common field
(every source on some tile), cut by `mpiexec -n --ranks python -m ingest cutouts` from the glob
of the tiles and from the cube, interleaved round by round into fresh output directories. Both
read local files (posix): what is compared is what a collection adds (the index, the rule over N
tiles' WCSs, a transport and a layout per tile, the split over ranks), not a link.
Ratio: tiles / cube wall time and report makespan (target <= 1.2).

    python -m bench.cutouts.tiles [--tiles 16] [--sources 10000] [--ranks 2] [--tile-px 192] [--nchan 48] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common

NAME = "cutouts_tiles"
SIZES = {"tiles": (16, 16), "sources": (10000, 1000), "tile_px": (192, 96), "nchan": (48, 24), "repeats": (3, 1),
         "warmup": (1, 0)}
OVERLAP_PX = 12
SIZE = "2arcmin 55.5kHz"  # 6 px and 3 channels each way on the test bed's 20" pixels and 18.5 kHz channels
TARGET = {"op": "<=", "value": 1.2}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.cutouts.tiles", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--tiles", type=int, default=None, help="tiles, a square number (default 16)")
    parser.add_argument("--sources", type=int, default=None, help="catalogue rows (default 10000, --quick 1000)")
    parser.add_argument("--ranks", type=int, default=2, help="mpiexec ranks of both jobs (default 2)")
    parser.add_argument("--tile-px", dest="tile_px", type=int, default=None, help="tile side in pixels (default 192)")
    parser.add_argument("--nchan", type=int, default=None, help="channels of every tile and the cube (default 48)")
    return parser


def _write(path: str, tile, seed: int) -> None:
    from astropy.io import fits

    from ingest.testbed.survey import tile_header
    from ingest.testbed.synth import beams_hdu

    data = (np.arange(math.prod(tile.shape), dtype=np.float32) + seed).reshape(tile.shape)
    fits.HDUList([fits.PrimaryHDU(data, tile_header(tile)), beams_hdu(tile.shape[0], 1)]).writeto(path, overwrite=True)


def _inputs(work_dir: str, n_tiles: int, tile_px: int, nchan: int, n_sources: int) -> tuple[str, str, str]:
    """(the tiles' glob, the cube's path, the catalogue's path)."""
    from astropy.table import Table
    from astropy.wcs import WCS

    from ingest.testbed.survey import FIRST_HZ, PIXEL_DEG, SurveyTile, tile_header

    side = math.isqrt(n_tiles)
    if side * side != n_tiles:
        raise SystemExit(f"--tiles: {n_tiles} is not a square number (4, 9, 16, ...)")
    ra0, dec0 = 150.0, -30.0
    step_px = tile_px - OVERLAP_PX
    os.makedirs(os.path.join(work_dir, "tiles"))
    cube = SurveyTile("cube", os.path.join(work_dir, "cube.fits"), ra0, dec0, (nchan, side * tile_px, side * tile_px),
                      FIRST_HZ, 0)
    wcs = WCS(tile_header(cube)).celestial
    centre_px = (side * tile_px - 1) / 2
    for r in range(side):
        for c in range(side):
            # Tangent points on the cube's own plane, a tile step apart: the tiles cover the cube's middle.
            x = centre_px + (c - (side - 1) / 2) * step_px
            y = centre_px + (r - (side - 1) / 2) * step_px
            sky = wcs.pixel_to_world(x, y)
            tile = SurveyTile(f"t{r}{c}", os.path.join(work_dir, "tiles", f"tile_r{r}_c{c}.fits"), float(sky.ra.deg),
                              float(sky.dec.deg), (nchan, tile_px, tile_px), FIRST_HZ, 1 + r * side + c)
            _write(tile.path, tile, tile.seed)
    _write(cube.path, cube, 0)
    # Sources uniform over the field every tile position covers, a cut-out's half-width inside its edges.
    rng = np.random.default_rng(7)
    half_px = (side * step_px + OVERLAP_PX) / 2 - 8
    xs = centre_px + rng.uniform(-half_px, half_px, n_sources)
    ys = centre_px + rng.uniform(-half_px, half_px, n_sources)
    sky = wcs.pixel_to_world(xs, ys)
    freq = FIRST_HZ + rng.uniform(4, nchan - 5, n_sources) * 18.5e3
    table = Table({"name": [f"s{i:05d}" for i in range(n_sources)], "ra": sky.ra.deg, "dec": sky.dec.deg, "freq": freq})
    table["ra"].unit, table["dec"].unit, table["freq"].unit = "deg", "deg", "Hz"
    catalogue = os.path.join(work_dir, "catalogue.ecsv")
    table.write(catalogue, format="ascii.ecsv")
    assert abs(PIXEL_DEG * 3600 - 20.0) < 1e-9
    return os.path.join(work_dir, "tiles", "*.fits"), cube.path, catalogue


def _candidate(name: str, source: str, catalogue: str, work_dir: str, ranks: int) -> common.Candidate:
    counter = iter(range(1 << 30))
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

    def command(out: str, report: str) -> list[str]:
        return ["mpiexec", "-n", str(ranks), "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "ingest",
                "cutouts", "--source", source, "--catalogue", catalogue, "--size", SIZE, "--output-dir", out,
                "--report", report, "--no-probe", "--strategy", "large"]

    def run() -> dict:
        k = next(counter)
        out, report = os.path.join(work_dir, f"{name}-{k}"), os.path.join(work_dir, f"{name}-{k}.json")
        t0 = time.monotonic()
        proc = subprocess.run(command(out, report), env=env, capture_output=True, text=True, timeout=1800)
        wall_s = time.monotonic() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        doc = json.load(open(report))
        shutil.rmtree(out, ignore_errors=True)
        return {"wall_s": wall_s, "makespan_s": doc["makespan_s"], "rank0_prepare_s": doc["rank0_prepare_s"],
                "done": doc["totals"]["done"], "skipped": doc["totals"]["skipped"],
                "bytes_wire": doc["totals"]["bytes_wire"], "requests": doc["totals"]["requests"]}

    return common.Candidate(name, run, {"command": " ".join(command("OUT", "REPORT.json"))})


def run(env, args) -> dict:
    """Both jobs interleaved (env: unused, both read local files)."""
    log = common.logger(args)
    work_dir = tempfile.mkdtemp(prefix="ingest-bench-tiles-")
    try:
        glob, cube, catalogue = _inputs(work_dir, args.tiles, args.tile_px, args.nchan, args.sources)
        tile_bytes = sum(os.path.getsize(os.path.join(os.path.dirname(glob), n))
                         for n in os.listdir(os.path.dirname(glob)) if n.endswith(".fits"))
        cube_bytes = os.path.getsize(cube)
        cands = [_candidate("cube", cube, catalogue, work_dir, args.ranks),
                 _candidate("tiles", glob, catalogue, work_dir, args.ranks)]
        results = common.run_interleaved(cands, args.repeats, warmup=args.warmup, log=log)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    ratios = {f"tiles/cube {m}": common.paired_ratio(results, "tiles", "cube", m) for m in ("wall_s", "makespan_s")}
    return {"config": {"tiles": args.tiles, "sources": args.sources, "ranks": args.ranks, "tile_px": args.tile_px,
                       "nchan": args.nchan, "size": SIZE, "tiles_bytes": tile_bytes, "cube_bytes": cube_bytes,
                       "repeats": args.repeats, "warmup": args.warmup},
            "candidates": results, "ratios": ratios, "targets": {k: TARGET for k in ratios}}


def to_markdown(results: dict) -> str:
    cfg, cands = results["config"], results["candidates"]
    rows = [[name, common.spread(cands[name]["summary"]["wall_s"]), common.spread(cands[name]["summary"]["makespan_s"]),
             common.spread(cands[name]["summary"]["rank0_prepare_s"]),
             f"{cands[name]['summary']['done']['median']:.0f}"] for name in ("cube", "tiles")]
    head = (f"### {cfg['sources']} cut-outs from {cfg['tiles']} tiles against one cube of the same bytes "
            f"({cfg['tiles_bytes'] / 2**20:.0f} and {cfg['cube_bytes'] / 2**20:.0f} MiB, {cfg['ranks']} ranks, "
            f"{cfg['repeats']} interleaved rounds)\n\n")
    return (head + common.markdown_table(["source", "wall s", "makespan s", "rank 0 prepare s", "cut"], rows) + "\n\n"
            + common.ratios_table(results["ratios"], results["targets"]))


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, server=False, **SIZES)


if __name__ == "__main__":
    sys.exit(main())
