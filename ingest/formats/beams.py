"""The per-channel beam table of CASA and ASKAP cubes: parsed from its bytes, cut to a box, written back.

A cube whose restoring beam changes from channel to channel says `CASAMBM = T` in its image
header and carries a binary table extension `EXTNAME = 'BEAMS'` after the image: one row per
channel and polarisation, columns BMAJ and BMIN (arcsec), BPA (deg), CHAN and POL (int32, 0-based
pixel indices along the cube's spectral and Stokes axes), and NCHAN and NPOL in its header.

A cut-out of channels c0..c1 (half-open) keeps the rows of those channels in their order, with
CHAN renumbered from 0 and NCHAN set to the channels kept (as cutout-fits cuts it); a cut along
the Stokes axis does the same to POL and NPOL. Every other column and header card is kept.

Pure: bytes in, a `BeamTable` out (a numpy structured array and the header text, frozen and
picklable, so it travels with the layout to every rank). No I/O. astropy is imported by the
functions that parse or write a table, when called, not by loading this module: a rank that
unpickles a layout carrying a table needs no astropy to do so.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ingest.errors import FitsFormatError, RegionError

if TYPE_CHECKING:  # annotations only: see the module's docstring
    from astropy.io import fits

EXTNAME = "BEAMS"
REQUIRED_COLUMNS = ("BMAJ", "BMIN", "BPA", "CHAN", "POL")
# Header cards that describe the old table's bytes (the rest are recomputed by astropy).
_STALE_KEYS = ("CHECKSUM", "DATASUM")
# Column keywords carried from the source table into a cut one (TTYPE and TFORM always are).
_COLUMN_KEYS = {"unit": "TUNIT", "null": "TNULL", "bscale": "TSCAL", "bzero": "TZERO", "disp": "TDISP",
                "dim": "TDIM"}


@dataclass(frozen=True, eq=False)
class BeamTable:
    """A BEAMS extension: its rows (native byte order, read-only) and its header cards."""

    rows: np.ndarray  # structured array, one row per (channel, polarisation), columns as in the file
    header_text: str  # the extension's header cards, 80 characters each (XTENSION ... END)

    def __post_init__(self):
        rows = np.array(self.rows, copy=True)  # our own copy: nobody else can change it under us
        rows.flags.writeable = False
        object.__setattr__(self, "rows", rows)

    def __reduce__(self):
        # Rebuilt through __init__ on the receiving rank, so the copy there is read-only too.
        return (BeamTable, (np.array(self.rows), self.header_text))

    def __eq__(self, other) -> bool:
        if not isinstance(other, BeamTable):
            return NotImplemented
        return (self.header_text == other.header_text and self.rows.dtype == other.rows.dtype
                and self.rows.tobytes() == other.rows.tobytes())

    def __hash__(self) -> int:
        return hash((self.header_text, self.rows.tobytes()))

    def __repr__(self) -> str:
        return f"BeamTable(nchan={self.nchan}, npol={self.npol}, rows={len(self.rows)})"

    @property
    def header(self) -> fits.Header:
        """The extension's header (a fresh copy each call)."""
        from astropy.io import fits

        return fits.Header.fromstring(self.header_text)

    @cached_property  # parsing the header is astropy's slow path; a frozen table's counts never change
    def nchan(self) -> int:
        """NCHAN: channels the table describes."""
        return int(self.header["NCHAN"])

    @cached_property
    def npol(self) -> int:
        """NPOL: polarisations the table describes."""
        return int(self.header["NPOL"])

    def cut(self, chan_start: int, chan_stop: int, pol_start: int = 0, pol_stop: int | None = None) -> BeamTable:
        """The table of channels [chan_start, chan_stop) and polarisations [pol_start, pol_stop)
        (half-open, in the cube's spectral and Stokes pixels; pol_stop None: every one): the rows
        of those channels and polarisations in their order, CHAN and POL renumbered from 0, NCHAN
        and NPOL the numbers kept."""
        pol_stop = self.npol if pol_stop is None else pol_stop
        for what, start, stop, n in (("channels", chan_start, chan_stop, self.nchan),
                                     ("polarisations", pol_start, pol_stop, self.npol)):
            if not 0 <= int(start) < int(stop) <= n:
                raise RegionError(f"BEAMS table: {what} [{start}, {stop}) are empty or outside the table's 0..{n}")
        chan, pol = self.rows["CHAN"], self.rows["POL"]
        keep = (chan >= chan_start) & (chan < chan_stop) & (pol >= pol_start) & (pol < pol_stop)
        rows = np.array(self.rows[keep])
        rows["CHAN"] -= chan_start
        rows["POL"] -= pol_start
        header = self.header
        header["NCHAN"] = int(chan_stop - chan_start)
        header["NPOL"] = int(pol_stop - pol_start)
        header["NAXIS2"] = len(rows)
        return BeamTable(rows, header.tostring())

    def to_hdu(self) -> fits.BinTableHDU:
        """The table as an astropy binary table HDU: the source's columns (names, formats, units)
        and header cards, CHECKSUM/DATASUM dropped (they described the source's bytes)."""
        from astropy.io import fits

        header = self.header
        columns = []
        for i in range(1, int(header["TFIELDS"]) + 1):
            name = str(header[f"TTYPE{i}"]).strip()
            extra = {arg: header[f"{key}{i}"] for arg, key in _COLUMN_KEYS.items() if f"{key}{i}" in header}
            columns.append(fits.Column(name=name, format=str(header[f"TFORM{i}"]), array=self.rows[name], **extra))
        for key in _STALE_KEYS:
            header.remove(key, ignore_missing=True, remove_all=True)
        return fits.BinTableHDU.from_columns(columns, header=header)

    def to_bytes(self) -> bytes:
        """The extension as it follows an image in a file: header and data, whole 2880-byte blocks."""
        from astropy.io import fits

        buffer = io.BytesIO()
        primary = fits.PrimaryHDU()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.HDUList([primary, self.to_hdu()]).writeto(buffer)
        return buffer.getvalue()[len(primary.header.tostring()):]


def is_beams_header(header: fits.Header) -> bool:
    """Is this extension header a BEAMS binary table's?"""
    return (str(header.get("XTENSION", "")).strip().upper() == "BINTABLE"
            and str(header.get("EXTNAME", "")).strip().upper() == EXTNAME)


def parse_beam_table(raw: bytes, source: str) -> BeamTable:
    """The BEAMS extension whose header and data are `raw` (as they lie in the object), checked:
    the five CASA columns, NCHAN and NPOL in the header, one row per channel and polarisation, CHAN
    and POL within them. A FitsFormatError naming `source` otherwise."""
    from astropy.io import fits

    where = f"{source}: BEAMS table"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hdu = fits.BinTableHDU.fromstring(bytes(raw))
            header = hdu.header
            data = hdu.data
    except Exception as exc:  # astropy raises a zoo of types for bad tables
        raise FitsFormatError(f"{where} cannot be parsed: {exc}") from None
    if not is_beams_header(header):
        raise FitsFormatError(f"{where}: the extension is not a binary table named BEAMS")
    if data is None:
        raise FitsFormatError(f"{where} has no rows")
    missing = [name for name in REQUIRED_COLUMNS if name not in data.columns.names]
    if missing:
        raise FitsFormatError(f"{where} lacks column(s) {', '.join(missing)} "
                              f"(CASA's are {', '.join(REQUIRED_COLUMNS)})")
    formats = {c.name: str(c.format) for c in data.columns}
    variable = [name for name, tform in formats.items() if tform.upper().lstrip("0123456789")[:1] in ("P", "Q")]
    if variable:  # TFORM rPt / rQt: the values live in the heap, not in the rows
        raise FitsFormatError(f"{where}: column(s) {', '.join(variable)} are variable-length; "
                              f"a CASA beam table has none")
    rows = _native_rows(data)
    for name in REQUIRED_COLUMNS:
        if rows[name].ndim != 1 or rows.dtype[name].kind not in ("iuf" if name in REQUIRED_COLUMNS[:3] else "iu"):
            raise FitsFormatError(f"{where}: column {name} is {formats[name]}, not one "
                                  f"{'number' if name in REQUIRED_COLUMNS[:3] else 'integer'} per row")
    for key in ("NCHAN", "NPOL"):
        value = header.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FitsFormatError(f"{where}: header card {key} is {value!r}, not a count >= 1")
    nchan, npol = int(header["NCHAN"]), int(header["NPOL"])
    if len(rows) != nchan * npol:
        raise FitsFormatError(f"{where} has {len(rows)} rows but NCHAN x NPOL = {nchan} x {npol} = {nchan * npol}")
    for name, n in (("CHAN", nchan), ("POL", npol)):
        if len(rows) and not (rows[name].min() >= 0 and rows[name].max() < n):
            raise FitsFormatError(f"{where}: column {name} runs {rows[name].min()}..{rows[name].max()}, "
                                  f"outside 0..{n - 1}")
    pairs = rows["CHAN"].astype(np.int64) * npol + rows["POL"]
    if np.unique(pairs).size != len(rows):
        raise FitsFormatError(f"{where} lists some (CHAN, POL) pair twice, so it misses another")
    return BeamTable(rows, header.tostring())


def _native_rows(data) -> np.ndarray:
    """The table's rows as a plain structured array in native byte order, values scaled as astropy
    returns them (TSCAL/TZERO applied)."""
    columns = [(name, np.asarray(data[name])) for name in data.columns.names]
    dtype = [(name, values.dtype.newbyteorder("="), values.shape[1:]) for name, values in columns]
    rows = np.empty(len(data), dtype=dtype)
    for name, values in columns:
        rows[name] = values
    return rows
