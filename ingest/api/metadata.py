"""What a RemoteCube is, from its layout alone (nothing read): shape, dtype and size as numpy
has them, the FITS header or HDF5 attributes, and the WCS.

A mixin so `RemoteCube` keeps to opening and reading; it uses the cube's `_layout`, `_spec` and
`_closed` and keeps no state of its own.
"""
from __future__ import annotations

import math

import numpy as np

from ingest.config import shown_source


class CubeMetadata:
    """RemoteCube's description: numpy's attributes, the header, attributes and WCS."""

    @property
    def source(self) -> str:
        """The source as it may be shown (a presigned URL's query removed)."""
        return shown_source(self._spec.cfg.source)

    @property
    def layout(self):
        """Where the data lies in the object (ingest.formats: FITS Layout or H5Layout)."""
        return self._layout

    @property
    def shape(self) -> tuple[int, ...]:
        """Numpy axis order (FITS: NAXISn reversed; HDF5: the dataset's)."""
        return self._layout.shape

    @property
    def dtype(self) -> np.dtype:
        """What reads return: astropy's (scaled) dtype for FITS, the stored one for HDF5; big-endian
        as stored unless the cube was opened with native_byteorder=True."""
        dtype = self._layout.out_dtype
        return dtype.newbyteorder("=") if self._spec.cfg.native_byteorder else dtype

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of voxels."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole cube as read (dtype.itemsize x size)."""
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """HDF5 chunked: the storage chunk shape (as h5py's Dataset.chunks; dask's auto chunks
        follow it); None for FITS and contiguous data."""
        index = self._layout.chunks
        return tuple(index.chunk_shape) if index is not None else None

    def __len__(self) -> int:
        """Length of the first (slowest, numpy order) axis."""
        return self.shape[0]

    @property
    def header(self):
        """FITS: the HDU's header (astropy.io.fits.Header). HDF5: None (see attrs)."""
        if self._layout.kind != "fits":
            return None
        from astropy.io import fits

        return fits.Header.fromstring(self._layout.header_text)

    @property
    def attrs(self) -> dict:
        """HDF5: the dataset's attributes. FITS: the header's keywords and values (no COMMENT/HISTORY)."""
        if self._layout.kind != "fits":
            return dict(self._layout.attrs)
        return {k: v for k, v in self.header.items() if k not in ("COMMENT", "HISTORY", "")}

    @property
    def wcs(self):
        """astropy.wcs.WCS of every axis the header describes, FITS axis order: a Stokes axis too
        (a FITS cube's `wcs.naxis == cube.ndim`), and a cut-out's WCS is this one shifted to its
        box; `wcs.celestial` and `wcs.spectral` give the sky and spectral parts. From the FITS
        header, or HDF5 attributes carrying CTYPEn as the CARTA/IDIA schema's; else None."""
        from ingest.api.labels import cube_wcs

        return cube_wcs(self, celestial_spectral=False)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        where = f" hdu {self._spec.cfg.hdu}" if self._layout.kind == "fits" else f" {self._layout.dataset}"
        return f"<ingest.RemoteCube {self.source}{where} shape={self.shape} dtype={self.dtype.str} {state}>"
