"""What a cut-out job does per file after its reads, each way side by side in one process.

Four pairs, interleaved round by round on the same inputs:
- a cut-out's header: ingest.outputs.cutout_headers with its string card written directly
  (`_text_card`) against the same headers with astropy's Card building that card;
- a cut-out's BEAMS table: `CutoutHeaders.tail` (astropy for the first table of a shape, then
  cards patched and rows packed) against astropy building each one (`box_beams(box).to_bytes()`),
  for --files boxes of a table of --channels rows (an ASKAP cube's has 6,668);
- a file's CRC-32 for the manifest: summed over the bytes in memory as they are written
  (ingest.atomic.DurableBatch) against read back from the file after it is written and synced
  (`ingest.outputs.cutouts.file_crc32`, from the page cache);
- manifest.json's text: one line per source (`manifest_text`, json's C encoder) against
  `json.dump(indent=1)` (json's Python encoder).
The files are WALLABY-sized cut-outs (77 x 30 x 30 float32, 277 kB), written once before the
rounds; --files sets how many (their bytes are held in memory for the summed side).

    python -m bench.cutouts.writes [--files 2000] [--sources 10000] [--channels 96] [--repeats 5] [--quick]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zlib

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np

from bench import common

NAME = "cutout_writes"
SIZES = {"files": (2000, 200), "sources": (10000, 1000), "repeats": (5, 1), "warmup": (1, 0)}
BOX = (77, 30, 30)  # a WALLABY cubelet's channels and pixels (bench/cutouts/_setup.py)
PAIRS = (("headers_card", "headers_patched"), ("beams_astropy", "beams_patched"), ("crc_read_back", "crc_summed"),
         ("manifest_dump", "manifest_text"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.cutouts.writes", description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--files", type=int, default=None, help="cut-out files for the CRC pair (default 2000, --quick 200)")
    parser.add_argument("--sources", type=int, default=None,
                        help="headers made and manifest entries written (default 10000, --quick 1000)")
    parser.add_argument("--channels", type=int, default=96,
                        help="the cube's channels, so its BEAMS table's rows (default 96; an ASKAP cube's 6668)")
    return parser


def _inputs(work_dir: str, n_files: int, n_sources: int, n_channels: int):
    """A cube's layout, boxes and names for the headers, cut-out files on disk and their bytes,
    and a manifest of n_sources entries."""
    from ingest.atomic import DurableBatch
    from ingest.formats.reader import read_layout
    from ingest.testbed.synth import write_cube
    from ingest.transports import open_transport

    cube = os.path.join(work_dir, "cube.fits")
    write_cube(cube, (n_channels, 64, 64), -32, restfrq_hz=1.420405752e9, beams=True)
    with open_transport(cube, "posix") as transport:
        layout = read_layout(transport, 0)
    rng = np.random.default_rng(44)
    boxes = [tuple((int(a), int(a) + 3) for a in (rng.integers(1, n - 4) for n in layout.shape))
             for _ in range(n_sources)]
    names = [f"WALLABY J{i:06d}-270137" for i in range(n_sources)]
    data = np.arange(np.prod(BOX), dtype=">f4").reshape(BOX)
    batch, blobs, paths = DurableBatch(), [], []
    for i in range(n_files):
        path = os.path.join(work_dir, f"cut{i:05d}.fits")
        blob = b"SIMPLE  =" + i.to_bytes(4, "big") + (data + i).tobytes()
        with batch.write(path, path + ".tmp") as fh:
            fh.write(blob)
        blobs.append(blob)
        paths.append(path)
    batch.publish()
    entries = [{"name": name, "row": i, "status": "done", "file": f"{name}.fits", "bytes": len(blobs[0]),
                "crc32": 123456789 + i, "box": [list(p) for p in boxes[i]], "clipped": [],
                "region": "CIRCLE 150.12 -30.25 0.0042", "requests": 0.33, "wire_bytes": 5368400}
               for i, name in enumerate(names)]
    manifest = {"schema": "ingest.cutouts/1", "cube": {"source": "s3://bench/cube.fits", "bytes": 10**9},
                "sources": entries}
    return layout, boxes, names, paths, blobs, manifest


def _timed(fn) -> dict:
    t0 = time.perf_counter()
    fn()
    return {"elapsed_s": time.perf_counter() - t0}


def candidates(layout, boxes, names, paths, blobs, manifest) -> list[common.Candidate]:
    from astropy.io import fits

    from ingest.outputs import cutout_headers
    from ingest.outputs.cutouts import file_crc32, manifest_text

    def headers(card_maker):
        def run():
            kept = cutout_headers._text_card
            cutout_headers._text_card = card_maker
            try:
                made = cutout_headers.CutoutHeaders(layout)
                for box, name in zip(boxes, names):
                    made.head(box, name)
            finally:
                cutout_headers._text_card = kept
        return run

    def by_card(key, text, comment):
        return fits.Card(key, text, comment).image

    beam_boxes = boxes[:len(paths)]  # astropy's way takes milliseconds a table: --files of them

    def beams_patched():
        made = cutout_headers.CutoutHeaders(layout)
        for box in beam_boxes:
            made.tail(box)

    return [common.Candidate("headers_card", lambda: _timed(headers(by_card)), {}),
            common.Candidate("headers_patched", lambda: _timed(headers(cutout_headers._text_card)), {}),
            common.Candidate("beams_astropy",
                             lambda: _timed(lambda: [layout.box_beams(box).to_bytes() for box in beam_boxes]), {}),
            common.Candidate("beams_patched", lambda: _timed(beams_patched), {}),
            common.Candidate("crc_read_back", lambda: _timed(lambda: [file_crc32(p) for p in paths]), {}),
            common.Candidate("crc_summed", lambda: _timed(lambda: [zlib.crc32(b) for b in blobs]), {}),
            common.Candidate("manifest_dump", lambda: _timed(lambda: json.dump(manifest, io.StringIO(), indent=1)), {}),
            common.Candidate("manifest_text", lambda: _timed(lambda: manifest_text(manifest)), {})]


def run(env, args) -> dict:
    """Every pair interleaved (env: unused, nothing is read from a store)."""
    from ingest.outputs.cutout_headers import CutoutHeaders
    from ingest.outputs.cutouts import file_crc32, manifest_text

    log = common.logger(args)
    work_dir = tempfile.mkdtemp(prefix="ingest-bench-writes-")
    try:
        inputs = _inputs(work_dir, args.files, args.sources, args.channels)
        # Each pair's two ways give the same answer: checked once, untimed.
        layout, boxes, _, paths, blobs, manifest = inputs
        patched = CutoutHeaders(layout)
        if any(patched.tail(box) != layout.box_beams(box).to_bytes() for box in boxes[:len(paths)]):
            raise RuntimeError("a patched BEAMS table differs from the one astropy builds")
        if [file_crc32(p) for p in paths] != [zlib.crc32(b) for b in blobs]:
            raise RuntimeError("the files' CRC-32s read back differ from the ones summed in memory")
        if json.loads(manifest_text(manifest)) != manifest:
            raise RuntimeError("manifest_text does not give back the manifest")
        results = common.run_interleaved(candidates(*inputs), args.repeats, warmup=args.warmup, log=log)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    ratios = {f"{slow}/{fast}": common.paired_ratio(results, slow, fast, "elapsed_s") for slow, fast in PAIRS}
    return {"config": {"files": args.files, "file_bytes": 13 + 4 * int(np.prod(BOX)), "sources": args.sources,
                       "channels": args.channels, "repeats": args.repeats, "warmup": args.warmup},
            "candidates": results, "ratios": ratios, "targets": {}}


def to_markdown(results: dict) -> str:
    cfg, cands = results["config"], results["candidates"]
    rows = [[name, common.spread(cands[name]["summary"]["elapsed_s"], "{:.3f}")] for pair in PAIRS for name in pair]
    head = (f"### A cut-out's writing, each way side by side ({cfg['sources']} headers and manifest entries, "
            f"{cfg['files']} files of {cfg['file_bytes'] / 1e3:.0f} kB and BEAMS tables cut from "
            f"{cfg.get('channels', 96)} rows, {cfg['repeats']} interleaved rounds)\n\n")
    return (head + common.markdown_table(["way", "s median (min-max)"], rows) + "\n\n"
            + common.ratios_table(results["ratios"], results["targets"]))


def main(argv=None) -> int:
    return common.bench_main(sys.modules[__name__], argv, server=False, **SIZES)


if __name__ == "__main__":
    sys.exit(main())
