"""FITS cut-outs other tools trust: each rank's subcube (`write_subcube`, run --output-dir) and a
named cut-out (`write_cutout`, one writer for both) as a standalone, valid FITS file.

File naming (`output_name`)
    rank{RANK:04d}_x{X0}-{X1}_y{Y0}-{Y1}_z{Z0}-{Z1}[_s{S0}-{S1}].fits
  e.g. rank0003_x0-100_y50-100_z0-30.fits. The box is written in FITS axis order: x is NAXIS1
  (the last, fastest numpy axis), then y, z, and s for a 4th axis (whatever its CTYPE). Ranges
  are 0-based, half-open pixel ranges of the ORIGINAL cube, so x0-100 is FITS pixels 1..100.
  A 1-D cube gives only x, a 2-D one x and y. Names sort by rank.

Values: the RAW stored values are copied with the original BITPIX, BSCALE, BZERO and BLANK,
so astropy returns exactly the physical values it would return for the same box of the
original — no rescaling, no float round trip.

World coordinates: every CRPIXn (alternates and IRAF LTVn too) moves by the box start, so every
pixel of the cut-out has the world coordinates it had in the cube; the other cards are kept. A
cube with a per-channel beam (CASAMBM = T) gets its BEAMS table cut to the box's channels and
polarisations, after the data (`cutout_parts`); the header says CASAMBM = T only then.

Atomicity: a file is written under a hidden temporary name in the same directory, fsynced,
then renamed, so a file with the final name is always complete; a crash leaves at most a
`.rank....fits.tmp-PID` file, which `check_output_dir` clears on the next run of that grid.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import unicodedata
from collections.abc import Mapping

import numpy as np
from astropy.io import fits

from ingest.atomic import atomic_write
from ingest.errors import ConfigError, FitsFormatError, IngestError, RegionError
from ingest.formats.fits import BLOCK_BYTES, FitsLayout
from ingest.redact import redact_url

_AXIS_LETTERS = ("x", "y", "z", "s")  # FITS axes 1..4
_TMP_MARK = ".tmp-"
_WRITE_BYTES = 64 * 1024 * 1024  # bounded writes: some filesystems and libcs cap one write(2) near 2 GiB
# A WCS keyword that lets a reader compute world coordinates; if none is present we do not
# invent a CRPIX (a header without a WCS should stay without one).
_WCS_KEY = re.compile(r"^(CTYPE|CRVAL|CDELT|CUNIT|CD\d+_\d+|PC\d+_\d+)\d*[A-Z]?$")
# Keywords whose values describe the original HDU's bytes and would be wrong for ours.
_STALE_KEYS = ("CHECKSUM", "DATASUM")
# Keywords that only make sense in an extension.
_EXTENSION_ONLY = ("XTENSION", "PCOUNT", "GCOUNT", "INHERIT")
# Cards a cut-out's writer owns: they describe its bytes, its extensions or its values' scaling.
_WRITER_KEYS = ("SIMPLE", "XTENSION", "BITPIX", "NAXIS", "EXTEND", "PCOUNT", "GCOUNT", "BSCALE", "BZERO", "BLANK",
                "CASAMBM", "CHECKSUM", "DATASUM", "END")


def _check_box(box, shape: tuple[int, ...], what: str) -> tuple[tuple[int, int], ...]:
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


def output_name(rank: int, box, ext: str = ".fits") -> str:
    """File name for `rank`'s `box` (numpy-order half-open pairs); see the module docstring.
    `ext`: the source's format (".fits", or ".h5" for an HDF5 source)."""
    pairs = [(int(a), int(b)) for a, b in box]
    if not 1 <= len(pairs) <= len(_AXIS_LETTERS):
        raise RegionError(f"output name: box {box!r} has {len(pairs)} axes; 1 to 4 are supported")
    if int(rank) < 0:
        raise RegionError(f"output name: rank {rank} must be >= 0")
    parts = [f"rank{int(rank):04d}"]
    for letter, (start, stop) in zip(_AXIS_LETTERS, reversed(pairs)):
        parts.append(f"{letter}{start}-{stop}")
    return "_".join(parts) + ext


_OUTPUT_NAME = re.compile(r"rank(\d{4,})((?:_[xyzs]\d+-\d+)+)\.(fits|h5)")


def parse_output_name(name: str) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """(rank, box in numpy order) from an `output_name`, or None when `name` is not one."""
    match = _OUTPUT_NAME.fullmatch(name)
    if match is None:
        return None
    spans = re.findall(r"_([xyzs])(\d+)-(\d+)", match.group(2))
    if [letter for letter, _, _ in spans] != list(_AXIS_LETTERS[:len(spans)]):
        return None
    return int(match.group(1)), tuple((int(a), int(b)) for _, a, b in reversed(spans))


def output_ext(layout) -> str:
    """Outputs follow the source's format."""
    return ".h5" if layout.kind == "hdf5" else ".fits"


def _source_label(layout: FitsLayout) -> str:
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
    what = f"{_source_label(layout)} HDU {layout.hdu}"
    if not layout.header_text:
        raise FitsFormatError(f"{what}: layout carries no header text; cannot write a subcube header")
    pairs = _check_box(box, layout.shape, what)
    ndim = len(layout.shape)
    header = as_primary(_parsed_header(layout.header_text).copy(), ndim)

    has_wcs = any(_WCS_KEY.match(key) for key in header.keys())
    for n in range(1, ndim + 1):
        start, stop = pairs[ndim - n]
        header[f"NAXIS{n}"] = stop - start
        if start == 0:
            continue
        primary_present = f"CRPIX{n}" in header
        for key in list(header.keys()):
            if re.fullmatch(rf"CRPIX{n}[A-Z]?", key):  # the primary WCS and every alternate one
                header[key] = float(header[key]) - start
            elif key == f"LTV{n}":  # IRAF: logical = physical * LTM + LTV
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


def _tmp_path(final_path: str) -> str:
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f".{name}{_TMP_MARK}{os.getpid()}")


def write_subcube(out_dir, rank: int, box, raw: np.ndarray, layout: FitsLayout) -> str:
    """Write `raw` (RAW stored values, layout.raw_dtype, shape = box extents) as a file named by
    `output_name` in `out_dir` with `write_cutout`; returns the final path. An HDF5 source's region
    is written as HDF5 (ingest.outputs.h5files)."""
    pairs = _check_box(box, layout.shape, f"rank {rank} output")
    final_path = os.path.join(os.fspath(out_dir), output_name(rank, pairs, output_ext(layout)))
    write_cutout(final_path, pairs, raw, layout)
    return final_path


def cutout_parts(layout: FitsLayout, box, *, object_name: str | None = None, extra_cards=None) -> tuple[bytes, bytes]:
    """(head, tail) of `box`'s FITS cut-out: the header (whole blocks, END included) that goes before
    the data, and what follows the padded data (the BEAMS table cut to the box's channels and
    polarisations, or nothing when the cube has none)."""
    header = subcube_header(layout, box, object_name=object_name, extra_cards=extra_cards)
    beams = layout.box_beams(_check_box(box, layout.shape, f"{_source_label(layout)} HDU {layout.hdu}"))
    return header.tostring().encode("ascii"), (beams.to_bytes() if beams is not None else b"")


def write_cutout(path, box, raw: np.ndarray, layout: FitsLayout, *, object_name: str | None = None,
                 extra_cards=None, batch=None, headers=None) -> int:
    """Write `box` (numpy-order pairs) of the cube, `raw` (its RAW stored values, layout.raw_dtype,
    shape = box extents), as one FITS file at `path`: header (CRPIXn shifted, OBJECT =
    `object_name` when given, `extra_cards` added), data, then the BEAMS table cut to the box when
    the cube has one. Atomic: a temporary name beside `path`, fsync, rename; an exception leaves
    nothing at `path` (an old file there stays whole). With `batch` (ingest.atomic.DurableBatch) the
    file waits under its temporary name until the batch is published, with many others, by one
    sync. `headers` (ingest.outputs.cutout_headers.CutoutHeaders of this cube) makes the header by
    patching cards, for many cut-outs (not with extra_cards). Returns the bytes written. An HDF5
    source's box is written as HDF5, OBJECT and the extra cards as attributes."""
    path = os.fspath(path)
    pairs = _check_box(box, layout.shape, path)
    extents = tuple(b - a for a, b in pairs)
    raw = np.asarray(raw)
    if raw.shape != extents:
        raise IngestError(f"{path}: data shape {raw.shape} does not match box extents {extents}")
    if layout.kind == "hdf5":
        from ingest.outputs.h5files import write_h5_subcube

        extra = {key: value for key, value, _ in _card_list(extra_cards)}
        extra.update({} if object_name is None else {"OBJECT": str(object_name)})
        write_h5_subcube(path, layout, pairs, raw, source_label=_source_label(layout), extra_attrs=extra)
        return os.path.getsize(path)
    want = layout.raw_dtype
    if raw.dtype.kind != want.kind or raw.dtype.itemsize != want.itemsize:
        raise IngestError(f"{path}: data dtype {raw.dtype} is not the stored dtype {want} "
                          f"(BITPIX {layout.bitpix}); pass raw values, not scaled ones")
    if headers is not None and extra_cards is None:
        beams = layout.box_beams(pairs)
        head, tail = headers.head(pairs, object_name), (beams.to_bytes() if beams is not None else b"")
    else:
        head, tail = cutout_parts(layout, pairs, object_name=object_name, extra_cards=extra_cards)
    data = np.ascontiguousarray(raw, dtype=want)  # big-endian, C order: the FITS byte stream
    padding = b"\0" * (-data.nbytes % BLOCK_BYTES)  # data padding is zeros (FITS 3.3.2)
    # The temp name holds our pid: a file already there is a dead process's leftover (pid
    # reuse) and safe to overwrite.
    writer = atomic_write if batch is None else batch.write
    with writer(path, _tmp_path(path)) as fh:
        fh.write(head)
        flat = data.reshape(-1).view(np.uint8)  # a view: a 30 GiB subcube is not copied
        for start in range(0, flat.size, _WRITE_BYTES):
            fh.write(flat[start : start + _WRITE_BYTES])
        fh.write(padding)
        fh.write(tail)
    return len(head) + data.nbytes + len(padding) + len(tail)


def _is_output(name: str) -> bool:
    return name.startswith("rank") and name.endswith((".fits", ".h5"))


def _tmp_target(name: str) -> str | None:
    """For '.rank...fits.tmp-PID' the final name it was going to become, else None."""
    if not name.startswith(".rank"):
        return None
    target, mark, pid = name[1:].rpartition(_TMP_MARK)
    return target if mark and pid.isdigit() and _is_output(target) else None


def check_output_dir(out_dir, expected_names) -> None:
    """Make `out_dir` ready for this run's `expected_names` (from `output_name`), or refuse.

    Creates it if missing. Raises IngestError naming the directory and some of the files when it
    holds `rank*.fits` outputs (or their temporary files) that this run would not write: they come
    from another run with another grid, and mixing the two would hand the pipeline a wrong cube.
    Temporary files for this run's own names are leftovers of a crashed run and are removed.
    Call it once (rank 0) before any rank writes, then barrier: it would delete a live rank's
    temporary file.
    """
    out_dir = os.fspath(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        names = os.listdir(out_dir)
    except FileExistsError:
        raise IngestError(f"output dir {out_dir}: exists and is not a directory") from None
    except OSError as exc:
        raise IngestError(f"output dir {out_dir}: cannot create or list it ({exc.strerror or exc})") from None
    expected = set(expected_names)
    stray, leftovers = [], []
    for name in sorted(names):
        target = _tmp_target(name)
        if target is not None:
            (leftovers if target in expected else stray).append(name)
        elif _is_output(name) and name not in expected:
            stray.append(name)
    if stray:
        shown = ", ".join(stray[:5]) + (f", ... ({len(stray) - 5} more)" if len(stray) > 5 else "")
        raise IngestError(
            f"output dir {out_dir}: holds {len(stray)} rank*.fits file(s) this run would not write "
            f"(another run or grid): {shown}; empty the directory or choose another --output-dir"
        )
    for name in leftovers:
        try:
            os.unlink(os.path.join(out_dir, name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            print(f"ingest: warning: cannot remove leftover {name} in {out_dir}: {exc}", file=sys.stderr)
