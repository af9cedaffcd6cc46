"""Layout (pure): what the planner needs to know about where a cube's data lies in its object.

FITS headers (formats/fits.py) and HDF5 metadata (formats/hdf5.py) both end in a layout; the
planners, the tuner and the engine take either through this protocol and never ask which
format made it, except through `kind` and `storage` where the bytes differ in kind.
"""
from __future__ import annotations

import math
from typing import Protocol

import numpy as np


class Layout(Protocol):
    """A cube's geometry in its object. Shapes and strides are in numpy axis order."""

    source: str  # object name for messages (a presigned query already redacted)
    shape: tuple[int, ...]
    object_bytes: int  # size of the whole object
    kind: str  # "fits" | "hdf5" | "tiles"
    storage: str  # "contiguous" | "chunked" | "compact"
    header_text: str  # FITS: the HDU's header cards; HDF5: ""
    scaled: bool  # True when values are converted on the way out (FITS BSCALE/BZERO/BLANK)
    dataset: str | None  # HDF5: the dataset's path; FITS: None
    chunks: object | None  # HDF5 chunked: the chunk index (core.chunks.ChunkIndex); else None

    @property
    def data_offset(self) -> int | None: ...  # byte offset of the first data byte (None: never written)

    @property
    def itemsize(self) -> int: ...

    @property
    def raw_dtype(self) -> np.dtype: ...  # as stored

    @property
    def out_dtype(self) -> np.dtype: ...  # as a read returns it

    @property
    def data_bytes(self) -> int: ...

    @property
    def strides_bytes(self) -> tuple[int, ...]: ...


class ContiguousGeometry:
    """`data_bytes` and C-order `strides_bytes` from `shape` and `itemsize`: the arithmetic a FITS
    image and a contiguous HDF5 dataset share (a mixin for their layout classes)."""

    shape: tuple[int, ...]
    itemsize: int

    @property
    def data_bytes(self) -> int:
        """Bytes of data (a FITS image without the padding to a whole block)."""
        return self.itemsize * math.prod(self.shape)

    @property
    def strides_bytes(self) -> tuple[int, ...]:
        """Byte stride of each numpy axis in the object (C order)."""
        strides, step = [], self.itemsize
        for n in reversed(self.shape):
            strides.append(step)
            step *= n
        return tuple(reversed(strides))
