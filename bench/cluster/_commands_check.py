"""bench/cluster/commands.py's exactness checks: what each command wrote, against the cube it read.

Every check returns None when the output is exact and otherwise the first difference in words
(a cell records it and the bench goes on). Values compare as their stored bits (big-endian,
whatever byte order numpy holds them in), so a NaN equals itself and -0.0 differs from 0.0;
files and objects compare byte for byte, by SHA-256.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

READ_CHUNK_BYTES = 1 << 20  # an object's body is hashed as it streams, never held whole


def bits(values: np.ndarray) -> np.ndarray:
    """The values' bytes, big-endian whatever the array's byte order: equal bits, not just equal values."""
    return np.ascontiguousarray(values, dtype=values.dtype.newbyteorder(">")).view(np.uint8)


def _fits(path: str):
    from astropy.io import fits

    # The stored values, unscaled: the comparison is of what the files hold, not of astropy's floats.
    return fits.open(path, memmap=True, do_not_scale_image_data=True)


def check_boxes(cube_path: str, pieces, *, cover: bool = False) -> str | None:
    """Each (box, path) of `pieces` (box: numpy-order [start, stop) pairs) must hold exactly the
    cube's values in its box; with `cover`, the boxes together must reach every voxel (a job that
    splits the whole cube must leave none out)."""
    with _fits(cube_path) as cube_hdul:
        cube = cube_hdul[0].data
        seen = np.zeros(cube.shape, bool) if cover else None
        for box, path in pieces:
            where = tuple(slice(a, b) for a, b in box)
            want = cube[where]
            with _fits(path) as hdul:
                got = hdul[0].data
                if got is None or got.shape != want.shape:
                    shape = None if got is None else got.shape
                    return f"{os.path.basename(path)}: shape {shape}, its box {box} is {want.shape}"
                wrong = np.flatnonzero(bits(got) != bits(want))
            if wrong.size:
                voxel = np.unravel_index(wrong[0] // want.dtype.itemsize, want.shape)
                at = tuple(int(a + v) for (a, _), v in zip(box, voxel))
                return f"{os.path.basename(path)}: voxel {at} (numpy order) differs from the cube's"
            if seen is not None:
                seen[where] = True
        if seen is not None and not seen.all():
            missing = tuple(int(v) for v in np.argwhere(~seen)[0])
            return f"voxel {missing} (numpy order) is in no output file"
    return None


def run_pieces(report: dict) -> list[tuple]:
    """(box, path) of every region a `run --output-dir` report says was written. A rank's
    output_path is one path (one region: its record's box) or a list in the order of the region
    indices its record lists; each region's box is in the report's regions."""
    boxes = {r["index"]: r["box"] for r in report.get("regions") or []}
    pieces = []
    for rank in report["ranks"]:
        paths = rank.get("output_path")
        paths = [] if paths is None else [paths] if isinstance(paths, str) else list(paths)
        indices = rank.get("regions") or []
        if len(paths) != len(indices):
            raise ValueError(f"rank {rank['rank']}: {len(paths)} output file(s) for {len(indices)} region(s)")
        pieces += [(boxes[i], path) for i, path in zip(indices, paths)]
    return pieces


def check_run(report: dict, cube_path: str) -> str | None:
    """A `run --output-dir` of the whole cube (a grid or s2p regions): every file exact, every voxel written."""
    try:
        pieces = run_pieces(report)
    except (KeyError, ValueError) as exc:
        return f"the report does not locate its outputs: {exc}"
    return check_boxes(cube_path, pieces, cover=True)


def file_digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def same_bytes(path: str, reference: str) -> str | None:
    """`path` must be `reference` byte for byte."""
    size, ref_size = os.path.getsize(path), os.path.getsize(reference)
    if size != ref_size:
        return f"{os.path.basename(path)}: {size} bytes, the cube {ref_size}"
    if file_digest(path) != file_digest(reference):
        return f"{os.path.basename(path)}: same size as the cube, different bytes"
    return None


def stream_digest(chunks) -> tuple[str, int]:
    """(SHA-256, byte count) of an iterable of byte strings (an object's body as it arrives)."""
    digest, n_bytes = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        n_bytes += len(chunk)
    return digest.hexdigest(), n_bytes


def check_prestage(manifest_path: str, cube_path: str) -> str | None:
    """A pre-stage as its manifest says it wrote it: every region done; a frame layout's file is the
    cube byte for byte (the source's header verbatim, each region's bytes at its object offsets);
    a subcubes layout's files each hold their region's values, the regions covering the cube."""
    with open(manifest_path) as fh:
        manifest = json.load(fh)
    regions = manifest["regions"]
    undone = [r["index"] for r in regions if r.get("status") != "done"]
    if undone or not regions:
        return f"manifest: region(s) {undone[:5]} not done" if undone else "manifest: no regions"
    here = os.path.dirname(os.path.abspath(manifest_path))

    def located(path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(here, os.path.basename(path))

    if manifest["layout"] == "frame":
        for path in sorted({located(r["files"]["data"]) for r in regions}):
            problem = same_bytes(path, cube_path)
            if problem:
                return problem
        return None
    if manifest["layout"] == "subcubes":
        return check_boxes(cube_path, [(r["box"], located(r["files"]["data"])) for r in regions], cover=True)
    return f"layout {manifest['layout']!r}: this bench checks frame and subcubes only"


def check_cutouts(out_dir: str, cube_path: str, n_sources: int) -> str | None:
    """A `cutouts --output-dir`: manifest.json lists all n_sources sources cut (the bench's
    catalogue centres every source inside the cube, so none may be skipped), each file exact."""
    with open(os.path.join(out_dir, "manifest.json")) as fh:
        manifest = json.load(fh)
    done = [e for e in manifest["sources"] if e["status"] == "done"]
    if len(done) != n_sources or len(manifest["sources"]) != n_sources:
        return f"manifest: {len(done)} of {n_sources} sources cut ({len(manifest['sources'])} listed)"
    return check_boxes(cube_path, [(e["box"], os.path.join(out_dir, e["file"])) for e in done])
