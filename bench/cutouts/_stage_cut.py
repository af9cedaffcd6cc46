"""The staging baseline of bench.cutouts.catalogue, in a process of its own: stage the whole cube, then cut.

    python bench/cutouts/_stage_cut.py --source s3://b/k [--endpoint-url URL] --boxes boxes.json
                                       --stage-dir DIR --output-dir OUT

1. ingest's own staging download (`ingest.staging.stage.stage_object`: ranged GETs of
   --chunk-bytes on --threads threads into one local file, fsynced), then
2. the cut-outs as a user cuts them from a local cube: astropy opens the staged file with
   memmap, numpy slices each box, astropy writes it with the cube's header, CRPIXn shifted.
The boxes come ready-made (ingest's rule, computed by the parent), so the catalogue's conversion
to pixels is not in this side's time. Prints one JSON line: the phases' seconds, files, bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv=None) -> int:
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python bench/cutouts/_stage_cut.py", description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="s3://bucket/key of the cube")
    parser.add_argument("--endpoint-url", default=None, help="S3 endpoint (a link profile's proxy)")
    parser.add_argument("--boxes", required=True, help="JSON file: [[file stem, box], ...], boxes numpy order")
    parser.add_argument("--stage-dir", required=True, help="where the staged cube goes (removed at the end)")
    parser.add_argument("--output-dir", required=True, help="where the cut-outs go")
    parser.add_argument("--threads", type=int, default=4, help="staging threads (default 4, as `stage`)")
    parser.add_argument("--chunk-bytes", type=int, default=16 << 20, help="staging request bytes (default 16 MiB)")
    args = parser.parse_args(argv)

    import numpy as np
    from astropy.io import fits

    from bench.cutouts._setup import shifted_header
    from bench._rank_record import status_bytes as _status_bytes
    from ingest.staging.stage import stage_object
    from ingest.transports import open_transport

    with open(args.boxes) as fh:
        boxes = [(stem, tuple(tuple(p) for p in box)) for stem, box in json.load(fh)]
    os.makedirs(args.output_dir, exist_ok=True)
    options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    t0 = time.perf_counter()
    with open_transport(args.source, "s3", threads=args.threads, **options) as transport:
        staged, stage_s, stats = stage_object(transport, args.stage_dir, chunk_bytes=args.chunk_bytes,
                                              threads=args.threads)
    t1 = time.perf_counter()
    written = 0
    try:
        with fits.open(staged, memmap=True) as hdul:
            data, header = hdul[0].data, hdul[0].header
            for stem, box in boxes:
                cut = np.asarray(data[tuple(slice(a, b) for a, b in box)])
                path = os.path.join(args.output_dir, stem + ".fits")
                fits.PrimaryHDU(cut, header=shifted_header(header, box)).writeto(path, overwrite=True)
                written += os.path.getsize(path)
        t2 = time.perf_counter()
    finally:
        os.unlink(staged)
    print(json.dumps({"stage_s": t1 - t0, "stage_only_s": stage_s, "cut_s": t2 - t1, "elapsed_s": t2 - t_start,
                      "stage_requests": stats.requests, "staged_bytes": stats.bytes_wire, "files": len(boxes),
                      "bytes_written": written, "peak_rss_bytes": _status_bytes("VmHWM")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
