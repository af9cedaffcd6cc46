"""`python -m ingest tile SOURCE DEST_PREFIX --grid PXxPYxPZ`: store a cube as one object per box."""
from __future__ import annotations

import time

from ingest.errors import ConfigError, IngestError
from ingest.outputs.tile import tile_cube
from ingest.units import format_bytes, parse_bytes


def add_parser(subparsers) -> None:
    """Register `tile SOURCE DEST_PREFIX --grid PXxPYxPZ [--hdu N | --dataset PATH] ...`."""
    p = subparsers.add_parser(
        "tile",
        help="store a cube as one object per box of a grid, plus an index `run` reads",
        description="Read each box of --grid from SOURCE (a path, presigned URL or s3://) and write it as a "
        "standalone FITS or HDF5 object DEST_PREFIX/tile_NNNN.fits|.h5, then DEST_PREFIX/index.json "
        "(schema ingest.tiles/1) last. `python -m ingest run --source DEST_PREFIX/index.json` reads the "
        "tiles, each whole, as the job's regions. Credentials and endpoint come from boto3's chain.",
    )
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("dest", metavar="DEST_PREFIX", help="s3://bucket/prefix/ or a local directory")
    p.add_argument("--grid", required=True, help="boxes per axis in FITS order (x first), e.g. 2x2x1")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--hdu", type=int, default=0, help="FITS: the image HDU to cut (default 0)")
    which.add_argument("--dataset", default=None, help="HDF5: the dataset to cut (default: the only cube)")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint for source and destination "
                   "(default: boto3's chain)")
    p.add_argument("--threads", type=int, default=4, help="concurrent range requests per box (default 4)")
    p.add_argument("--chunk-bytes", default="16MiB", help="largest range request (default 16MiB)")
    p.add_argument("--parallel", type=int, default=1, help="boxes read and written at once (default 1)")
    p.add_argument("--quiet", action="store_true", help="no line per tile")
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.threads < 1:
        raise ConfigError(f"threads: expected at least 1 thread, got {args.threads}")
    started = time.perf_counter()
    try:
        index, where = tile_cube(args.source, args.dest, args.grid, hdu=args.hdu, dataset=args.dataset,
                                 endpoint_url=args.endpoint_url, threads=args.threads,
                                 chunk_bytes=parse_bytes(args.chunk_bytes, "chunk_bytes"), parallel=args.parallel,
                                 log=None if args.quiet else print)
    except OSError as exc:  # a local write: named by its file
        raise IngestError(f"tile: {exc.filename or args.dest}: {exc.strerror or exc}") from None
    elapsed_s = time.perf_counter() - started
    print(f"tiled {index.source} ({'x'.join(map(str, reversed(index.shape)))} {index.dtype}) into "
          f"{len(index.tiles)} {index.format} tiles, {format_bytes(index.stored_bytes)}, in {elapsed_s:.2f} s; "
          f"index {where}")
    return 0
