"""FITS geometry from the header alone: header bytes -> where the data is and what it means.

Pure functions, no I/O. `ingest.formats.reader.read_layout` feeds them header blocks fetched by Range
requests. Everything here is in numpy axis order (slowest axis first), the reverse of FITS's
NAXIS1..NAXISn.

astropy is imported by `parse_header` alone, when it is called: rank 0 parses the header and
broadcasts the FitsLayout, and a rank that unpickles one imports this module, so this module must
not import astropy when it is loaded (a thousand ranks would each pay for it; tests/test_startup.py).
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ingest.core.layout import ContiguousGeometry
from ingest.errors import FitsFormatError
from ingest.formats.beams import BeamTable

if TYPE_CHECKING:  # annotations only: see the module's docstring
    from astropy.io import fits

BLOCK_BYTES = 2880  # FITS records are 36 cards x 80 characters
CARD_BYTES = 80

# FITS stores big-endian; BITPIX 8 is unsigned.
BITPIX_DTYPES = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}

# Spectral CTYPEs by their first four characters: FITS WCS Paper III's, AIPS's FELO-xxx and VELO-xxx.
SPECTRAL_CTYPES = ("FREQ", "ENER", "WAVN", "VRAD", "WAVE", "VOPT", "ZOPT", "AWAV", "VELO", "BETA", "FELO")


@dataclass(frozen=True)
class FitsLayout(ContiguousGeometry):
    """Where an image HDU's data lies in its object and how astropy would interpret it."""

    source: str  # object name for messages (presigned query string already redacted)
    hdu: int  # HDU index, 0 = primary
    shape: tuple[int, ...]  # numpy axis order
    bitpix: int
    header_offset: int  # byte offset of the HDU's header in the object
    data_offset: int  # byte offset of the first data byte
    object_bytes: int  # size of the whole object
    bscale: float = 1.0
    bzero: float = 0.0
    blank: int | None = None  # integer BLANK, only meaningful for BITPIX > 0
    kind = "fits"  # class attributes, not fields: what HDF5's layout says differently
    storage = "contiguous"
    chunks = None
    dataset = None
    header_text: str = ""  # the HDU's header cards, for writing WCS-shifted outputs
    beams: BeamTable | None = None  # the per-channel BEAMS table (CASAMBM = T), if the cube has one

    @property
    def raw_dtype(self) -> np.dtype:
        """The stored (big-endian) dtype of one voxel."""
        return np.dtype(BITPIX_DTYPES[self.bitpix])

    @property
    def itemsize(self) -> int:
        return abs(self.bitpix) // 8

    @property
    def scaled(self) -> bool:
        """True when astropy would return converted values rather than the raw ones."""
        return self.bscale != 1 or self.bzero != 0 or (self.blank is not None and self.bitpix > 0)

    @property
    def out_dtype(self) -> np.dtype:
        """The dtype astropy's `section` returns for this HDU (its pseudo-unsigned rules)."""
        if not self.scaled:
            return self.raw_dtype
        if self.bscale == 1:
            if self.bitpix == 8 and self.bzero == -128:
                return np.dtype("int8")
            for bits, name in ((16, "uint16"), (32, "uint32"), (64, "uint64")):
                if self.bitpix == bits and self.bzero == 1 << (bits - 1):
                    return np.dtype(name)
        if self.bitpix > 16:
            return np.dtype("float64")
        if self.bitpix > 0:
            return np.dtype("float32")
        return self.raw_dtype  # floats are scaled in place, keeping their stored byte order

    @property
    def spectral_axis(self) -> int | None:
        """The numpy axis whose CTYPE is spectral (FREQ, VRAD, VOPT, VELO-xxx, WAVE, ...), or None."""
        return axis_roles(self.header_text, len(self.shape))[0]

    @property
    def stokes_axis(self) -> int | None:
        """The numpy axis whose CTYPE is STOKES (the BEAMS table's POL runs along it), or None."""
        return axis_roles(self.header_text, len(self.shape))[1]

    def box_beams(self, box) -> BeamTable | None:
        """The BEAMS table cut to `box` (numpy-order half-open pairs): its channels along the
        spectral axis and its polarisations along the Stokes axis (every one when the cube has no
        Stokes axis). None when the cube has no table."""
        if self.beams is None:
            return None
        return self.beams.cut(*self.beam_range(box))

    def beam_range(self, box) -> tuple[int, int, int, int]:
        """(chan_start, chan_stop, pol_start, pol_stop) of the BEAMS rows `box` keeps (the arguments
        of BeamTable.cut; see box_beams). The cube must have a table."""
        spectral, stokes = axis_roles(self.header_text, len(self.shape))
        if spectral is None:
            if self.beams.nchan != 1:
                raise FitsFormatError(f"{self.source} HDU {self.hdu}: a BEAMS table of {self.beams.nchan} channels "
                                      f"but no spectral axis among the CTYPEs; cannot tell which channels a box keeps")
            chans = (0, 1)
        else:
            chans = box[spectral]
        pols = box[stokes] if stokes is not None else (0, self.beams.npol)
        return int(chans[0]), int(chans[1]), int(pols[0]), int(pols[1])


# A reference-pixel keyword a box moves: CRPIXn, its alternates CRPIXna, IRAF's LTVn.
_SHIFTED_KEY = re.compile(r"CRPIX(\d+)[A-Z]?|LTV(\d+)")
# A keyword that lets a reader compute world coordinates: a header (or HDF5 attributes) with none
# has no WCS, and a box's writer invents no CRPIXn for it.
_WCS_KEY = re.compile(r"(CTYPE|CRVAL|CDELT|CUNIT|CD\d+_\d+|PC\d+_\d+)\d*[A-Z]?")


def shifted_axis(key: str, ndim: int) -> int | None:
    """The FITS axis n (1..ndim) whose box start moves `key` (CRPIXn, CRPIXna, LTVn); None for any
    other keyword, and for one of an axis the image does not have: a WCS may describe more axes
    than NAXIS (a degenerate Stokes axis), and no box moves those."""
    match = _SHIFTED_KEY.fullmatch(key)
    n = int(match.group(1) or match.group(2)) if match else 0
    return n if 1 <= n <= ndim else None


def has_wcs_keys(keys) -> bool:
    """Whether any of `keys` (header keywords, HDF5 attribute names) is a WCS keyword."""
    return any(_WCS_KEY.fullmatch(key) for key in keys)


def axis_roles(header_text: str, ndim: int) -> tuple[int | None, int | None]:
    """(spectral, Stokes) numpy axes of an HDU from its CTYPEn cards (FITS axis n is numpy axis
    ndim - n); None for an axis the header does not have. The first spectral axis counts."""
    spectral = stokes = None
    for pos in range(0, len(header_text), CARD_BYTES):
        card = header_text[pos : pos + CARD_BYTES]
        match = _CTYPE_CARD.match(card)
        if match is None or not 1 <= int(match.group(1)) <= ndim:
            continue
        ctype = match.group(2).strip().upper()
        axis = ndim - int(match.group(1))
        if ctype == "STOKES":
            stokes = axis if stokes is None else stokes
        elif ctype[:4] in SPECTRAL_CTYPES:
            spectral = axis if spectral is None else spectral
    return spectral, stokes


def says_beams(header: fits.Header) -> bool:
    """CASAMBM = T: the HDU's beam varies per channel and a BEAMS table follows the image."""
    return header.get("CASAMBM", False) is True


def with_beams(layout: FitsLayout, table: BeamTable) -> FitsLayout:
    """`layout` carrying its BEAMS `table`, once the table fits the cube: NCHAN is the spectral
    axis's length and NPOL the Stokes axis's (1 without one). A FitsFormatError otherwise."""
    from dataclasses import replace

    where = f"{layout.source}: BEAMS table of HDU {layout.hdu}"
    spectral, stokes = axis_roles(layout.header_text, len(layout.shape))
    want_chan = layout.shape[spectral] if spectral is not None else 1
    want_pol = layout.shape[stokes] if stokes is not None else 1
    if table.nchan != want_chan:
        axis = f"spectral axis (numpy axis {spectral})" if spectral is not None else "cube (no spectral axis)"
        raise FitsFormatError(f"{where} has NCHAN = {table.nchan} but the {axis} has {want_chan} channel(s)")
    if table.npol != want_pol:
        axis = f"Stokes axis (numpy axis {stokes})" if stokes is not None else "cube (no STOKES axis)"
        raise FitsFormatError(f"{where} has NPOL = {table.npol} but the {axis} has {want_pol} polarisation(s)")
    return replace(layout, beams=table)


# CTYPEn = 'VALUE' (primary WCS only: an alternate's CTYPEnA names the same axes).
_CTYPE_CARD = re.compile(r"CTYPE(\d)\s*=\s*'([^']*)'")


def header_end(block: bytes) -> int | None:
    """Offset just past the END card within `block` (a whole number of blocks), or None."""
    for pos in range(0, len(block), CARD_BYTES):
        if block[pos : pos + 8] == b"END     ":
            return pos + CARD_BYTES
    return None


def check_first_block(block: bytes, source: str, hdu: int, header_offset: int) -> None:
    """Refuse early what is not a FITS header, so we never read on through a random object."""
    if len(block) < BLOCK_BYTES:
        raise FitsFormatError(
            f"{source}: object ends inside the header of HDU {hdu} "
            f"(only {len(block)} bytes at offset {header_offset}); truncated or not FITS"
        )
    key = block[:8]
    expected = b"SIMPLE  " if hdu == 0 else b"XTENSION"
    if header_offset == 0 and key != b"SIMPLE  ":
        raise FitsFormatError(f"{source}: not a FITS file (first card is {key!r}, expected 'SIMPLE')")
    if key != expected:
        raise FitsFormatError(f"{source}: no FITS header at offset {header_offset} for HDU {hdu} (found {key!r})")
    try:
        block[:BLOCK_BYTES].decode("ascii")
    except UnicodeDecodeError:
        raise FitsFormatError(f"{source}: header of HDU {hdu} is not ASCII text; not FITS") from None


def parse_header(header_bytes: bytes, source: str, hdu: int) -> fits.Header:
    """Parse header cards with astropy, turning its complaints into one clear error."""
    from astropy.io import fits

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # astropy's fix-up warnings are noise here
            return fits.Header.fromstring(header_bytes.decode("ascii"))
    except Exception as exc:  # astropy raises a zoo of types for bad cards
        raise FitsFormatError(f"{source}: cannot parse header of HDU {hdu}: {exc}") from None


def hdu_data_span(header: fits.Header) -> int:
    """Bytes the HDU's data occupies in the object, padded to whole blocks (FITS 4.4.1.1)."""
    naxis = int(header.get("NAXIS", 0))
    if naxis == 0:
        return 0
    bitpix = int(header["BITPIX"])
    gcount = int(header.get("GCOUNT", 1))
    pcount = int(header.get("PCOUNT", 0))
    dims = [int(header[f"NAXIS{i}"]) for i in range(1, naxis + 1)]
    if header.get("GROUPS", False) and dims[0] == 0:
        dims = dims[1:]  # random groups: NAXIS1 = 0 is a placeholder
    nbytes = abs(bitpix) // 8 * gcount * (pcount + math.prod(dims))
    return -(-nbytes // BLOCK_BYTES) * BLOCK_BYTES


def image_layout(
    header: fits.Header,
    *,
    source: str,
    hdu: int,
    header_offset: int,
    data_offset: int,
    object_bytes: int,
    header_text: str = "",
) -> FitsLayout:
    """Validate that `header` describes a plain image HDU and build its Layout."""
    where = f"{source} HDU {hdu}"
    if "XTENSION" in header:
        xtension = str(header["XTENSION"]).strip().upper()
        if header.get("ZIMAGE", False):
            raise FitsFormatError(f"{where} is a tile-compressed image (ZIMAGE); only uncompressed images can be read by range")
        if xtension != "IMAGE":
            raise FitsFormatError(f"{where} is a {xtension} extension, not an image; choose an IMAGE HDU")
    if header.get("GROUPS", False):
        raise FitsFormatError(f"{where} holds random groups, not an image")
    bitpix = int(header.get("BITPIX", 0))
    if bitpix not in BITPIX_DTYPES:
        raise FitsFormatError(f"{where}: BITPIX {bitpix} is not one of {sorted(BITPIX_DTYPES)}")
    naxis = int(header.get("NAXIS", 0))
    if naxis == 0:
        hint = " (the data is probably in an extension: try hdu=1)" if hdu == 0 else ""
        raise FitsFormatError(f"{where} has no data (NAXIS = 0){hint}")
    if naxis > 4:
        raise FitsFormatError(f"{where}: NAXIS = {naxis}; ingest reads cubes of 1 to 4 axes")
    fits_dims = [int(header[f"NAXIS{i}"]) for i in range(1, naxis + 1)]
    if any(n <= 0 for n in fits_dims):
        raise FitsFormatError(f"{where} has an empty axis (NAXISn = {fits_dims})")
    blank = header.get("BLANK") if bitpix > 0 else None
    layout = FitsLayout(
        source=source,
        hdu=hdu,
        shape=tuple(reversed(fits_dims)),
        bitpix=bitpix,
        header_offset=header_offset,
        data_offset=data_offset,
        object_bytes=object_bytes,
        bscale=float(header.get("BSCALE", 1.0)),
        bzero=float(header.get("BZERO", 0.0)),
        blank=None if blank is None else int(blank),
        header_text=header_text,
    )
    if layout.bscale == 0:
        raise FitsFormatError(f"{where}: BSCALE = 0 would map every value to BZERO")
    end = data_offset + layout.data_bytes
    if end > object_bytes:
        raise FitsFormatError(
            f"{where}: header says the data ends at byte {end} but the object is only "
            f"{object_bytes} bytes; the object is truncated"
        )
    return layout
