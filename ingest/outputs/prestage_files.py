"""The files a pre-stage writes, by layout, and how each becomes complete (pure naming + small file ops).

- `frame`: one file per cube, DIR/<source file name>: the source's header bytes verbatim, then the
  full data size as a sparse file; every rank writes its regions' bytes at the offsets they have
  in the object, so the pipeline sees the staged cube and the holes cost no disk.
- `frame-per-rank`: the same, one file per cube and rank, DIR/rankNNNN/<name>, for filesystems
  where ranks on different nodes must not write one file (NFS writes back whole pages).
- `subcubes`: one cut-out per cube and region, DIR/<stem>_region<NNN>.fits (WCS shifted, the
  BEAMS table cut to the region's channels after the data when the cube has one), or .h5 for an
  HDF5 source (the dataset at its path, its attributes, the region's position).

A FITS frame is the full cube: it keeps the full BEAMS table, after the padded data.

An output follows its source's format. A file is its metadata `pieces` (bytes at offsets: a FITS
header at 0; an HDF5 file's superblock, object headers and heaps wherever h5py put them) and its
data, written by the ranks at `data_offset` (compact) or at the object's own offsets (mirror).

A file lives under a hidden temporary name (`.<name>.part`, fixed so a re-run finds it) until
every region written into it is done; then it is renamed into place (complete or absent).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ingest.errors import ConfigError
from ingest.formats.fits import BLOCK_BYTES, FitsLayout
from ingest.staging.stage import staged_path
from ingest.atomic import publish
from ingest.outputs.subcubes import cutout_parts

PAGE_BYTES = 4096  # a partly written page of a sparse file still allocates the whole page


@dataclass(frozen=True)
class OutFile:
    """One output file: where it goes, its metadata, where its data goes, how long it is."""

    path: str  # final path
    pieces: tuple  # ((offset, bytes), ...): everything but the data, written when the file is made
    data_offset: int  # compact cut-out: where the region's C-order bytes start (mirror: unused)
    size_bytes: int
    mirror: bool  # True: bytes at their object offsets (frame); False: a compact cut-out

    @property
    def metadata_bytes(self) -> int:
        return sum(len(b) for _, b in self.pieces)

    @property
    def tmp_path(self) -> str:
        directory, name = os.path.split(self.path)
        return os.path.join(directory, f".{name}.part")

    def current_path(self) -> str | None:
        """The file as it stands: final, temporary, or None."""
        for path in (self.path, self.tmp_path):
            if os.path.exists(path):
                return path
        return None


def frame_header(layout: FitsLayout) -> bytes:
    """The header bytes a FITS frame file starts with: exactly the source's, or a clear refusal."""
    if layout.hdu != 0:
        raise ConfigError(f"layout: frame copies the source's header verbatim, but the cube is HDU {layout.hdu} "
                          f"of {layout.source}; SoFiA-2 reads the primary HDU, so that header cannot lead a "
                          f"file unchanged. Use --layout subcubes")
    header = layout.header_text.encode("ascii")
    if len(header) != layout.data_offset or len(header) % BLOCK_BYTES:
        raise ConfigError(f"layout: the header of {layout.source} ({len(header)} bytes) does not end where its data "
                          f"starts (byte {layout.data_offset}); it cannot be copied verbatim. Use --layout subcubes")
    return header


def frame_pieces(layout, read_range) -> tuple:
    """Rank 0: the metadata a frame file copies from the source, verbatim. `read_range(offset,
    nbytes)` fetches object bytes (an HDF5 file's metadata may sit before and after the data).
    A FITS cube's BEAMS table (its header says CASAMBM = T) follows the padded data, whole."""
    if layout.kind == "hdf5":
        from ingest.outputs.h5files import frame_pieces as hdf5_pieces

        return tuple(hdf5_pieces(layout, read_range))
    pieces = ((0, frame_header(layout)),)
    if getattr(layout, "beams", None) is not None:
        pieces += ((_padded(layout.data_offset + layout.data_bytes), layout.beams.to_bytes()),)
    return pieces


def _frame_size(layout, frame) -> int:
    """A FITS frame is padded to whole blocks as FITS requires, and holds its metadata pieces (a
    BEAMS table after the data); an HDF5 one is the object's size."""
    if layout.kind == "hdf5":
        return layout.object_bytes
    return max([_padded(layout.data_offset + layout.data_bytes)] + [offset + len(piece) for offset, piece in frame])


def _subcube(layout, box, path_stem: str, index: int) -> OutFile:
    nbytes = layout.itemsize * math.prod(b - a for a, b in box)
    if layout.kind == "hdf5":
        from ingest.formats.h5_cutout import subcube_image

        image = subcube_image(layout, box, source_label=layout.source)
        return OutFile(f"{path_stem}_region{index + 1:03d}.h5", tuple(image.pieces), image.data_offset,
                       image.size_bytes, False)
    header, tail = cutout_parts(layout, box)  # tail: the BEAMS table cut to the box, after the padded data
    pieces = ((0, header),) + (((len(header) + _padded(nbytes), tail),) if tail else ())
    return OutFile(f"{path_stem}_region{index + 1:03d}.fits", pieces, len(header),
                   len(header) + _padded(nbytes) + len(tail), False)


def _padded(nbytes: int) -> int:
    return nbytes + (-nbytes % BLOCK_BYTES)


def plan_files(kind: str, out_dir: str, name: str, layout: FitsLayout, regions, assignment, frame=None) -> list[dict]:
    """For one cube (`name`: "data" or a companion's): per region, the OutFile it writes into.
    `frame`: the frame layouts' metadata pieces (frame_pieces), fetched once by the caller."""
    base_name = os.path.basename(staged_path(out_dir, layout.source))
    if kind == "subcubes":
        stem = os.path.join(out_dir, _stem(base_name))
        return [_subcube(layout, box, stem, index) for index, box in enumerate(regions)]
    if frame is None:
        raise ValueError("plan_files: the frame layouts need the source's metadata pieces")
    size_bytes = _frame_size(layout, frame)
    if kind == "frame":
        shared = OutFile(os.path.join(out_dir, base_name), tuple(frame), 0, size_bytes, True)
        return [shared] * len(regions)
    rank_of = {index: rank for rank, mine in enumerate(assignment) for index in mine}
    return [OutFile(os.path.join(out_dir, f"rank{rank_of[i]:04d}", base_name), tuple(frame), 0, size_bytes, True)
            for i in range(len(regions))]


def stem_of(source: str) -> str:
    """The source's file name without its format's extension: cube.fits -> cube."""
    return _stem(os.path.basename(staged_path(".", source)))


def _stem(base_name: str) -> str:
    for ext in (".fits", ".h5", ".hdf5", ".he5"):
        if base_name.lower().endswith(ext):
            return base_name[: -len(ext)]
    return base_name


def create(out: OutFile) -> None:
    """Make the temporary file (header written, full size, sparse) unless it is already there."""
    os.makedirs(os.path.dirname(out.path) or ".", exist_ok=True)
    if os.path.exists(out.path):  # a published file a re-run must change: back to its temporary name
        os.replace(out.path, out.tmp_path)
    fd = os.open(out.tmp_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != out.size_bytes:
            os.ftruncate(fd, out.size_bytes)
        for offset, data in out.pieces:
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def finish(out: OutFile) -> None:
    """Publish a file whose regions are all done (no-op when it already is)."""
    if os.path.exists(out.tmp_path):
        publish(out.tmp_path, out.path)


def disk_bytes_needed(out: OutFile, boxes, itemsize: int) -> int:
    """Room a file needs for `boxes`' bytes: a cut-out its size; a frame its regions' bytes plus
    a page at each end of every row (a partly written page allocates whole), at most the file."""
    if not out.mirror:
        return out.size_bytes
    from ingest.core.regions import union_bytes

    rows = sum(_rows(box) for box in boxes)
    return min(out.size_bytes, out.metadata_bytes + union_bytes(boxes, itemsize) + 2 * PAGE_BYTES * rows)


def _rows(box) -> int:
    n = 1
    for a, b in box[:-1]:
        n *= b - a
    return n
