"""Synthetic HDF5 cubes with the same computable voxels as the FITS ones (`synth.voxel_values`).

`write_hdf5_cube` streams the values in slabs of whole chunks along the slowest axis, so a cube
larger than memory can be made, and writes the file atomically. Options cover what the reader
must handle: chunk shapes that do or do not divide the shape, gzip / zstd / no compression,
shuffle, byte order, and the CARTA/IDIA layout (`/0/DATA`, Stokes first, FITS header keys as
attributes).
"""
from __future__ import annotations

import math
import os

import numpy as np

from ingest.errors import ConfigError
from ingest.atomic import publish, remove_quietly
from ingest.testbed.synth import build_header, voxel_values

COMPRESSIONS = ("none", "gzip", "zstd")
DEFAULT_DATASET = "/cube"
IDIA_DATASET = "/0/DATA"
_SLAB_BYTES = 64 << 20  # values computed and written this many bytes at a time


def _filters(compression: str, shuffle: bool) -> dict:
    """h5py create_dataset keywords for the compression wanted."""
    if compression not in COMPRESSIONS:
        raise ConfigError(f"compression: {compression!r} is not one of {', '.join(COMPRESSIONS)}")
    kw = {"shuffle": bool(shuffle)}
    if compression == "gzip":
        kw.update(compression="gzip", compression_opts=4)
    elif compression == "zstd":
        try:
            import hdf5plugin
        except ImportError:
            raise ConfigError("compression: zstd needs the hdf5plugin package (pip install hdf5plugin)") from None
        kw.update(hdf5plugin.Zstd(clevel=3))
    return kw


def write_hdf5_cube(path, shape, bitpix: int = -32, *, chunks=None, compression: str = "none",
                    shuffle: bool = False, byteorder: str = ">", idia: bool = False,
                    dataset: str | None = None) -> dict:
    """Write a synthetic cube of numpy-order `shape` as an HDF5 dataset; returns what was written.

    chunks: numpy-order chunk shape (None: contiguous); idia: the CARTA/IDIA schema, a 4-D
    (1, z, y, x) dataset at /0/DATA with the FITS header's keys as attributes.
    """
    import h5py

    shape = tuple(int(n) for n in shape)
    if idia:
        shape = (1,) + shape[-3:] if len(shape) == 3 else shape
        chunks = chunks or (1, 1) + tuple(min(512, n) for n in shape[-2:])
    if chunks is not None:
        chunks = tuple(int(c) for c in chunks)
        if len(chunks) != len(shape) or any(c < 1 for c in chunks):
            raise ConfigError(f"chunks: {chunks} does not fit shape {shape} (one positive size per axis)")
        chunks = tuple(min(c, n) for c, n in zip(chunks, shape))
    elif compression != "none" or shuffle:
        raise ConfigError("compression: filters need a chunked dataset; give --chunks")
    native = voxel_values(np.arange(1), bitpix).dtype
    dtype = native.newbyteorder(byteorder) if native.itemsize > 1 else native
    name = dataset or (IDIA_DATASET if idia else DEFAULT_DATASET)
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            dset = f.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks,
                                    **(_filters(compression, shuffle) if chunks else {}))
            if idia:
                for key, value in build_header(shape[::-1][:3][::-1], bitpix).items():
                    if key not in ("SIMPLE", "EXTEND", "") and not key.startswith("NAXIS"):
                        dset.attrs[key] = value
            _fill(dset, shape, bitpix, chunks)
        publish(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return {"path": path, "dataset": name, "shape": shape, "dtype": dtype.str, "chunks": chunks}


def _fill(dset, shape, bitpix: int, chunks) -> None:
    """Write the values slab by slab along axis 0, each slab a whole number of chunk rows."""
    plane = math.prod(shape[1:])
    step = max(1, _SLAB_BYTES // max(1, plane * dset.dtype.itemsize))
    if chunks:
        step = max(chunks[0], step - step % chunks[0])
    for start in range(0, shape[0], step):
        stop = min(shape[0], start + step)
        values = voxel_values(np.arange(start * plane, stop * plane, dtype=np.uint64), bitpix)
        dset[start:stop] = values.reshape((stop - start,) + shape[1:])


def parse_chunks(text: str) -> tuple[int, ...]:
    """'16x64x64' (numpy order, slowest first: z x y x x) -> (16, 64, 64)."""
    try:
        chunks = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        chunks = ()
    if not chunks or any(c < 1 for c in chunks):
        raise ConfigError(f"chunks: expected sizes like 16x64x64 (numpy order: z, y, x), got {text!r}")
    return chunks
