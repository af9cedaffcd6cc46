"""The object a publish writes, as an `ObjectImage`: its metadata bytes and where its data goes.

FITS: the header the caller gave or the source cube's, made a primary header (an extension's
XTENSION becomes SIMPLE) with NAXISn and BITPIX from the regions; CHECKSUM/DATASUM go (they
describe other bytes), and when the regions' type differs from the header's BITPIX (a SoFiA-2
mask is int32, its cube float32) BSCALE, BZERO, BLANK, DATAMIN and DATAMAX go too, since they
described the old values. The data follows the header, big-endian, padded with zeros to a
2880-byte block. A per-channel beam table goes with it: when the header's cube has a BEAMS
extension (CASAMBM = T, ingest.formats.beams) the table follows the data whole (the object is the
whole cube, so every channel's row holds), and CASAMBM = T stays; a header that says CASAMBM = T
without a table at hand (a Header or card text from a caller) loses the card, so the object
never promises a table it lacks. HDF5: the source dataset's path and attributes, contiguous, in a file h5py
lays out once (ingest.formats.h5_cutout), so the data is one run at a known offset.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
from astropy.io import fits

from ingest.core.byteruns import ObjectImage
from ingest.errors import ConfigError
from ingest.formats.fits import BLOCK_BYTES, BITPIX_DTYPES
from ingest.outputs.subcubes import as_primary

_DTYPE_BITPIX = {np.dtype(v).newbyteorder("=").str[1:]: k for k, v in BITPIX_DTYPES.items()}  # 'f4' -> -32
_OLD_VALUES = ("BSCALE", "BZERO", "BLANK", "DATAMIN", "DATAMAX")


def fits_bitpix(dtype: np.dtype) -> int:
    """BITPIX for a stored dtype (either byte order); other types are refused, naming them."""
    key = np.dtype(dtype).newbyteorder("=").str[1:]
    if key not in _DTYPE_BITPIX:
        raise ConfigError(f"regions: dtype {np.dtype(dtype)} has no FITS BITPIX (FITS stores uint8, int16, int32, "
                          f"int64, float32, float64; give unsigned data as signed values with BZERO)")
    return _DTYPE_BITPIX[key]


def fits_header(header, shape: tuple[int, ...], dtype: np.dtype) -> fits.Header:
    """The object's primary header: `header` (astropy Header or card text) for `shape` (numpy
    order) and `dtype`; a header whose axes disagree with the regions is refused."""
    if isinstance(header, str):
        header = fits.Header.fromstring(header)
    elif not isinstance(header, fits.Header):
        raise ConfigError(f"header: expected an astropy Header or FITS card text, got {type(header).__name__}")
    header = as_primary(header.copy(), len(shape))
    naxes = tuple(int(header.get(f"NAXIS{n}", -1)) for n in range(len(shape), 0, -1))
    if header.get("NAXIS") != len(shape) or naxes != tuple(shape):
        given = tuple(int(header.get(f"NAXIS{n}", -1)) for n in range(int(header.get("NAXIS", 0)), 0, -1))
        raise ConfigError(f"header: describes a cube of shape {given} (numpy order) but the regions make "
                          f"{tuple(shape)}; give the header of the cube the regions were cut from")
    bitpix = fits_bitpix(dtype)
    if header.get("BITPIX") != bitpix:
        for key in _OLD_VALUES:
            header.remove(key, ignore_missing=True, remove_all=True)
        header["BITPIX"] = bitpix
    return header


def _mark_beams(header: fits.Header, beams, ndim: int) -> None:
    """CASAMBM = T (and EXTEND = T) exactly when a BEAMS table follows the data."""
    if beams is None:
        header.remove("CASAMBM", ignore_missing=True, remove_all=True)
        return
    if "EXTEND" in header:
        header["EXTEND"] = True
    else:
        header.insert(f"NAXIS{ndim}", ("EXTEND", True, "FITS dataset may contain extensions"), after=True)
    header["CASAMBM"] = (True, "a beam per channel: see the BEAMS extension")


def fits_image(header, shape: tuple[int, ...], dtype: np.dtype, beams=None) -> tuple[ObjectImage, str]:
    """(image, header text) of a FITS object holding `shape` of `dtype` after `header`, then
    `beams` (the cube's BeamTable, or None) as a BEAMS extension."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # astropy's VerifyWarning on odd cards of a source header
        cards = fits_header(header, shape, dtype)
        _mark_beams(cards, beams, len(shape))
        head = cards.tostring().encode("ascii")  # whole blocks, END included
    itemsize = np.dtype(dtype).itemsize
    data_bytes = itemsize * math.prod(shape)
    pad = -data_bytes % BLOCK_BYTES
    pieces = ((0, head),) + (((len(head) + data_bytes, b"\0" * pad),) if pad else ())  # padding is zeros (FITS 3.3.2)
    table = beams.to_bytes() if beams is not None else b""  # whole blocks: header and rows
    if table:
        pieces += ((len(head) + data_bytes + pad, table),)
    image = ObjectImage(len(head) + data_bytes + pad + len(table), len(head), tuple(shape), itemsize, pieces)
    image.check()
    return image, head.decode("ascii")


def hdf5_image(layout, shape: tuple[int, ...], dtype: np.dtype) -> ObjectImage:
    """An HDF5 file with one contiguous dataset at `layout`'s path (an H5Layout: the header
    source), `shape` and `dtype` (its byte order kept), and the source dataset's attributes."""
    from ingest.formats.h5_cutout import subcube_image

    if tuple(layout.shape) != tuple(shape):
        raise ConfigError(f"header: {layout.source} dataset {layout.dataset} has shape {tuple(layout.shape)} but the "
                          f"regions make {tuple(shape)} (numpy order)")
    target = replace(layout, dtype=np.dtype(dtype))
    # Data at a 4 KiB boundary: parts (whole MiB) then never cut an item, so every part holds whole
    # values and ranks can convert byte order part by part.
    h5 = subcube_image(target, tuple((0, n) for n in shape), source_label=layout.source, attrs=dict(layout.attrs),
                       align_bytes=4096)
    image = ObjectImage(h5.size_bytes, h5.data_offset, tuple(shape), np.dtype(dtype).itemsize, h5.pieces)
    image.check()
    return image


def object_image(header_layout, header, shape: tuple[int, ...], dtype: np.dtype) -> tuple[ObjectImage, str]:
    """(image, format) for the regions' `shape` and `dtype`: FITS from `header` (a Header or card
    text) or from `header_layout`'s header; HDF5 when `header_layout` is an HDF5 dataset."""
    if header is not None:
        return fits_image(header, shape, dtype)[0], "fits"
    if header_layout is None:
        raise ConfigError("header: none given and none found (a prestage frame or the manifest's source cube); "
                          "give --header-from CUBE (a FITS or HDF5 file or object whose header the output takes)")
    if header_layout.kind == "hdf5":
        return hdf5_image(header_layout, shape, dtype), "hdf5"
    if header_layout.kind != "fits":
        raise ConfigError(f"header: {header_layout.source} is a {header_layout.kind} source, not a FITS or HDF5 cube")
    return fits_image(header_layout.header_text, shape, dtype, getattr(header_layout, "beams", None))[0], "fits"
