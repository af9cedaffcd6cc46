"""Synthetic FITS cubes whose every voxel is known without reading the file.

`voxel_values(flat_index, bitpix)` is the oracle: tests anywhere in the project compute the
raw stored value of any voxel from its flat (C-order, numpy axis order) index. `write_cube`
streams those values to a valid FITS file in bounded batches, so a 10+ GB cube can be made
on a machine with less memory than that, and writes it atomically.

`beams=True` makes a cube like CASA's and ASKAP's whose beam varies per channel: CASAMBM = T in
its header and a BEAMS binary table after the padded data, whose rows are `beam_rows` (known
values, the oracle for cut-out tests). The data bytes and their offsets do not change.
"""
from __future__ import annotations

import math
import os
import secrets
import sys

import numpy as np
from astropy.io import fits

from ingest.atomic import atomic_write
from ingest.errors import ConfigError

MiB = 1024 * 1024
FITS_BLOCK_BYTES = 2880
CARD_BYTES = 80
DEFAULT_BATCH_BYTES = 8 * MiB  # per uint64 working array (1 Mi voxels); ~4 such arrays live at once

# FITS BITPIX -> native numpy dtype of the raw stored value (BITPIX 8 is unsigned by the standard)
BITPIX_DTYPES = {
    8: np.dtype(np.uint8),
    16: np.dtype(np.int16),
    32: np.dtype(np.int32),
    64: np.dtype(np.int64),
    -32: np.dtype(np.float32),
    -64: np.dtype(np.float64),
}

# splitmix64 finaliser constants: a bijective, well-mixed 64-bit hash of the index
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)

# Float significands: 24 bits (float32) / 53 bits (float64) signed integers, scaled by a power
# of two, so every value is exact, finite, and has a fractional part and either sign.
_FLOAT_BITS = {-32: (24, 8), -64: (53, 20)}  # bitpix -> (significand bits, fraction bits)

# FITS axis (1-based) -> (CTYPE, CUNIT, CRVAL, CDELT); RA/DEC near a southern field, 18.5 kHz channels
_CELESTIAL = [("RA---SIN", "deg", 150.0, -1.0 / 3600), ("DEC--SIN", "deg", -30.0, 1.0 / 3600)]
_FREQ = ("FREQ", "Hz", 1.4e9, 18.5e3)
_STOKES = ("STOKES", "", 1.0, 1.0)


def voxel_values(flat_index: np.ndarray, bitpix: int) -> np.ndarray:
    """Raw stored value (native byte order, BITPIX dtype) of each flat C-order voxel index >= 0."""
    dtype = _bitpix_dtype(bitpix)
    index = np.asarray(flat_index)
    flat = np.atleast_1d(index).ravel()
    # splitmix64 of the index, in place with one scratch array: memory is 2 x 8 bytes a voxel
    z = flat.astype(np.uint64)
    scratch = np.empty_like(z)
    z += _GOLDEN
    for shift, mult in ((30, _MIX1), (27, _MIX2), (31, None)):
        np.right_shift(z, np.uint64(shift), out=scratch)
        z ^= scratch
        if mult is not None:
            z *= mult  # wraps modulo 2^64, silently for arrays
    bits = _FLOAT_BITS[bitpix][0] if bitpix < 0 else abs(bitpix)
    z >>= np.uint64(64 - bits)  # keep the top bits: the best-mixed ones
    # Low bit = parity of the index, so neighbours along the fastest axis always differ and
    # any odd shift is caught in every voxel; other shifts differ in all but ~2^-(bits-1).
    z &= ~np.uint64(1)
    np.bitwise_and(flat, 1, out=scratch, casting="unsafe")
    z |= scratch
    del scratch
    if bitpix > 0:
        out = z.astype(dtype.str.replace("i", "u")).view(dtype)  # two's complement reinterpretation
    else:
        signed = z.view(np.int64)
        signed -= np.int64(1 << (bits - 1))  # centre on zero: both signs
        out = signed.astype(dtype)
        out *= dtype.type(2.0 ** -_FLOAT_BITS[bitpix][1])  # power of two: exact
    return out.reshape(index.shape)


def _bitpix_dtype(bitpix) -> np.dtype:
    try:
        return BITPIX_DTYPES[int(bitpix)]
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"bitpix: {bitpix!r} is not one of {sorted(BITPIX_DTYPES)}") from None


def check_shape(shape) -> tuple[int, ...]:
    try:
        dims = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise ConfigError(f"shape: {shape!r} is not a sequence of axis lengths (voxels)") from None
    if not 1 <= len(dims) <= 4:
        raise ConfigError(f"shape: {shape!r} has {len(dims)} axes; 1 to 4 are supported")
    if any(n <= 0 for n in dims) or any(n != s for n, s in zip(dims, shape)):
        raise ConfigError(f"shape: {shape!r} must have positive integer axis lengths (voxels)")
    return dims


def _check_scaling(bitpix: int, bscale, bzero, blank) -> None:
    for field, value in (("bscale", bscale), ("bzero", bzero)):
        if value is not None and not (isinstance(value, (int, float, np.number))
                                      and math.isfinite(value)):
            raise ConfigError(f"{field}: {value!r} is not a finite number")
    if bscale is not None and bscale == 0:
        raise ConfigError("bscale: must not be 0 (physical = raw * bscale + bzero)")
    if blank is None:
        return
    if bitpix < 0:
        raise ConfigError(f"blank: BLANK is only allowed for integer BITPIX, not {bitpix}")
    info = np.iinfo(BITPIX_DTYPES[bitpix])
    if not isinstance(blank, (int, np.integer)) or not info.min <= blank <= info.max:
        raise ConfigError(f"blank: {blank!r} is not an integer in [{info.min}, {info.max}]")


def _wcs_axes(naxis: int, stokes: bool) -> list[tuple]:
    """(CTYPE, CUNIT, CRVAL, CDELT) for FITS axes 1..naxis: a sensible subset of RA/DEC/FREQ/STOKES."""
    if naxis == 1:
        return [_FREQ]  # a spectrum
    if naxis == 4:
        return _CELESTIAL + ([_STOKES, _FREQ] if stokes else [_FREQ, _STOKES])
    return (_CELESTIAL + [_FREQ])[:naxis]


def beam_axes(shape, stokes: bool = False) -> tuple[int, int]:
    """(NCHAN, NPOL) of the BEAMS table of a cube of numpy-order `shape`: the FREQ axis's length
    and the STOKES axis's (1 without one). A ConfigError for a 2-D image (no spectral axis)."""
    naxes = list(reversed(check_shape(shape)))
    ctypes = [axis[0] for axis in _wcs_axes(len(naxes), stokes)]
    if "FREQ" not in ctypes:
        raise ConfigError(f"beams: a per-channel beam table needs a spectral axis; shape {tuple(shape)} "
                          f"is a 2-D image (RA, Dec)")
    npol = naxes[ctypes.index("STOKES")] if "STOKES" in ctypes else 1
    return naxes[ctypes.index("FREQ")], npol


def beam_rows(nchan: int, npol: int) -> np.ndarray:
    """The BEAMS table's rows (the oracle): polarisation by polarisation, channel by channel;
    BMAJ = 10 + 0.001 chan + 0.5 pol arcsec, BMIN = 8 + 0.0005 chan arcsec, BPA = -40 + 0.01 chan
    + 3 pol deg, stored as float32 like CASA's, CHAN and POL as int32."""
    pol, chan = np.divmod(np.arange(nchan * npol, dtype=np.int64), nchan)
    rows = np.empty(nchan * npol, dtype=[("BMAJ", "f4"), ("BMIN", "f4"), ("BPA", "f4"), ("CHAN", "i4"), ("POL", "i4")])
    rows["BMAJ"] = 10 + 0.001 * chan + 0.5 * pol
    rows["BMIN"] = 8 + 0.0005 * chan
    rows["BPA"] = -40 + 0.01 * chan + 3 * pol
    rows["CHAN"], rows["POL"] = chan, pol
    return rows


def beams_hdu(nchan: int, npol: int) -> fits.BinTableHDU:
    """The BEAMS extension as CASA's exportfits writes it: columns BMAJ, BMIN (arcsec), BPA (deg),
    CHAN, POL; NCHAN and NPOL in its header."""
    rows = beam_rows(nchan, npol)
    units = {"BMAJ": "arcsec", "BMIN": "arcsec", "BPA": "deg"}
    columns = [fits.Column(name=name, format="1E" if name in units else "1J", unit=units.get(name), array=rows[name])
               for name in rows.dtype.names]
    hdu = fits.BinTableHDU.from_columns(columns, name="BEAMS")
    hdu.header["EXTVER"] = (1, "extension version")
    hdu.header["NCHAN"] = (nchan, "number of channels")
    hdu.header["NPOL"] = (npol, "number of polarizations")
    return hdu


def _beams_bytes(nchan: int, npol: int) -> bytes:
    """The BEAMS extension's bytes as they follow the padded data: header then table, whole blocks."""
    rows = beam_rows(nchan, npol)
    data = rows.astype(rows.dtype.newbyteorder(">")).tobytes()  # FITS tables are big-endian, rows packed
    return beams_hdu(nchan, npol).header.tostring().encode("ascii") + data + b"\0" * _padding(len(data))


def _check_restfrq(restfrq_hz) -> None:
    if restfrq_hz is not None and not (isinstance(restfrq_hz, (int, float, np.number))
                                       and not isinstance(restfrq_hz, bool)
                                       and math.isfinite(restfrq_hz) and restfrq_hz > 0):
        raise ConfigError(f"restfrq_hz: {restfrq_hz!r} is not a positive, finite frequency (Hz)")


def build_header(shape, bitpix: int = -32, *, extension: bool = False, bscale=None, bzero=None,
                 blank=None, header_blocks: int = 1, stokes: bool = False, restfrq_hz=None,
                 beams: bool = False) -> fits.Header:
    """Header of the HDU that holds a cube of numpy-order `shape`, padded to >= header_blocks blocks.
    restfrq_hz: writes RESTFRQ (Hz); beams: writes CASAMBM = T (a BEAMS table follows the data)."""
    _check_restfrq(restfrq_hz)
    naxes = list(reversed(shape))  # FITS order: NAXIS1 is the fastest (last numpy) axis
    h = fits.Header()
    if extension:
        h["XTENSION"] = ("IMAGE", "image extension")
    else:
        h["SIMPLE"] = (True, "conforms to FITS standard")
    h["BITPIX"] = (bitpix, "bits per data value")
    h["NAXIS"] = (len(naxes), "number of data axes")
    for i, n in enumerate(naxes, 1):
        h[f"NAXIS{i}"] = (n, f"length of data axis {i}")
    if extension:
        h["PCOUNT"] = (0, "no parameters")
        h["GCOUNT"] = (1, "one group")
    for field, value in (("BSCALE", bscale), ("BZERO", bzero), ("BLANK", blank)):
        if value is not None:
            h[field] = value
    h["BUNIT"] = ("Jy/beam", "physical = raw * BSCALE + BZERO")
    for i, (ctype, cunit, crval, cdelt) in enumerate(_wcs_axes(len(naxes), stokes), 1):
        h[f"CTYPE{i}"] = ctype
        h[f"CRPIX{i}"] = 1.0 if ctype == "STOKES" else naxes[i - 1] / 2 + 0.5  # centre pixel
        h[f"CRVAL{i}"] = crval
        h[f"CDELT{i}"] = cdelt
        if cunit:
            h[f"CUNIT{i}"] = cunit
    if len(naxes) >= 2:
        h["RADESYS"] = "ICRS"
    if len(naxes) != 2:
        h["SPECSYS"] = "BARYCENT"
    if restfrq_hz is not None:
        h["RESTFRQ"] = (float(restfrq_hz), "[Hz] rest frequency of the line")
    if beams:
        beam_axes(shape, stokes)  # refuses a cube without a spectral axis
        if not extension:
            h.insert(f"NAXIS{len(naxes)}", ("EXTEND", True, "a BEAMS extension follows"), after=True)
        h["CASAMBM"] = (True, "a beam per channel: see the BEAMS extension")
    h["ORIGIN"] = "ingest.synth"
    h["SYNTHVER"] = (1, "raw values: ingest.testbed.synth.voxel_values")
    # Pad so the header spans header_blocks blocks: exercises readers that assume one block.
    cards_needed = (header_blocks - 1) * (FITS_BLOCK_BYTES // CARD_BYTES) + 1 - (len(h) + 1)
    for k in range(max(0, cards_needed)):
        add = h.add_comment if k % 2 == 0 else h.add_history
        add(f"padding card {k}")
    return h


def _primary_stub() -> fits.Header:
    """Primary header with no data, in front of an IMAGE extension."""
    h = fits.Header()
    h["SIMPLE"] = (True, "conforms to FITS standard")
    h["BITPIX"] = (8, "no data")
    h["NAXIS"] = (0, "no data in the primary HDU")
    h["EXTEND"] = (True, "the cube is in extension 1")
    return h


def _padding(nbytes: int) -> int:
    return -nbytes % FITS_BLOCK_BYTES


def write_cube(path, shape, bitpix: int = -32, *, bscale=None, bzero=None, blank=None,
               extension: bool = False, header_blocks: int = 1, stokes: bool = False,
               restfrq_hz=None, beams: bool = False, batch_bytes: int = DEFAULT_BATCH_BYTES) -> dict:
    """Stream a synthetic cube (numpy-order shape, 1-4 axes) to a FITS file atomically; returns its layout.

    extension=False: the cube is the primary HDU; True: an empty primary then an IMAGE
    extension. header_blocks (default 1) pads the cube's header to at least that many
    2880-byte blocks. stokes=True (4 axes only) puts STOKES on FITS axis 3 and FREQ on 4.
    batch_bytes (default 8 MiB) bounds each working array: batch_bytes // 8 voxels per write.
    """
    dtype = _bitpix_dtype(bitpix)
    bitpix = int(bitpix)
    dims = check_shape(shape)
    _check_scaling(bitpix, bscale, bzero, blank)
    if not isinstance(header_blocks, (int, np.integer)) or header_blocks < 1:
        raise ConfigError(f"header_blocks: {header_blocks!r} must be an integer >= 1 (2880-byte blocks)")
    if stokes and len(dims) != 4:
        raise ConfigError(f"stokes: needs a 4-axis shape, got {len(dims)} axes")
    if not isinstance(batch_bytes, (int, np.integer)) or batch_bytes < 8:
        raise ConfigError(f"batch_bytes: {batch_bytes!r} must be an integer >= 8 (bytes)")

    header = build_header(dims, bitpix, extension=extension, bscale=bscale, bzero=bzero,
                          blank=blank, header_blocks=header_blocks, stokes=stokes, restfrq_hz=restfrq_hz,
                          beams=beams)
    tail = _beams_bytes(*beam_axes(dims, stokes)) if beams else b""
    head = (_primary_stub().tostring().encode("ascii") if extension else b"")
    head += header.tostring().encode("ascii")  # tostring() pads to whole blocks and adds END
    n_voxels = math.prod(dims)
    data_bytes = n_voxels * dtype.itemsize
    batch_voxels = batch_bytes // 8  # the hash works in uint64 whatever the BITPIX
    big_endian = dtype.newbyteorder(">")

    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    # Same directory as the target, so os.replace is an atomic rename on one filesystem.
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    with atomic_write(path, tmp) as f:
        f.write(head)
        for start in range(0, n_voxels, batch_voxels):
            stop = min(start + batch_voxels, n_voxels)
            values = voxel_values(np.arange(start, stop, dtype=np.int64), bitpix)
            if sys.byteorder == "little":
                values = values.byteswap(inplace=True).view(big_endian)  # no extra copy
            f.write(values.data)
            del values  # else the last batch is still alive while the next one is made
        f.write(b"\0" * _padding(data_bytes))
        f.write(tail)
    file_bytes = len(head) + data_bytes + _padding(data_bytes) + len(tail)
    info = {"path": path, "shape": dims, "bitpix": bitpix, "data_offset": len(head),
            "data_bytes": data_bytes, "file_bytes": file_bytes}
    if beams:  # where the BEAMS table starts: just after the padded data
        info.update(beams_offset=file_bytes - len(tail), beams_bytes=len(tail))
    return info


def parse_fits_shape(text: str) -> tuple[int, ...]:
    """'NAXIS1xNAXIS2x...' (FITS order, fastest first) -> numpy-order shape (slowest first)."""
    try:
        naxes = [int(part) for part in text.lower().split("x")]
    except ValueError:
        raise ConfigError(f"--shape: {text!r} is not NAXIS1xNAXIS2[xNAXIS3[xNAXIS4]] (voxels)") from None
    return tuple(reversed(naxes))
