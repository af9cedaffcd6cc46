"""Thousands of cut-out headers of one cube, made by patching cards instead of by astropy each time.

`subcube_header` builds a cut-out's header with astropy: parse, copy, set, verify and format
every card; for a catalogue's thousands of small cut-outs that was most of a rank's time. Here
the first box of each shape of header (which axes start past 0, whether OBJECT is set) is made by
`subcube_header` itself; later boxes of that shape copy its card images and re-render only the
cards that differ (NAXISn, the shifted CRPIXn/CRPIXna/LTVn, OBJECT and ingest's HISTORY line),
each with astropy's own Card formatting. tests/test_cutout_headers.py checks that the bytes equal
`subcube_header`'s for random boxes.
"""
from __future__ import annotations

import re
from functools import lru_cache

from astropy.io import fits
from astropy.io.fits.card import _format_value  # astropy's own number formatting: the same bytes

from ingest.formats.fits_cutout import NOT_FITS_TEXT, _parsed_header, card_error, subcube_header
from ingest.formats.fits_cutout import check_box as _check_box, source_label as _source_label

_BLOCK_BYTES = 2880
_END = "END".ljust(80)
_SHIFTED = re.compile(r"(?:CRPIX(\d+)[A-Z]?|LTV(\d+))")
_NAXIS = re.compile(r"NAXIS(\d+)")


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
            elif (m := _SHIFTED.fullmatch(key)) and pairs[ndim - int(m.group(1) or m.group(2))][0] != 0:
                base = float(original[key]) if key in original else 0.0  # a card made for the box: CRPIXn = 0
                self.shifted[i] = (key, int(m.group(1) or m.group(2)), base, card.comment)
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
