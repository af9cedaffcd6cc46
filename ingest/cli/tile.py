"""`python -m ingest tile SOURCE DEST_PREFIX --grid PXxPYxPZ`: store a cube as one object per box."""
from __future__ import annotations

import time

from ingest.config import add_setting_arguments, setting_values
from ingest.core.lattice import DEFAULT_CHUNK_BYTES, DEFAULT_THREADS
from ingest.errors import ConfigError, IngestError
from ingest.outputs.tile import tile_cube
from ingest.units import format_bytes

# The run settings tile takes (boxes, the HDU or dataset, the endpoint, how each box is read).
_SETTINGS = dict.fromkeys(("grid", "hdu", "dataset", "endpoint_url", "threads", "chunk_bytes"))


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
    add_setting_arguments(p, _SETTINGS, "tile")
    p.add_argument("--parallel", type=int, default=1, help="boxes read and written at once (default 1)")
    p.add_argument("--quiet", action="store_true", help="no line per tile")
    p.set_defaults(func=_run)


def _run(args) -> int:
    given = setting_values(args, _SETTINGS)
    if given["grid"] is None:
        raise ConfigError("grid: required for tile (boxes per axis in FITS order, x first, e.g. 2x2x1)")
    if given["hdu"] is not None and given["dataset"] is not None:
        raise ConfigError("hdu: and dataset: both given; a FITS cube has HDUs, an HDF5 file datasets")
    started = time.perf_counter()
    try:
        index, where = tile_cube(args.source, args.dest, given["grid"], hdu=given["hdu"] or 0, dataset=given["dataset"],
                                 endpoint_url=given["endpoint_url"], threads=given["threads"] or DEFAULT_THREADS,
                                 chunk_bytes=given["chunk_bytes"] or DEFAULT_CHUNK_BYTES, parallel=args.parallel,
                                 log=None if args.quiet else print)
    except OSError as exc:  # a local write: named by its file
        raise IngestError(f"tile: {exc.filename or args.dest}: {exc.strerror or exc}") from None
    elapsed_s = time.perf_counter() - started
    print(f"tiled {index.source} ({'x'.join(map(str, reversed(index.shape)))} {index.dtype}) into "
          f"{len(index.tiles)} {index.format} tiles, {format_bytes(index.stored_bytes)}, in {elapsed_s:.2f} s; "
          f"index {where}")
    return 0
