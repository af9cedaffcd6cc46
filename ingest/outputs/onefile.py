"""One file for a job's region, written by every rank at its own offsets (`run --output-dir`).

The rule: a run that names one region (`--region`, `--pos`, `--band`, `--channels`) and splits
it into regions that tile it exactly (no halo, no s2p regions, no take_regions) writes ONE file
for that region, whatever the rank count: the bytes the one-rank writer makes (FITS: header,
big-endian data, zeros to a 2880-byte block, the BEAMS table cut to the box; HDF5: the
region's .h5 file, ingest.formats.h5_cutout), under the name a one-rank run gives it
(`output_name(0, box)`). `--per-rank-files` keeps a file per rank and region.

How: the file's layout is known before any data moves (the cut-out plan of
ingest.outputs.prestage_files: metadata pieces at offsets, where the data starts, the length).
Rank 0 makes it under a temporary name, metadata written and full length (sparse); each rank
writes its boxes' bytes where they lie in the region's C order (one run per rank when the
split cuts planes only; a run per row otherwise) and fsyncs them; once every rank has, rank 0
renames it into place. Nothing is gathered to one rank: each rank writes what it read.

Complete or absent: any failure removes the temporary file, so no file appears under the
final name. A killed job leaves `.NAME.tmp-PID`, which check_output_dir removes on the next
run of the same region. Ranks on different nodes write disjoint ranges of one file, which
Lustre, BeeGFS, GPFS and a local disk keep; on NFS use --per-rank-files (as prestage's
frame-per-rank).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ingest.atomic import publish, remove_quietly
from ingest.core.byteruns import box_runs
from ingest.errors import IngestError
from ingest.outputs.prestage_files import plan_files
# _tmp_path: the temporary name check_output_dir knows as a leftover of the file it becomes.
from ingest.outputs.subcubes import _tmp_path, output_ext, output_name

_WRITE_BYTES = 64 << 20  # bounded writes: some filesystems and libcs cap one write(2) near 2 GiB


@dataclass(frozen=True)
class OneFile:
    """The one output file of a job's region: names, metadata, where the data goes, its length."""

    path: str  # final path
    tmp_path: str  # where it is written until every rank is done (rank 0's pid in it)
    box: tuple  # the job's region, numpy-order (start, stop) pairs
    pieces: tuple  # ((offset, bytes), ...): everything but the data
    data_offset: int  # where the region's C-order bytes start
    size_bytes: int
    dtype: np.dtype  # the stored dtype, byte order included (FITS: big-endian)


def one_file_wanted(cfg) -> bool:
    """Whether a `run --output-dir` of `cfg` writes one file (see the module docstring)."""
    named = cfg.region is not None or any(v is not None for v in (cfg.pos, cfg.band, cfg.channels))
    exact = not cfg.halo and cfg.region_shape is None and cfg.take_regions is None
    return bool(cfg.output_dir) and not cfg.per_rank_files and named and exact


def plan_one_file(out_dir, layout, box) -> OneFile:
    """Rank 0: the file for `box` (numpy-order pairs) of `layout` in `out_dir`, before any data."""
    pairs = tuple((int(a), int(b)) for a, b in box)  # the job's box: inside the cube by construction
    path = os.path.join(os.fspath(out_dir), output_name(0, pairs, output_ext(layout)))
    (planned,) = plan_files("subcubes", os.fspath(out_dir), "data", layout, [pairs], None)
    return OneFile(path, _tmp_path(path), pairs, planned.pieces, planned.data_offset, planned.size_bytes,
                   layout.raw_dtype)


def create_one_file(one: OneFile) -> None:
    """Rank 0: the temporary file, its metadata written, at its full length (the rest sparse)."""
    try:
        fd = os.open(one.tmp_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.ftruncate(fd, one.size_bytes)
            for offset, piece in one.pieces:
                os.pwrite(fd, piece, offset)
        finally:
            os.close(fd)
    except OSError as exc:
        remove_quietly(one.tmp_path)
        raise IngestError(f"output dir: cannot make {one.tmp_path} ({exc.strerror or exc})") from None


def write_box(one: OneFile, box, raw: np.ndarray) -> int:
    """Any rank: write `raw` (the stored values of `box`, a part of one.box) at its offsets in the
    temporary file and fsync them. Returns the bytes written."""
    rel = tuple((a - s, b - s) for (a, b), (s, _) in zip(box, one.box))
    shape = tuple(b - a for a, b in one.box)
    extents = tuple(b - a for a, b in rel)
    if raw.shape != extents or any(a < 0 or b > n for (a, b), n in zip(rel, shape)):
        raise IngestError(f"{one.path}: data of shape {raw.shape} for box {box} does not fit the region "
                          f"{one.box}")
    data = np.ascontiguousarray(raw, dtype=one.dtype)  # the stored byte order, as the one-rank writer's
    flat = data.reshape(-1).view(np.uint8)  # a view: the rank's region is not copied
    starts, lengths = box_runs(rel, shape, one.dtype.itemsize, 0, one.dtype.itemsize * math.prod(shape))
    try:
        fd = os.open(one.tmp_path, os.O_WRONLY)
        try:
            at = 0
            for start, length in zip(starts.tolist(), lengths.tolist()):
                for piece in range(0, length, _WRITE_BYTES):
                    n = min(_WRITE_BYTES, length - piece)
                    os.pwrite(fd, flat[at + piece: at + piece + n], one.data_offset + start + piece)
                at += length
            os.fsync(fd)  # this rank's bytes are durable before rank 0 renames the file
        finally:
            os.close(fd)
    except OSError as exc:
        raise IngestError(f"{one.path}: cannot write box {box} into {one.tmp_path} ({exc.strerror or exc})") from None
    return flat.size


def publish_one_file(one: OneFile) -> None:
    """Rank 0, once every rank has written and synced: the file under its final name."""
    try:
        publish(one.tmp_path, one.path)
    except OSError as exc:
        raise IngestError(f"{one.path}: cannot publish {one.tmp_path} ({exc.strerror or exc})") from None


def discard_one_file(one: OneFile) -> None:
    """Rank 0, after a failure anywhere: no temporary file left."""
    remove_quietly(one.tmp_path)
