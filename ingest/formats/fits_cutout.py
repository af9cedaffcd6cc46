"""A box of a FITS HDU as a standalone FITS file's bytes: its header, its data, what follows.

One code path for every FITS cut-out `ingest` makes: `run --output-dir`'s subcubes and
`cutouts`' files (ingest.outputs.subcubes writes them atomically) and the Python API's
`cube.cutout(...).writeto(path)` / `to_hdulist()`, so a region gives the same bytes whichever
way it is cut.

Values: the RAW stored values are copied with the original BITPIX, BSCALE, BZERO and BLANK,
so astropy returns exactly the physical values it would return for the same box of the
original — no rescaling, no float round trip.

World coordinates: every CRPIXn (alternates and IRAF LTVn too) moves by the box start, so every
pixel of the cut-out has the world coordinates it had in the cube; the other cards are kept. A
cube with a per-channel beam (CASAMBM = T) gets its BEAMS table cut to the box's channels and
polarisations, after the data (`cutout_parts`); the header says CASAMBM = T only then.
"""
from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping

import numpy as np
from astropy.io import fits

from ingest.errors import ConfigError, FitsFormatError, IngestError, RegionError
from ingest.formats.fits import BLOCK_BYTES, FitsLayout, has_wcs_keys, shifted_axis
from ingest.redact import redact_url

_WRITE_BYTES = 64 * 1024 * 1024  # bounded writes: some filesystems and libcs cap one write(2) near 2 GiB
_AXIS_LETTERS = ("x", "y", "z", "s")  # FITS axes 1..4
# Keywords whose values describe the original HDU's bytes and would be wrong for ours.
_STALE_KEYS = ("CHECKSUM", "DATASUM")
# Keywords that only make sense in an extension.
_EXTENSION_ONLY = ("XTENSION", "PCOUNT", "GCOUNT", "INHERIT")
# Cards a cut-out's writer owns: they describe its bytes, its extensions or its values' scaling.
_WRITER_KEYS = ("SIMPLE", "XTENSION", "BITPIX", "NAXIS", "EXTEND", "PCOUNT", "GCOUNT", "BSCALE", "BZERO", "BLANK",
                "CASAMBM", "CHECKSUM", "DATASUM", "END")


def check_box(box, shape: tuple[int, ...], what: str) -> tuple[tuple[int, int], ...]:
    """The box as int pairs, refusing one that does not fit `shape` (numpy order)."""
    try:
        pairs = tuple((int(a), int(b)) for a, b in box)
    except (TypeError, ValueError):
        raise RegionError(f"{what}: box {box!r} is not a list of (start, stop) pairs") from None
    if len(pairs) != len(shape):
        raise RegionError(f"{what}: box has {len(pairs)} axes but the cube has {len(shape)} ({shape})")
    for axis, ((start, stop), n) in enumerate(zip(pairs, shape)):
        if not 0 <= start < stop <= n:
            raise RegionError(f"{what}: box axis {axis} [{start}, {stop}) is empty or outside 0..{n}")
    return pairs


def source_label(layout: FitsLayout) -> str:
    """The cube's source as a header names it (HISTORY, error messages): never a URL's signature."""
    # Layout.source is redacted already; redact again so no code path can leak a signature.
    source = layout.source
    return redact_url(source) if source.lower().startswith(("http://", "https://")) else source


def as_primary(header: fits.Header, ndim: int) -> fits.Header:
    """`header` (changed in place) as a primary HDU's whose data is about to be rewritten: an IMAGE
    extension's XTENSION becomes SIMPLE = T, PCOUNT, GCOUNT and INHERIT go, EXTEND is added, and
    CHECKSUM/DATASUM (which describe the old bytes) are removed."""
    if "XTENSION" in header:
        header.rename_keyword("XTENSION", "SIMPLE")
        header["SIMPLE"] = (True, "conforms to FITS standard")
        for key in _EXTENSION_ONLY[1:]:
            header.remove(key, ignore_missing=True, remove_all=True)
        if "EXTEND" not in header:  # astropy writes it in every primary header; readers expect it
            header.insert(f"NAXIS{ndim}", ("EXTEND", True, "FITS dataset may contain extensions"), after=True)
    for key in _STALE_KEYS:
        header.remove(key, ignore_missing=True, remove_all=True)
    return header


@functools.lru_cache(maxsize=4)
def _parsed_header(header_text: str) -> fits.Header:
    """The HDU's header parsed once per cube: thousands of cut-outs copy it, not parse it again."""
    return fits.Header.fromstring(header_text)


def subcube_header(layout: FitsLayout, box, *, object_name: str | None = None, extra_cards=None) -> fits.Header:
    """Primary header for `box` (numpy-order pairs) of the HDU `layout` describes.

    NAXISn become the box's extents and every CRPIXn (alternate WCS CRPIXna and IRAF LTVn
    too) moves by the box start along FITS axis n (= numpy axis ndim - n), so pixel (1, 1, 1)
    of the output has the world coordinates of the box's first pixel. BITPIX, BSCALE, BZERO,
    BLANK are kept. An IMAGE extension becomes a primary HDU: XTENSION -> SIMPLE = T and
    PCOUNT, GCOUNT and INHERIT are dropped (keywords the extension inherited from its primary
    header are not in `layout.header_text` and so are not carried). CASAMBM = T exactly when the
    cube has a BEAMS table (the writers put it, cut to the box, after the data). `object_name`
    sets OBJECT; `extra_cards` adds cards (see `_card_list`).
    """
    what = f"{source_label(layout)} HDU {layout.hdu}"
    if not layout.header_text:
        raise FitsFormatError(f"{what}: layout carries no header text; cannot write a subcube header")
    pairs = check_box(box, layout.shape, what)
    ndim = len(layout.shape)
    header = as_primary(_parsed_header(layout.header_text).copy(), ndim)

    has_wcs = has_wcs_keys(header.keys())
    for n in range(1, ndim + 1):
        start, stop = pairs[ndim - n]
        header[f"NAXIS{n}"] = stop - start
        if start == 0:
            continue
        primary_present = f"CRPIX{n}" in header
        for key in list(header.keys()):
            # the primary WCS, every alternate one, and IRAF's logical = physical * LTM + LTV
            if shifted_axis(key, ndim) == n:
                header[key] = float(header[key]) - start
        if not primary_present and has_wcs:
            # The WCS default is CRPIXn = 0; an explicit card keeps the box's WCS right.
            header.set(f"CRPIX{n}", 0.0 - start, "reference pixel, shifted to this box")
    _mark_beams(header, layout, ndim)
    _add_cards(header, object_name, extra_cards)

    box_text = " ".join(f"{letter}={a}:{b}" for letter, (a, b) in zip(_AXIS_LETTERS, reversed(pairs)))
    header.add_history(f"ingest: subcube {box_text} (0-based, half-open, FITS axis order) "
                       f"of {what}; CRPIXn shifted by the box start")
    return header


def _mark_beams(header: fits.Header, layout: FitsLayout, ndim: int) -> None:
    """CASAMBM = T (and EXTEND = T) exactly when the writer puts a BEAMS table after the data, i.e.
    when the cube has one: a header must never promise a table the file lacks."""
    if getattr(layout, "beams", None) is None:
        header.remove("CASAMBM", ignore_missing=True, remove_all=True)
        return
    if "EXTEND" not in header:
        header.insert(f"NAXIS{ndim}", ("EXTEND", True, "FITS dataset may contain extensions"), after=True)
    else:
        header["EXTEND"] = True
    header["CASAMBM"] = (True, "a beam per channel: see the BEAMS extension")


def _card_list(extra_cards) -> list[tuple]:
    """`extra_cards` (a Header, a mapping KEY -> value or (value, comment), or (KEY, value[, comment])
    tuples) as (KEY, value, comment) triples; a card the writer owns is a ConfigError naming it."""
    if extra_cards is None:
        return []
    if isinstance(extra_cards, fits.Header):
        items = [(card.keyword, card.value, card.comment) for card in extra_cards.cards]
    elif isinstance(extra_cards, Mapping):
        items = [(key, *(value if isinstance(value, tuple) else (value,))) for key, value in extra_cards.items()]
    else:
        items = [tuple(card) for card in extra_cards]
    cards = []
    for item in items:
        if not 2 <= len(item) <= 3 or not isinstance(item[0], str):
            raise ConfigError(f"extra_cards: {item!r} is not (KEY, value) or (KEY, value, comment)")
        key = item[0].strip().upper()
        if key in _WRITER_KEYS or re.fullmatch(r"(NAXIS|CRPIX|LTV)\d+[A-Z]?", key):
            raise ConfigError(f"extra_cards: {key} describes the cut-out's bytes or pixel grid and is set by "
                              f"the writer; it cannot be given")
        cards.append((key, item[1], item[2] if len(item) == 3 else None))
    return cards


def _add_cards(header: fits.Header, object_name, extra_cards) -> None:
    """OBJECT = `object_name` (as SoFiA-2's cubelets name their source), then the extra cards
    (COMMENT and HISTORY are appended, other keys set)."""
    try:
        if object_name is not None:
            header["OBJECT"] = (str(object_name), "source name")
        for key, value, comment in _card_list(extra_cards):
            if key in ("COMMENT", "HISTORY"):
                header.add_comment(value) if key == "COMMENT" else header.add_history(value)
            else:
                header[key] = (value, comment) if comment else value
    except (ValueError, TypeError) as exc:  # astropy refuses non-ASCII text and odd values
        raise card_error(exc) from None


def card_error(exc: Exception) -> ConfigError:
    """The error for an OBJECT name or extra card that astropy will not write as a FITS card."""
    return ConfigError(f"extra_cards / object_name: cannot be written as FITS cards: {exc}")


NOT_FITS_TEXT = re.compile(r"[^ -~]")  # a FITS header value is printable ASCII; astropy refuses the rest


def fits_text(name: str) -> str:
    """`name` as a FITS header value can hold it: accents dropped ("Mén" is "Men"), any other
    character beyond printable ASCII `?`. For a catalogue's names, which are not a reason to lose
    a cut-out; a name given to `write_cutout` itself is refused instead (card_error)."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    return NOT_FITS_TEXT.sub("?", plain)


def cutout_parts(layout: FitsLayout, box, *, object_name: str | None = None, extra_cards=None) -> tuple[bytes, bytes]:
    """(head, tail) of `box`'s FITS cut-out: the header (whole blocks, END included) that goes before
    the data, and what follows the padded data (the BEAMS table cut to the box's channels and
    polarisations, or nothing when the cube has none)."""
    header = subcube_header(layout, box, object_name=object_name, extra_cards=extra_cards)
    beams = layout.box_beams(check_box(box, layout.shape, f"{source_label(layout)} HDU {layout.hdu}"))
    return header.tostring().encode("ascii"), (beams.to_bytes() if beams is not None else b"")



def cutout_data(path, raw: np.ndarray, layout: FitsLayout) -> np.ndarray:
    """`raw` (the box's RAW stored values) as the FITS byte stream holds them: big-endian, C
    order; an IngestError naming `path` when they are not the stored dtype (scaled values)."""
    raw = np.asarray(raw)
    want = layout.raw_dtype
    if raw.dtype.kind != want.kind or raw.dtype.itemsize != want.itemsize:
        raise IngestError(f"{path}: data dtype {raw.dtype} is not the stored dtype {want} "
                          f"(BITPIX {layout.bitpix}); pass raw values, not scaled ones")
    return np.ascontiguousarray(raw, dtype=want)


def write_fits_cutout(fh, head: bytes, data: np.ndarray, tail: bytes) -> int:
    """Write a cut-out's bytes to the open binary file `fh`: `head` (cutout_parts), `data`
    (cutout_data) in bounded writes, the data's zero padding (FITS 3.3.2), then `tail`. Returns the
    bytes written."""
    padding = b"\0" * (-data.nbytes % BLOCK_BYTES)
    fh.write(head)
    flat = data.reshape(-1).view(np.uint8)  # a view: a 30 GiB subcube is not copied
    for start in range(0, flat.size, _WRITE_BYTES):
        fh.write(flat[start : start + _WRITE_BYTES])
    fh.write(padding)
    fh.write(tail)
    return len(head) + data.nbytes + len(padding) + len(tail)
