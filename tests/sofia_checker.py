#!/usr/bin/env python3
"""Stand-in for SoFiA-2's `sofia` executable in tests: `python sofia_checker.py PARFILE`.

It reads the parameter file as SoFiA-2 does, reads input.region (0-based, both ends inclusive,
x = NAXIS1; empty = the whole cube) of input.data and of each companion that is set
(input.weights, input.noise, input.mask, input.gain) from their primary HDUs, and compares the
stored bytes with the same region of the ORIGINAL cubes named by SOFIA_CHECK_ORIGINAL_DATA,
SOFIA_CHECK_ORIGINAL_WEIGHTS, ... Optional SOFIA_CHECK_ORIGINAL_OFFSET = "x, y, z": where pixel
(0, 0, 0) of the staged files lies in the originals (a cut-out); default 0, 0, 0.

Success: writes {output.directory}/{output.filename}_check.json and exits 0 (and, with
SOFIA_CHECK_WRITE_MASK set, {output.filename}_mask.fits: the region's shape, int32, every voxel
the parameter file's number NNN). Any mismatch or error: a message on stderr, exit 1. Needs only numpy and astropy (it stands in for a foreign
program, so it must not share ingest's code or its mistakes).

Parsing as SoFiA-2 (src/Parameter.c, sofia.c, src/DataCube.c): lines trimmed of C whitespace;
empty lines and lines not starting with a letter or digit skipped; key before the first '=',
value after it up to the next '#'; a later duplicate wins. Relative paths are opened from the
current directory (plain fopen). 4-D cubes need NAXIS4 = 1, or NAXIS3 = 1 (then z = NAXIS4).
Stricter than SoFiA-2 where SoFiA-2 would hide a staging bug: a region outside the cube is an
error here (SoFiA-2 clips it silently).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np
from astropy.io import fits

COMPANIONS = ("input.weights", "input.noise", "input.mask", "input.gain")
SCALING_KEYS = (("BITPIX", None), ("BSCALE", 1.0), ("BZERO", 0.0), ("BLANK", None))
_WS = " \t\n\v\f\r"
_MAX_LINE_BYTES = 1022  # fgets into SoFiA-2's 1024-byte line buffer


class CheckError(Exception):
    """A mismatch or a problem SoFiA-2 would also have."""


def read_par(path: str) -> dict[str, str]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise CheckError(f"{path}: cannot read the parameter file ({exc.strerror or exc})") from None
    params: dict[str, str] = {}
    for number, line in enumerate(raw.split(b"\n"), 1):
        if len(line) > _MAX_LINE_BYTES:
            raise CheckError(f"{path} line {number}: {len(line)} bytes; SoFiA-2 would split it")
        text = line.decode("utf-8", "surrogateescape").strip(_WS)
        if not text or not (text[0].isascii() and text[0].isalnum()):
            continue
        key, _, rest = text.partition("=")
        params[key.strip(_WS)] = rest.lstrip("#").split("#", 1)[0].strip(_WS)
    return params


def parse_triplet(text: str, count: int, what: str) -> list[int]:
    tokens = text.split(",")
    try:
        values = [int(t.strip(_WS)) for t in tokens]
    except ValueError:
        values = []
    if len(tokens) != count or len(values) != count or min(values) < 0:
        raise CheckError(f"{what} = {text!r}: need {count} comma-separated non-negative integers")
    return values


def geometry(hdu, path: str) -> tuple[tuple[int, int, int], int | None]:
    """(nx, ny, nz) as SoFiA-2 sees the cube, and which numpy axis of a 4-D cube is z."""
    shape = hdu.shape
    if len(shape) == 3:
        return (shape[2], shape[1], shape[0]), None
    if len(shape) == 4 and (shape[0] == 1 or shape[1] == 1):
        z_axis = 1 if shape[0] == 1 else 0  # NAXIS3 = 1 < NAXIS4: SoFiA-2 swaps the two
        return (shape[3], shape[2], shape[z_axis]), z_axis
    raise CheckError(f"{path}: primary HDU shape {shape}; need 3 axes, or 4 with NAXIS3 or NAXIS4 = 1")


def read_region(path: str, region: list[int] | None, what: str):
    """Stored bytes (big-endian, C order) of `region` (None: whole cube), with header facts."""
    try:
        hdul = fits.open(path, memmap=True, do_not_scale_image_data=True)
    except (OSError, ValueError) as exc:
        raise CheckError(f"{what} {path}: cannot open as FITS ({exc})") from None
    with hdul:
        hdu = hdul[0]
        (nx, ny, nz), z_axis = geometry(hdu, path)
        x0, x1, y0, y1, z0, z1 = region if region is not None else (0, nx - 1, 0, ny - 1, 0, nz - 1)
        for lo, hi, n, axis in ((x0, x1, nx, "x"), (y0, y1, ny, "y"), (z0, z1, nz, "z")):
            if lo > hi or hi >= n:
                raise CheckError(f"{what} {path}: region {axis} {lo}..{hi} is empty or outside "
                                 f"0..{n - 1} (SoFiA-2 would clip it silently)")
        index = [slice(z0, z1 + 1), slice(y0, y1 + 1), slice(x0, x1 + 1)]
        if z_axis is not None:
            index.insert(1 - z_axis, slice(0, 1))
        data = np.asarray(hdu.section[tuple(index)])
        data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder(">"))
        data = data.reshape(z1 - z0 + 1, y1 - y0 + 1, x1 - x0 + 1)  # 4-D: drop the size-1 axis
        header = {key: hdu.header.get(key, default) for key, default in SCALING_KEYS}
    return data, header, [x0, x1, y0, y1, z0, z1]


def compare(key: str, path: str, original: str, region, offset) -> dict:
    what = key
    staged, staged_header, bounds = read_region(path, region, what)  # bounds: region, or whole cube
    shifted = [b + offset[i // 2] for i, b in enumerate(bounds)]
    orig, orig_header, _ = read_region(original, shifted, f"{what} original")
    if staged_header != orig_header:
        raise CheckError(f"{what} {path}: BITPIX/BSCALE/BZERO/BLANK {staged_header} differ from the "
                         f"original {original} {orig_header}")
    if staged.shape != orig.shape or staged.dtype != orig.dtype:
        raise CheckError(f"{what} {path}: region {bounds} reads shape {staged.shape} {staged.dtype}, "
                         f"the original {original} {orig.shape} {orig.dtype}")
    a, b = staged.reshape(-1).view(np.uint8), orig.reshape(-1).view(np.uint8)
    differ = np.flatnonzero(a != b)
    if differ.size:
        local = np.unravel_index(differ[0] // staged.itemsize, staged.shape)
        z, y, x = (int(c) + s for c, s in zip(local, (bounds[4], bounds[2], bounds[0])))
        raise CheckError(f"{what} {path}: {differ.size} byte(s) of region {bounds} differ from the "
                         f"original {original}; first at pixel x={x}, y={y}, z={z} (0-based)")
    return {"key": key, "file": os.path.abspath(path), "original": os.path.abspath(original),
            "region": bounds, "region_in_original": shifted, "shape": list(staged.shape),
            "bitpix": staged_header["BITPIX"], "sha256": hashlib.sha256(staged.tobytes()).hexdigest()}


def output_path(params: dict[str, str], data_path: str) -> str:
    """Where SoFiA-2 puts `{name}_check.json`: output.directory (empty: the input's directory)
    and output.filename (empty: the input's name) with a .fits/.fit ending removed."""
    directory = params.get("output.directory") or os.path.dirname(data_path) or "."
    name = params.get("output.filename") or os.path.basename(data_path)
    if not name.lower().endswith((".fits", ".fit")):
        name += ".fits"
    if not os.path.isdir(directory):
        raise CheckError(f"output.directory {directory}: does not exist (SoFiA-2 does not create it)")
    return os.path.join(directory, name.rsplit(".", 1)[0] + "_check.json")


def check(par_path: str, environ) -> str:
    params = read_par(par_path)
    data_path = params.get("input.data", "")
    if not data_path:
        raise CheckError(f"{par_path}: input.data is empty or missing")
    region_text = params.get("input.region", "")
    region = parse_triplet(region_text, 6, "input.region") if region_text else None
    offset_text = environ.get("SOFIA_CHECK_ORIGINAL_OFFSET", "")
    offset = parse_triplet(offset_text, 3, "SOFIA_CHECK_ORIGINAL_OFFSET") if offset_text else [0, 0, 0]
    checked = []
    for key in ("input.data",) + COMPANIONS:
        variable = "SOFIA_CHECK_ORIGINAL_" + key.split(".", 1)[1].upper()
        path, original = params.get(key, ""), environ.get(variable, "")
        if bool(path) != bool(original):
            raise CheckError(f"{par_path}: {key} = {path!r} but {variable} = {original!r}; "
                             "set both or neither")
        if path:
            checked.append(compare(key, path, original, region, offset))
    out = output_path(params, data_path)
    report = {"parameter_file": os.path.abspath(par_path), "input.region": region_text,
              "offset_in_original": offset, "checked": checked}
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    os.replace(tmp, out)
    if environ.get("SOFIA_CHECK_WRITE_MASK"):
        write_mask(out[:-len("_check.json")] + "_mask.fits", data_path, region)
    return out


def write_mask(path: str, data_path: str, region) -> None:
    """As SoFiA-2 writes {output.filename}_mask.fits: int32, the region's shape. Every voxel holds
    the parameter file's number NNN (from the name), so a merged mask shows which region wrote it."""
    if region is None:
        shape = fits.getdata(data_path).shape
    else:
        x0, x1, y0, y1, z0, z1 = region
        shape = (z1 - z0 + 1, y1 - y0 + 1, x1 - x0 + 1)
    number = int(os.path.basename(path)[:-len("_mask.fits")].rsplit("_", 1)[-1])
    fits.PrimaryHDU(np.full(shape, number, dtype=">i4")).writeto(path, overwrite=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: sofia_checker.py PARFILE", file=sys.stderr)
        return 1
    try:
        out = check(argv[1], os.environ)
    except CheckError as exc:
        print(f"sofia_checker: ERROR: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a stand-in must fail loudly, never pass by accident
        print(f"sofia_checker: ERROR: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"sofia_checker: OK, wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
