"""Per-rank FITS outputs for the pipeline: each rank's subcube as a standalone, valid FITS file.

File naming (`output_name`)
    rank{RANK:04d}_x{X0}-{X1}_y{Y0}-{Y1}_z{Z0}-{Z1}[_s{S0}-{S1}].fits
  e.g. rank0003_x0-100_y50-100_z0-30.fits. The box is written in FITS axis order: x is NAXIS1
  (the last, fastest numpy axis), then y, z, and s for a 4th axis (whatever its CTYPE). Ranges
  are 0-based, half-open pixel ranges of the ORIGINAL cube, so x0-100 is FITS pixels 1..100.
  A 1-D cube gives only x, a 2-D one x and y. Names sort by rank.

Values: the RAW stored values are copied with the original BITPIX, BSCALE, BZERO and BLANK,
so astropy returns exactly the physical values it would return for the same box of the
original — no rescaling, no float round trip.

Atomicity: a file is written under a hidden temporary name in the same directory, fsynced,
then renamed, so a file with the final name is always complete; a crash leaves at most a
`.rank....fits.tmp-PID` file, which `check_output_dir` clears on the next run of that grid.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
from astropy.io import fits

from ingest.atomic import atomic_write
from ingest.errors import FitsFormatError, IngestError, RegionError
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


def subcube_header(layout: FitsLayout, box) -> fits.Header:
    """Primary header for `box` (numpy-order pairs) of the HDU `layout` describes.

    NAXISn become the box's extents and every CRPIXn (alternate WCS CRPIXna and IRAF LTVn
    too) moves by the box start along FITS axis n (= numpy axis ndim - n), so pixel (1, 1, 1)
    of the output has the world coordinates of the box's first pixel. BITPIX, BSCALE, BZERO,
    BLANK are kept. An IMAGE extension becomes a primary HDU: XTENSION -> SIMPLE = T and
    PCOUNT, GCOUNT and INHERIT are dropped (keywords the extension inherited from its primary
    header are not in `layout.header_text` and so are not carried).
    """
    what = f"{_source_label(layout)} HDU {layout.hdu}"
    if not layout.header_text:
        raise FitsFormatError(f"{what}: layout carries no header text; cannot write a subcube header")
    pairs = _check_box(box, layout.shape, what)
    ndim = len(layout.shape)
    header = as_primary(fits.Header.fromstring(layout.header_text), ndim)

    has_wcs = any(_WCS_KEY.match(key) for key in header.keys())
    for n in range(1, ndim + 1):
        start, stop = pairs[ndim - n]
        header[f"NAXIS{n}"] = stop - start
        if start == 0:
            continue
        shifted = False
        for key in list(header.keys()):
            if re.fullmatch(rf"CRPIX{n}[A-Z]?", key):
                header[key] = float(header[key]) - start
                shifted = True
            elif key == f"LTV{n}":  # IRAF: logical = physical * LTM + LTV
                header[key] = float(header[key]) - start
        if not shifted and has_wcs:
            # The WCS default is CRPIXn = 0; an explicit card keeps the box's WCS right.
            header.set(f"CRPIX{n}", 0.0 - start, "reference pixel, shifted to this box")

    box_text = " ".join(f"{letter}={a}:{b}" for letter, (a, b) in zip(_AXIS_LETTERS, reversed(pairs)))
    header.add_history(f"ingest: subcube {box_text} (0-based, half-open, FITS axis order) "
                       f"of {what}; CRPIXn shifted by the box start")
    return header


def _tmp_path(final_path: str) -> str:
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f".{name}{_TMP_MARK}{os.getpid()}")


def write_subcube(out_dir, rank: int, box, raw: np.ndarray, layout: FitsLayout) -> str:
    """Write `raw` (RAW stored values, layout.raw_dtype, shape = box extents) as a FITS file named
    by `output_name` in `out_dir`, atomically (temp name, fsync, rename); returns the final path.
    An HDF5 source's region is written as HDF5 (ingest.outputs.h5files)."""
    if layout.kind == "hdf5":
        from ingest.outputs.h5files import write_h5_subcube

        pairs = _check_box(box, layout.shape, f"rank {rank} output")
        final_path = os.path.join(os.fspath(out_dir), output_name(rank, pairs, ".h5"))
        write_h5_subcube(final_path, layout, pairs, np.asarray(raw), source_label=_source_label(layout))
        return final_path
    header = subcube_header(layout, box)  # also checks the box against the cube
    pairs = _check_box(box, layout.shape, f"rank {rank} output")
    extents = tuple(b - a for a, b in pairs)
    raw = np.asarray(raw)
    if raw.shape != extents:
        raise IngestError(f"rank {rank} output: data shape {raw.shape} does not match box extents {extents}")
    want = layout.raw_dtype
    if raw.dtype.kind != want.kind or raw.dtype.itemsize != want.itemsize:
        raise IngestError(f"rank {rank} output: data dtype {raw.dtype} is not the stored dtype {want} "
                          f"(BITPIX {layout.bitpix}); pass raw values, not scaled ones")
    data = np.ascontiguousarray(raw, dtype=want)  # big-endian, C order: the FITS byte stream

    out_dir = os.fspath(out_dir)
    final_path = os.path.join(out_dir, output_name(rank, pairs))
    tmp = _tmp_path(final_path)
    head = header.tostring().encode("ascii")  # whole blocks, END included
    # The temp name holds our pid: a file already there is a dead process's leftover (pid
    # reuse) and safe to overwrite.
    with atomic_write(final_path, tmp) as fh:
        fh.write(head)
        flat = data.reshape(-1).view(np.uint8)  # a view: a 30 GiB subcube is not copied
        for start in range(0, flat.size, _WRITE_BYTES):
            fh.write(flat[start : start + _WRITE_BYTES])
        fh.write(b"\0" * (-data.nbytes % BLOCK_BYTES))  # data padding is zeros (FITS 3.3.2)
    return final_path


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
