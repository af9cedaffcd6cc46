"""FITS cut-outs other tools trust: each rank's subcube (`write_subcube`, run --output-dir) and a
named cut-out (`write_cutout`, one writer for both) as a standalone, valid FITS file.

File naming (`output_name`)
    rank{RANK:04d}_x{X0}-{X1}_y{Y0}-{Y1}_z{Z0}-{Z1}[_s{S0}-{S1}].fits
  e.g. rank0003_x0-100_y50-100_z0-30.fits. The box is written in FITS axis order: x is NAXIS1
  (the last, fastest numpy axis), then y, z, and s for a 4th axis (whatever its CTYPE). Ranges
  are 0-based, half-open pixel ranges of the ORIGINAL cube, so x0-100 is FITS pixels 1..100.
  A 1-D cube gives only x, a 2-D one x and y. Names sort by rank.

Values, world coordinates and the BEAMS table: ingest.formats.fits_cutout makes every FITS
cut-out's bytes (the RAW stored values with the original BITPIX, BSCALE, BZERO and BLANK; every
CRPIXn moved by the box start; the BEAMS table cut to the box), here and in the Python API's
`cube.cutout(...).writeto(path)` alike.

Atomicity: a file is written under a hidden temporary name in the same directory, fsynced,
then renamed, so a file with the final name is always complete; a crash leaves at most a
`.rank....fits.tmp-PID` file, which `check_output_dir` clears on the next run of that grid.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np

from ingest.atomic import atomic_write
from ingest.errors import IngestError, RegionError
from ingest.formats.fits import FitsLayout
# The FITS cut-out's bytes are made in ingest.formats.fits_cutout (the Python API writes with it
# too); these names stay importable from here for the writers above this layer.
from ingest.formats.fits_cutout import (_AXIS_LETTERS, NOT_FITS_TEXT, as_primary, card_error,  # noqa: F401
                                        check_box as _check_box, cutout_data, cutout_parts, fits_text,
                                        source_label as _source_label, subcube_header, write_fits_cutout,
                                        _card_list)

_TMP_MARK = ".tmp-"


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


def _tmp_path(final_path: str) -> str:
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f".{name}{_TMP_MARK}{os.getpid()}")


def write_subcube(out_dir, rank: int, box, raw: np.ndarray, layout: FitsLayout) -> str:
    """Write `raw` (RAW stored values, layout.raw_dtype, shape = box extents) as a file named by
    `output_name` in `out_dir` with `write_cutout`; returns the final path. An HDF5 source's region
    is written as HDF5 (ingest.formats.h5_cutout)."""
    pairs = _check_box(box, layout.shape, f"rank {rank} output")
    final_path = os.path.join(os.fspath(out_dir), output_name(rank, pairs, output_ext(layout)))
    write_cutout(final_path, pairs, raw, layout)
    return final_path



def write_cutout(path, box, raw: np.ndarray, layout: FitsLayout, *, object_name: str | None = None,
                 extra_cards=None, batch=None, headers=None) -> int:
    """Write `box` (numpy-order pairs) of the cube, `raw` (its RAW stored values, layout.raw_dtype,
    shape = box extents), as one FITS file at `path`: header (CRPIXn shifted, OBJECT =
    `object_name` when given, `extra_cards` added), data, then the BEAMS table cut to the box when
    the cube has one. Atomic: a temporary name beside `path`, fsync, rename; an exception leaves
    nothing at `path` (an old file there stays whole). With `batch` (ingest.atomic.DurableBatch) the
    file waits under its temporary name until the batch is published, with many others, by one
    sync. `headers` (ingest.outputs.cutout_headers.CutoutHeaders of this cube) makes the header and
    the BEAMS table by patching cards, for many cut-outs (not with extra_cards). Returns the bytes
    written. An HDF5 source's box is written as HDF5, OBJECT and the extra cards as attributes."""
    path = os.fspath(path)
    pairs = _check_box(box, layout.shape, path)
    extents = tuple(b - a for a, b in pairs)
    raw = np.asarray(raw)
    if raw.shape != extents:
        raise IngestError(f"{path}: data shape {raw.shape} does not match box extents {extents}")
    if layout.kind == "hdf5":
        from ingest.formats.h5_cutout import write_h5_subcube

        extra = {key: value for key, value, _ in _card_list(extra_cards)}
        extra.update({} if object_name is None else {"OBJECT": str(object_name)})
        write_h5_subcube(path, layout, pairs, raw, source_label=_source_label(layout), extra_attrs=extra)
        return os.path.getsize(path)
    data = cutout_data(path, raw, layout)
    if headers is not None and extra_cards is None:
        head, tail = headers.head(pairs, object_name), headers.tail(pairs)
    else:
        head, tail = cutout_parts(layout, pairs, object_name=object_name, extra_cards=extra_cards)
    # The temp name holds our pid: a file already there is a dead process's leftover (pid
    # reuse) and safe to overwrite.
    writer = atomic_write if batch is None else batch.write
    with writer(path, _tmp_path(path)) as fh:
        written = write_fits_cutout(fh, head, data, tail)
    return written


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
