"""`python -m ingest tile SOURCE DEST_PREFIX --grid PXxPYxPZ`: store a cube as one object per box.

The other object layout of the layout study: the same boxes a `run --grid` reads with Range
requests from one object, here each stored as its own standalone FITS (or HDF5, following the
source) object `PREFIX/tile_NNNN.fits|.h5`, read whole. Boxes come from the job's own
decomposition (`grid_boxes`, on chunk boundaries for a chunked HDF5 source), are read with the
API's planner and written by the `run --output-dir` writers (header or attributes shifted to
the box). `PREFIX/index.json` (ingest.core.tiles) is written LAST, after an old one is removed
first, so an index exists only when every tile it lists does.

One process: boxes one after another, or `--parallel N` at once (each box is in memory while it
is written and uploaded, so memory is about N boxes).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ingest.errors import ConfigError, TransportError
from ingest.units import format_bytes


class _Prefix:
    """Where tiles go: s3://bucket/prefix/ (uploaded with boto3) or a local directory."""

    def __init__(self, dest: str, endpoint_url: str | None, parallel: int):
        self.dest = dest
        if dest.startswith("s3://"):
            bucket, _, prefix = dest[len("s3://"):].partition("/")
            if not bucket:
                raise ConfigError(f"dest: {dest!r} has no bucket (expected s3://bucket/prefix/)")
            self.bucket, self.prefix = bucket, (prefix.rstrip("/") + "/" if prefix.strip("/") else "")
            from ingest.transports.s3client import s3_client

            self.client = s3_client(max_pool_connections=max(10, 2 * parallel),
                                    **({"endpoint_url": endpoint_url} if endpoint_url else {}))
            self.scratch = tempfile.mkdtemp(prefix="ingest-tile-")
        else:
            self.bucket = self.client = None
            try:
                os.makedirs(dest, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"dest: cannot create directory {dest}: {exc.strerror or exc}") from None
            # Scratch inside the destination: finished tiles are renamed into place, never copied.
            self.scratch = tempfile.mkdtemp(prefix=".ingest-tile-", dir=dest)

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}" if self.bucket else os.path.join(self.dest, key)

    def put(self, path: str, key: str) -> None:
        """Publish a finished local file as `key` (upload, or rename within the filesystem)."""
        if self.bucket is None:
            os.replace(path, os.path.join(self.dest, key))
            return
        from ingest.staging.upload import upload_file

        try:
            upload_file(path, self.location(key), progress=False, client=self.client)
        finally:
            os.unlink(path)

    def remove(self, key: str) -> None:
        """Remove `key` if it is there (an old index must not outlive the tiles it listed)."""
        if self.bucket is None:
            try:
                os.unlink(os.path.join(self.dest, key))
            except FileNotFoundError:
                pass
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as exc:  # noqa: BLE001 - botocore's errors, named by the object
            raise TransportError(f"{self.location(key)}: cannot remove the old index: {exc}") from exc

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def tile_cube(source: str, dest: str, grid: str, *, hdu: int = 0, dataset: str | None = None,
              endpoint_url: str | None = None, threads: int = 4, chunk_bytes: int = 16 << 20,
              parallel: int = 1, log=None):
    """Cut `source` into the boxes of `grid` (FITS order), one object each under `dest`, then write
    the index last. Returns (the TileIndex, where the index is)."""
    from ingest.api.read import plan_read, read_selection
    from ingest.core.decompose import grid_boxes, parse_grid
    from ingest.core.selection import box_to_region
    from ingest.core.tiles import INDEX_NAME, Tile, data_crc32, make_index, tile_key
    from ingest.formats.reader import read_any_layout
    from ingest.redact import redact_url
    from ingest.transports.retry import RetryPolicy
    from ingest.transports import open_transport
    from ingest.outputs.subcubes import write_subcube

    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ConfigError(f"parallel: expected a number of boxes >= 1, got {parallel!r}")
    options = {"endpoint_url": endpoint_url} if endpoint_url else {}
    retry = RetryPolicy()
    with open_transport(source, "auto", threads=threads * parallel, **options) as transport:
        layout = read_any_layout(transport, hdu=hdu, dataset=dataset, retry=retry)
        grid_fits = parse_grid(grid, len(layout.shape))
        chunks = layout.chunks  # a chunked source is cut on chunk boundaries
        boxes = grid_boxes(layout.shape, grid_fits, chunk_shape=chunks.chunk_shape if chunks is not None else None,
                           origin=(0,) * len(layout.shape))
        prefix = _Prefix(dest, endpoint_url, parallel)
        try:
            prefix.remove(INDEX_NAME)

            def one(number: int) -> Tile:
                box = boxes[number]
                sel, plan = plan_read(layout, box_to_region(box), chunk_bytes=chunk_bytes)
                raw, _ = read_selection(transport, layout, sel, plan, threads=threads, convert=False, retry=retry)
                path = write_subcube(prefix.scratch, number, box, raw, layout)
                key = tile_key(number, layout.kind)
                tile = Tile(key, tuple(box), os.path.getsize(path), data_crc32(raw))
                prefix.put(path, key)
                if log:
                    log(f"{prefix.location(key)}: box {[list(b) for b in box]}, {format_bytes(tile.size_bytes)}")
                return tile

            with ThreadPoolExecutor(max_workers=parallel) as pool:
                tiles = list(pool.map(one, range(len(boxes))))
            made = make_index(source=redact_url(layout.source), fmt=layout.kind, shape=layout.shape,
                              dtype=layout.raw_dtype, grid_fits=grid_fits, tiles=tiles,
                              source_hdu=layout.hdu if layout.kind == "fits" else None,
                              dataset=layout.dataset)
            index_path = os.path.join(prefix.scratch, INDEX_NAME)
            with open(index_path, "w", encoding="utf-8") as fh:
                fh.write(made.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            prefix.put(index_path, INDEX_NAME)  # last: the tiles it lists are all in place
        finally:
            prefix.close()
    return made, prefix.location(INDEX_NAME)
