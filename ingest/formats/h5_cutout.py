"""One region of an HDF5 cube as its own .h5 file: every writer's and `cube.cutout(...).writeto`'s.

One code path for every HDF5 region file `ingest` makes: `run --output-dir`'s subcubes and
`cutouts`' files (ingest.outputs.subcubes), the pre-stage's region files and a publish's object
(ingest.outputs.prestage_files, publish_image: the file's metadata here, the data written in place),
and the Python API's `cube.cutout(...).writeto(path)`, so a region gives the same bytes whichever
way it is cut. It sits in the formats layer so the API can write what the command line writes.

The file: the dataset at the source's path, the region's shape, the stored dtype and byte order,
contiguous, its attributes the source's with the region's start recorded and every CRPIXn moved
by it (`region_attrs`), and no modification times, so the same region is the same bytes whenever
and on however many ranks it is written. It is made in two steps so that a rank's data never has
to sit in memory: h5py writes the file's metadata once (the dataset allocated early, fill never
written, so the data is one run at a known offset), and everything except the data run becomes
the file's metadata `pieces` (`subcube_image`). The pre-stage writes the pieces, then the ranks
write their bytes at `data_offset` straight from the wire; `write_h5_subcube` writes the same
bytes from memory. The two paths make identical files.
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass

import numpy as np

from ingest.atomic import publish, remove_quietly
from ingest.errors import IngestError
from ingest.formats.fits import has_wcs_keys, shifted_axis

_WRITE_BYTES = 64 << 20


@dataclass(frozen=True)
class H5Image:
    """An HDF5 file without its data: bytes at offsets, where the data run goes, the file's length."""

    pieces: tuple  # ((offset, bytes), ...)
    data_offset: int
    size_bytes: int


def region_attrs(layout, box, source_label: str) -> dict:
    """The source dataset's attributes with the region's position recorded, and each FITS-style
    CRPIXn and alternate CRPIXna (FITS axis n = numpy axis ndim - n) and IRAF LTVn moved by the
    region's start, as the FITS cut-outs do; read back into a FITS header, the attributes give the
    region's pixels the world coordinates they have in the cube. When the attributes carry a WCS
    but no CRPIXn for a shifted axis, CRPIXn = -start is written (the WCS default is 0)."""
    ndim = len(layout.shape)
    attrs = dict(layout.attrs)
    for key, value in layout.attrs.items():
        n = shifted_axis(key, ndim)
        if n is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[key] = float(value) - box[ndim - n][0]
    if has_wcs_keys(layout.attrs):
        for n in range(1, ndim + 1):
            start = box[ndim - n][0]
            if start and f"CRPIX{n}" not in layout.attrs:
                attrs[f"CRPIX{n}"] = 0.0 - start
    attrs.update(ingest_region_start=np.array([a for a, _ in box], np.int64),
                 ingest_source_shape=np.array(layout.shape, np.int64), ingest_source=source_label,
                 ingest_source_dataset=layout.dataset)
    return attrs


def set_attrs(dset, attrs: dict) -> None:
    """Set each of `attrs` on `dset`; a value h5py cannot store as it is is stored as its text."""
    for key, value in attrs.items():
        try:
            dset.attrs[key] = value
        except (TypeError, ValueError):  # a value read back as a repr or an odd list: kept as text
            dset.attrs[key] = str(value)


def subcube_image(layout, box, *, source_label: str, attrs: dict | None = None,
                  align_bytes: int | None = None) -> H5Image:
    """The file for one region of `layout` (an H5Layout): the dataset at the source's path, the
    region's shape, the stored dtype and byte order, contiguous, with region_attrs (or `attrs`);
    with `align_bytes`, the data starts at a multiple of it."""
    import h5py

    shape = tuple(int(b) - int(a) for a, b in box)
    nbytes = layout.dtype.itemsize * math.prod(shape)
    with tempfile.TemporaryDirectory(prefix="ingest-h5-") as scratch:
        path = os.path.join(scratch, "region.h5")
        # A real (sparse) file, not h5py's core driver: early allocation would put the whole
        # region in memory there.
        # Only objects as large as the data are aligned: the metadata stays packed.
        aligned = {"alignment_threshold": max(1, nbytes), "alignment_interval": align_bytes} if align_bytes else {}
        with h5py.File(path, "w", libver=("earliest", "v110"), **aligned) as f:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.CONTIGUOUS)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)  # the offset is known before any data
            dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)  # and no fill pass writes over it
            # No times in the object headers: the same region makes the same bytes whenever, and
            # on however many ranks, it is written (HDF5 records a modification time otherwise).
            dcpl.set_obj_track_times(False)
            parent = f.id
            *groups, name = [part for part in layout.dataset.split("/") if part]
            for group in groups:
                gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                gcpl.set_obj_track_times(False)
                parent = h5py.h5g.create(parent, group.encode(), gcpl=gcpl)  # a fresh file: none exists
            dsid = h5py.h5d.create(parent, name.encode(), h5py.h5t.py_create(layout.dtype, logical=True),
                                   h5py.h5s.create_simple(shape), dcpl=dcpl)
            set_attrs(h5py.Dataset(dsid), region_attrs(layout, box, source_label) if attrs is None else attrs)
            data_offset = dsid.get_offset()
        size_bytes = os.path.getsize(path)
        if data_offset is None or data_offset + nbytes > size_bytes:
            raise IngestError(f"{source_label} {layout.dataset}: HDF5 did not allocate the region's data "
                              f"({nbytes} bytes) inside its file; cannot write it in place")
        with open(path, "rb") as fh:
            head = fh.read(data_offset)
            fh.seek(data_offset + nbytes)
            tail = fh.read()
    pieces = ((0, head),) + (((data_offset + nbytes, tail),) if tail else ())
    return H5Image(pieces, int(data_offset), size_bytes)


def write_h5_subcube(path, layout, box, raw: np.ndarray, *, source_label: str, extra_attrs: dict | None = None) -> str:
    """`run --output-dir`: write one region (raw stored values, box-shaped) as an .h5 file,
    atomically (temporary name, fsync, rename): the file subcube_image describes, data filled in;
    `extra_attrs` (e.g. OBJECT, a cut-out's source name) are added to region_attrs."""
    extents = tuple(int(b) - int(a) for a, b in box)
    if raw.shape != extents:
        raise IngestError(f"{path}: data shape {raw.shape} does not match the region's {extents}")
    data = np.ascontiguousarray(raw, dtype=layout.dtype)  # the stored byte order, as h5py would write it
    attrs = {**region_attrs(layout, box, source_label), **(extra_attrs or {})}
    image = subcube_image(layout, box, source_label=source_label, attrs=attrs)
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        try:
            os.ftruncate(fd, image.size_bytes)
            for offset, piece in image.pieces:
                os.pwrite(fd, piece, offset)
            flat = data.reshape(-1).view(np.uint8)  # a view: the region is not copied
            for start in range(0, flat.size, _WRITE_BYTES):
                os.pwrite(fd, flat[start:start + _WRITE_BYTES], image.data_offset + start)
        finally:
            os.close(fd)
        publish(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return path
