"""The files a pre-stage writes, by layout, and how each becomes complete (pure naming + small file ops).

- `frame`: one file per cube, DIR/<source file name>: the source's header bytes verbatim, then the
  full data size as a sparse file; every rank writes its regions' bytes at the offsets they have
  in the object, so the pipeline sees the staged cube and the holes cost no disk.
- `frame-per-rank`: the same, one file per cube and rank, DIR/rankNNNN/<name>, for filesystems
  where ranks on different nodes must not write one file (NFS writes back whole pages).
- `subcubes`: one cut-out FITS per cube and region, DIR/<stem>_region<NNN>.fits (WCS shifted).

A file lives under a hidden temporary name (`.<name>.part`, fixed so a re-run finds it) until
every region written into it is done; then it is renamed into place (complete or absent).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ingest.errors import ConfigError
from ingest.formats.fits import BLOCK_BYTES, Layout
from ingest.io.stage import staged_path
from ingest.outputs.atomic import publish
from ingest.outputs.subcubes import subcube_header

PAGE_BYTES = 4096  # a partly written page of a sparse file still allocates the whole page


@dataclass(frozen=True)
class OutFile:
    """One output file: where it goes, what header it starts with, how long it is."""

    path: str  # final path
    header: bytes
    size_bytes: int
    mirror: bool  # True: bytes at their object offsets (frame); False: a compact cut-out

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


def frame_header(layout: Layout) -> bytes:
    """The header bytes a frame file starts with: exactly the source's, or a clear refusal."""
    if layout.hdu != 0:
        raise ConfigError(f"layout: frame copies the source's header verbatim, but the cube is HDU {layout.hdu} "
                          f"of {layout.source}; SoFiA-2 reads the primary HDU, so that header cannot lead a "
                          f"file unchanged. Use --layout subcubes")
    header = layout.header_text.encode("ascii")
    if len(header) != layout.data_offset or len(header) % BLOCK_BYTES:
        raise ConfigError(f"layout: the header of {layout.source} ({len(header)} bytes) does not end where its data "
                          f"starts (byte {layout.data_offset}); it cannot be copied verbatim. Use --layout subcubes")
    return header


def _padded(nbytes: int) -> int:
    return nbytes + (-nbytes % BLOCK_BYTES)


def plan_files(kind: str, out_dir: str, name: str, layout: Layout, regions, assignment) -> list[dict]:
    """For one cube (`name`: "data" or a companion's): per region, the OutFile it writes into."""
    base_name = os.path.basename(staged_path(out_dir, layout.source))
    if kind == "subcubes":
        stem = base_name[:-5] if base_name.lower().endswith(".fits") else base_name
        files = []
        for index, box in enumerate(regions):
            header = subcube_header(layout, box).tostring().encode("ascii")
            nbytes = layout.itemsize
            for a, b in box:
                nbytes *= b - a
            files.append(OutFile(os.path.join(out_dir, f"{stem}_region{index + 1:03d}.fits"), header,
                                 len(header) + _padded(nbytes), False))
        return files
    header = frame_header(layout)
    size_bytes = _padded(layout.data_offset + layout.data_bytes)
    if kind == "frame":
        shared = OutFile(os.path.join(out_dir, base_name), header, size_bytes, True)
        return [shared] * len(regions)
    rank_of = {index: rank for rank, mine in enumerate(assignment) for index in mine}
    return [OutFile(os.path.join(out_dir, f"rank{rank_of[i]:04d}", base_name), header, size_bytes, True)
            for i in range(len(regions))]


def create(out: OutFile) -> None:
    """Make the temporary file (header written, full size, sparse) unless it is already there."""
    os.makedirs(os.path.dirname(out.path) or ".", exist_ok=True)
    if os.path.exists(out.path):  # a published file a re-run must change: back to its temporary name
        os.replace(out.path, out.tmp_path)
    fd = os.open(out.tmp_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != out.size_bytes:
            os.ftruncate(fd, out.size_bytes)
        os.pwrite(fd, out.header, 0)
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
    return min(out.size_bytes, len(out.header) + union_bytes(boxes, itemsize) + 2 * PAGE_BYTES * rows)


def _rows(box) -> int:
    n = 1
    for a, b in box[:-1]:
        n *= b - a
    return n
