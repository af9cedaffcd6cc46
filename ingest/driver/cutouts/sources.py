"""From a catalogue to the pixel box of every source's cut-out (rank 0, before any data moves).

Sources with world coordinates go through the cube's WCS (`ingest.sky.pixels`); sources with
SoFiA-2's bounding box keep it, grown by the margin. Either way the box is clipped to the cube
(the source says so) and a source with no pixel in the cube, or with bad coordinates, is kept as
skipped with its reason: one bad row is not a failed job.

Each source with a box carries its request (`Requests.digest`): a short digest of the canonical
JSON of everything that decides its file's bytes: the cube's identity, HDU or dataset, the output
format and extension, the size rule, the catalogue's frame and velocity convention, the rest
frequency, and the source's own name (its OBJECT card), pixel box and world region as resolved. Its
manifest and journal entries record it, and a re-run keeps a file only for the same request.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ingest.config import RunConfig
from ingest.errors import ConfigError


@dataclass(frozen=True)
class CutoutSource:
    """One row of the catalogue and the box it is cut as (None: skipped, `skip_reason` says why)."""

    name: str
    file_stem: str
    row: int
    box: tuple | None  # numpy order, half-open, inside the cube
    clipped: tuple = ()  # axes the box was clipped on ("x", "y", "z", or sky/spectral names)
    skip_reason: str | None = None
    region_text: str = ""
    request: str | None = None  # digest of what made the file (Requests.digest); None: not recorded

    def entry(self, file: str | None, nbytes: int, crc32: int | None, **extra) -> dict:
        """This source's line of manifest.json."""
        if self.box is None:
            return {"name": self.name, "row": self.row, "status": "skipped", "reason": self.skip_reason,
                    "region": self.region_text}
        return {"name": self.name, "row": self.row, "status": "done", "file": file, "bytes": nbytes, "crc32": crc32,
                "box": [list(p) for p in self.box], "clipped": list(self.clipped), "region": self.region_text,
                "request": self.request, **extra}


REQUEST_DIGEST_CHARS = 16  # 64 bits of SHA-256: no two requests of one output directory collide


class Requests:
    """The request each source's file is made from: `fields`, the job's part (the same for every
    source, as the manifest's head records it), and per source its name, box and region text."""

    def __init__(self, fields: dict):
        self.fields = fields
        self._text = _canonical(fields)  # once: ten thousand sources share it

    def digest(self, name: str, box, region_text: str) -> str:
        """This source's request, as a short hex digest (the manifest's `request`)."""
        text = self._text + _canonical([name, [list(p) for p in box], region_text])
        return hashlib.sha256(text.encode()).hexdigest()[:REQUEST_DIGEST_CHARS]


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def parse_columns(text: str | None) -> dict:
    """`ra=RAJ2000,dec=DEJ2000` -> {"ra": "RAJ2000", "dec": "DEJ2000"}."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"columns: {part!r} in {text!r} is not ROLE=COLUMN (e.g. ra=RAJ2000,dec=DEJ2000)")
        out[key.strip().lower()] = value.strip()
    return out


def parse_offset(text: str | None) -> tuple[int, int, int] | None:
    """`x,y,z` pixels -> a tuple, or None."""
    if not text:
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 0:
        raise ConfigError(f"region_offset: {text!r} is not three whole pixel counts x,y,z >= 0")
    return values


def clip_pixel_box(fits_box, shape) -> tuple[tuple | None, tuple, str | None]:
    """An inclusive FITS-order (x_min, x_max, y_min, y_max, z_min, z_max) box in the numpy-order
    cube `shape`: (half-open numpy-order box, axes clipped, skip reason)."""
    ndim = len(shape)
    if ndim < 3:
        return None, (), f"the cube has {ndim} axes; a bounding box needs x, y and z"
    pairs, clipped = [], []
    for k, letter in enumerate("xyz"):
        lo, hi = fits_box[2 * k], fits_box[2 * k + 1]
        n = shape[ndim - 1 - k]
        a, b = max(0, lo), min(n - 1, hi)
        if a > b:
            return None, (), f"off the cube: {letter} {lo}..{hi} outside 0..{n - 1}"
        if (a, b) != (lo, hi):
            clipped.append(letter)
        pairs.append((a, b + 1))
    box = tuple((0, n) for n in shape[: ndim - 3]) + tuple(reversed(pairs))
    return box, tuple(clipped), None


def _rest_hz(cfg: RunConfig, header) -> float | None:
    """The rest frequency velocities are taken about: the config's, else the header's."""
    if cfg.rest_frequency:
        from ingest.sky.regions import rest_frequency_hz

        return rest_frequency_hz(cfg.rest_frequency)
    value = header.get("RESTFRQ", header.get("RESTFREQ"))
    return float(value) if value else None


def cube_sources(cfg: RunConfig, layout, cube: dict | None = None) -> list[CutoutSource]:
    """Every catalogue row as a CutoutSource for this cube (`cube`: its identity, as the manifest
    records it; see `sources_and_request`)."""
    return sources_and_request(cfg, layout, cube)[0]


def job_catalogue(cfg: RunConfig):
    """The job's catalogue, read as the config says (columns and their units, SoFiA-2's region
    offset, frame), and the size rule each source is cut by (`--size`, else the catalogue's own)."""
    from ingest.sky.catalogue import read_catalogue
    from ingest.sky.sources import default_size, parse_size

    if not cfg.catalogue:
        raise ConfigError("catalogue: required for cutouts (SoFiA-2's catalogue, or a CSV/ECSV/VOTable/FITS table)")
    catalogue = read_catalogue(cfg.catalogue, columns=parse_columns(cfg.columns), sofia_par=cfg.sofia_par,
                               region_offset=parse_offset(cfg.region_offset), frame=cfg.frame)
    return catalogue, (parse_size(cfg.size) if cfg.size else default_size(catalogue))


def sources_and_request(cfg: RunConfig, layout, cube: dict | None) -> tuple[list[CutoutSource], dict]:
    """Every catalogue row as a CutoutSource for this cube, each with its request digest, and the
    job's part of every request (`Requests.fields`, the manifest's `request`)."""
    from ingest.sky.header import wcs_header
    from ingest.sky.pixels import world_boxes
    from ingest.sky.sources import cutout_requests

    catalogue, size = job_catalogue(cfg)
    header = wcs_header(layout)
    rest_hz = _rest_hz(cfg, header)
    requests = cutout_requests(catalogue, size, rest_hz=rest_hz)
    made = Requests({"cube": cube, "hdu": cfg.hdu, "dataset": cfg.dataset, "format": layout.kind,
                     "ext": ".h5" if layout.kind == "hdf5" else ".fits", "size": size.describe(),
                     "frame": catalogue.frame, "spectral_convention": catalogue.spectral_convention,
                     "rest_hz": rest_hz})
    world = [r for r in requests if r.skip_reason is None and r.pos is not None]
    boxes = {}
    if world:
        for r, result in zip(world, world_boxes(header, layout.shape, [r.pos for r in world],
                                                [r.band for r in world])):
            boxes[r.row] = result
    out = []
    for r in requests:
        if r.skip_reason is not None:
            out.append(CutoutSource(r.name, r.file_stem, r.row, None, skip_reason=r.skip_reason))
            continue
        if r.pos is not None:
            result = boxes[r.row]
            text = r.pos.describe() + (f" {r.band.describe()}" if r.band is not None else "")
            if isinstance(result, str):
                box, clipped, reason = None, (), result
            else:
                box, clipped, reason = tuple(result.box), tuple(result.clipped), None
        else:
            box, clipped, reason = clip_pixel_box(r.pixel_box_fits, layout.shape)
            text = "pixels x {}..{} y {}..{} z {}..{}".format(*r.pixel_box_fits)
        request = made.digest(r.name, box, text) if box is not None else None
        out.append(CutoutSource(r.name, r.file_stem, r.row, box, clipped, reason, text, request))
    return out, made.fields
