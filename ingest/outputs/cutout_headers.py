"""Thousands of cut-out headers of one cube, made by patching cards instead of by astropy each time.

`subcube_header` builds a cut-out's header with astropy: parse, copy, set, verify and format
every card; for a catalogue's thousands of small cut-outs that was most of a rank's time. Here
the first box of each shape of header (which axes start past 0, whether OBJECT is set) is made by
`subcube_header` itself; later boxes of that shape copy its card images and re-render only the
cards that differ (NAXISn, the shifted CRPIXn/CRPIXna/LTVn, OBJECT and ingest's HISTORY line),
each with astropy's own Card formatting. tests/test_cutout_headers.py checks that the bytes equal
`subcube_header`'s for random boxes.

The BEAMS table after a cut-out goes the same way (`CutoutBeams`): astropy writes the first table
of each shape (whether all channels, all polarisations are kept: a card whose value stays the
source's keeps its image, one that changes is re-rendered); later ones patch NAXIS2, NCHAN and
NPOL and pack the kept rows big-endian. tests/test_beams_bytes.py checks the bytes equal
`BeamTable.cut(...).to_bytes()`'s, the reference, for random tables and boxes.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
from astropy.io import fits
from astropy.io.fits.card import _format_value  # astropy's own number formatting: the same bytes

from ingest.formats.fits import shifted_axis
from ingest.formats.fits_cutout import NOT_FITS_TEXT, _parsed_header, card_error, subcube_header
from ingest.formats.fits_cutout import check_box as _check_box, source_label as _source_label

_BLOCK_BYTES = 2880
_END = "END".ljust(80)
_NAXIS = re.compile(r"NAXIS(\d+)")
# TFORM letters whose values are plain big-endian numbers, and their numpy types: the columns CASA
# writes (E, J) and their kin. Any other column (strings, bits, scaled) is left to astropy.
_PLAIN_TFORM = re.compile(r"(\d*)([BIJKED])")
_PLAIN_TYPES = {"B": "u1", "I": "i2", "J": "i4", "K": "i8", "E": "f4", "D": "f8"}
_NOT_PLAIN_KEYS = ("TSCAL", "TZERO", "TDIM")


class _Template:
    """One header shape: its card images, and which of them each box re-renders."""

    def __init__(self, header: fits.Header, layout, pairs, object_name):
        original = _parsed_header(layout.header_text)
        ndim = len(layout.shape)
        self.images = [card.image for card in header.cards]
        self.naxis, self.shifted, self.object_at = {}, {}, None
        for i, card in enumerate(header.cards):
            key = card.keyword
            if (m := _NAXIS.fullmatch(key)) and 1 <= int(m.group(1)) <= ndim:
                self.naxis[i] = (key, int(m.group(1)), card.comment)
            elif (n := shifted_axis(key, ndim)) and pairs[ndim - n][0] != 0:
                base = float(original[key]) if key in original else 0.0  # a card made for the box: CRPIXn = 0
                self.shifted[i] = (key, n, base, card.comment)
            elif key == "OBJECT" and object_name is not None:
                self.object_at = (i, card.comment)
        history = fits.Card("HISTORY", _history_text(layout, pairs)).image
        n_history = len(history) // 80
        flat = [image for image in self.images]
        at = next(i for i in range(len(flat)) if "".join(flat[i:i + n_history]) == history)
        self.history = (at, n_history)

    def render(self, layout, pairs, object_name) -> bytes:
        ndim = len(layout.shape)
        images = list(self.images)
        for i, (key, n, comment) in self.naxis.items():
            a, b = pairs[ndim - n]
            images[i] = _number_card(key, b - a, comment)
        for i, (key, n, base, comment) in self.shifted.items():
            images[i] = _number_card(key, base - pairs[ndim - n][0], comment)
        if self.object_at is not None:
            images[self.object_at[0]] = _text_card("OBJECT", str(object_name), self.object_at[1])
        at, n = self.history
        text = _history_text(layout, pairs)  # commentary: 72 characters a card, as astropy splits it
        images[at:at + n] = [f"HISTORY {text[k:k + 72]}".ljust(80) for k in range(0, len(text), 72)]
        text = "".join(images) + _END
        return (text + " " * (-len(text) % _BLOCK_BYTES)).encode("ascii")


@lru_cache(maxsize=8192, typed=True)  # a catalogue's boxes repeat their sizes and starts; typed: 1 is not 1.0
def _number_card(key: str, value, comment: str) -> str:
    """A fixed-format card of a number, as astropy's Card formats it (a plain keyword, the value
    right-justified in 20 columns, the comment after ' / ', cut at 80 columns)."""
    image = f"{key:8}= {_format_value(value)}" + (f" / {comment}" if comment else "")
    return image.ljust(80)[:80]


def _text_card(key: str, text: str, comment: str) -> str:
    """A string card as astropy's Card writes it: quoted, quotes doubled, at least 8 characters
    inside the quotes, the value padded to 20 columns. A value that is not printable ASCII, or a
    card longer than 80 columns, goes to astropy's Card itself (its error, or CONTINUE cards):
    building a Card reads astropy's configuration a few times, most of a cut-out's header time."""
    image = f"{key:8}= {_format_value(text)}" + (f" / {comment}" if comment else "")
    if len(image) <= 80 and not NOT_FITS_TEXT.search(text):
        return image.ljust(80)
    try:
        return fits.Card(key, text, comment).image
    except ValueError as exc:
        raise card_error(exc) from None


def _history_text(layout, pairs) -> str:
    """The HISTORY line subcube_header adds (kept in step with it by the equality test)."""
    from ingest.formats.fits_cutout import _AXIS_LETTERS

    box_text = " ".join(f"{letter}={a}:{b}" for letter, (a, b) in zip(_AXIS_LETTERS, reversed(pairs)))
    return (f"ingest: subcube {box_text} (0-based, half-open, FITS axis order) of {_source_label(layout)} "
            f"HDU {layout.hdu}; CRPIXn shifted by the box start")


class CutoutHeaders:
    """The FITS headers of many cut-outs of one cube (as bytes, END and padding included)."""

    def __init__(self, layout):
        self.layout = layout
        self._templates: dict[tuple, _Template] = {}
        self._beams = None  # CutoutBeams of layout.beams, made at the first tail

    def tail(self, box) -> bytes:
        """The BEAMS extension that follows the cut-out of `box` (numpy-order pairs, as `head` was
        given): `layout.box_beams(box).to_bytes()`'s bytes; b"" when the cube has no table."""
        if self.layout.beams is None:
            return b""
        if self._beams is None:
            self._beams = CutoutBeams(self.layout.beams)
        return self._beams.cut_bytes(*self.layout.beam_range(box))

    def head(self, box, object_name: str | None = None) -> bytes:
        layout = self.layout
        pairs = _check_box(box, layout.shape, f"{_source_label(layout)} HDU {layout.hdu}")
        shape = (tuple(a != 0 for a, _ in pairs), object_name is not None)
        template = self._templates.get(shape)
        if template is None:
            header = subcube_header(layout, pairs, object_name=object_name)
            self._templates[shape] = _Template(header, layout, pairs, object_name)
            return header.tostring().encode("ascii")
        return template.render(layout, pairs, object_name)


class CutoutBeams:
    """The BEAMS tables of many cut-outs of one cube (ingest.formats.beams.BeamTable), as bytes."""

    def __init__(self, table):
        self.table = table
        self.nchan, self.npol = table.nchan, table.npol
        self._fits_dtype = _plain_fits_dtype(table.header, table.rows.dtype)
        self._templates: dict[tuple, _TableTemplate | None] = {}

    def cut_bytes(self, chan_start: int, chan_stop: int, pol_start: int = 0, pol_stop: int | None = None) -> bytes:
        """`table.cut(chan_start, chan_stop, pol_start, pol_stop).to_bytes()`: header, rows and zero
        padding, whole 2880-byte blocks (its RegionError for a range outside the table)."""
        pol_stop = self.npol if pol_stop is None else pol_stop
        n_chan, n_pol = chan_stop - chan_start, pol_stop - pol_start
        shape = (n_chan == self.nchan, n_pol == self.npol)
        template = self._templates.get(shape)
        if (template is None or self._fits_dtype is None
                or not (0 <= chan_start < chan_stop <= self.nchan and 0 <= pol_start < pol_stop <= self.npol)):
            whole = self.table.cut(chan_start, chan_stop, pol_start, pol_stop).to_bytes()
            if shape not in self._templates and self._fits_dtype is not None:
                self._templates[shape] = _TableTemplate.of(whole, shape, self._rows_bytes(chan_start, chan_stop,
                                                                                           pol_start, pol_stop))
            return whole
        data = self._rows_bytes(chan_start, chan_stop, pol_start, pol_stop)
        return template.render({"NAXIS2": len(data) // self._fits_dtype.itemsize, "NCHAN": n_chan, "NPOL": n_pol},
                               data)

    def _rows_bytes(self, chan_start, chan_stop, pol_start, pol_stop) -> bytes:
        """The kept rows in their order, CHAN and POL from 0, as a FITS table stores them."""
        chan, pol = self.table.rows["CHAN"], self.table.rows["POL"]
        rows = self.table.rows[(chan >= chan_start) & (chan < chan_stop) & (pol >= pol_start) & (pol < pol_stop)]
        rows["CHAN"] -= chan_start
        rows["POL"] -= pol_start
        return rows.astype(self._fits_dtype).tobytes()


class _TableTemplate:
    """One shape of BEAMS table: astropy's card images, and which of them each box re-renders."""

    def __init__(self, images, patched):
        self.images, self.patched = images, patched  # patched: {card index: (keyword, comment)}

    @classmethod
    def of(cls, whole: bytes, shape, data: bytes):
        """The template of astropy's bytes `whole` of a table of this shape whose rows are `data`;
        None (astropy writes every table of the shape) when patching would not give its bytes."""
        text = whole.decode("latin-1")  # one character a byte: the rows need not be text
        images = [text[i:i + 80] for i in range(0, len(text), 80)]
        end = next((i for i, image in enumerate(images) if image == _END), None)
        if end is None:
            return None
        images = images[:end + 1]
        keys = {"NAXIS2"} if shape != (True, True) else set()
        keys |= {key for key, full in zip(("NCHAN", "NPOL"), shape) if not full}
        patched = {}
        for i, image in enumerate(images):
            if image[:8].rstrip() in keys:
                card = fits.Card.fromstring(image)
                patched[i] = (card.keyword, card.comment)
                if _number_card(card.keyword, card.value, card.comment) != image:
                    return None
        template = cls(images, patched)
        if len(patched) != len(keys) or template.render({}, data) != whole:
            return None
        return template

    def render(self, values, data: bytes) -> bytes:
        images = list(self.images)
        for i, (key, comment) in self.patched.items():
            if key in values:
                images[i] = _number_card(key, int(values[key]), comment)
        text = "".join(images)
        return ((text + " " * (-len(text) % _BLOCK_BYTES)).encode("ascii") + data
                + b"\0" * (-len(data) % _BLOCK_BYTES))


def _plain_fits_dtype(header: fits.Header, dtype: np.dtype) -> np.dtype | None:
    """The big-endian record type of a table whose columns are all plain numbers (see _PLAIN_TFORM),
    in the header's order, unscaled and as the rows hold them; None for any other table."""
    fields = []
    for i in range(1, int(header.get("TFIELDS", 0)) + 1):
        match = _PLAIN_TFORM.fullmatch(str(header.get(f"TFORM{i}", "")).strip().upper())
        if match is None or any(f"{key}{i}" in header for key in _NOT_PLAIN_KEYS):
            return None
        repeat = int(match.group(1) or 1)
        if repeat < 1:  # a column of no values: astropy's business
            return None
        values_shape = () if repeat == 1 else (repeat,)
        fields.append((str(header[f"TTYPE{i}"]).strip(), ">" + _PLAIN_TYPES[match.group(2)], values_shape))
    try:
        fits_dtype = np.dtype(fields)
    except (TypeError, ValueError):  # a name twice, or none
        return None
    if fits_dtype.names != dtype.names or fits_dtype.newbyteorder("=") != dtype:
        return None
    return fits_dtype
