"""A survey in miniature: a mosaic of overlapping SIN tile cubes and a catalogue spread over them.

Like a WALLABY or POSSUM field, each tile is a cube of its own: its own tangent point (CRVAL at
its centre pixel), its own shape and its own channels (the tiles' first channels step by one
channel, one tile has fewer), a BEAMS table (CASAMBM = T, ingest.testbed.synth.beams_hdu) and
data no other tile shares (ingest.testbed.synth.voxel_values offset by the tile's seed, so a
cut-out says which tile it came from). Neighbours overlap by a few pixels at their edges.

The catalogue (ECSV: name, ra, dec in deg ICRS, freq in Hz) holds sources of each kind the
tile rule (ingest.collection.rule) has to answer: at a tile's centre, in the overlap of two and
of four tiles (off the overlap's middle, so one tile holds each farther from its edges), half
over the mosaic's outer edge (clipped), near a tile's last channels where a neighbour's channels
hold its band whole, off every tile on the sky, and off every tile's channels. `SIZE` is the
cut-out size the sources are meant with (ingest.sky.sources.parse_size).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from astropy.io import fits
from astropy.table import Table

from ingest.testbed.synth import beams_hdu, build_header, voxel_values

PIXEL_DEG = 20.0 / 3600
CHANNEL_HZ = 18.5e3
FIRST_HZ = 1.40e9
RADIUS_ARCMIN = 1.0
HALF_WIDTH_HZ = 2 * CHANNEL_HZ
SIZE = f"{RADIUS_ARCMIN}arcmin {HALF_WIDTH_HZ / 1e3}kHz"
_SEED_STRIDE = 1 << 36  # voxel index offset per tile: no two tiles share a value's index


@dataclass(frozen=True)
class SurveyTile:
    """One tile: its file, tangent point (deg), numpy-order shape, first channel (Hz) and seed."""

    name: str
    path: str
    ra_deg: float
    dec_deg: float
    shape: tuple[int, int, int]
    first_hz: float
    seed: int


@dataclass(frozen=True)
class SurveySource:
    """One catalogue row and the kind of place it was put (centre, overlap2, overlap4, edge,
    band-edge, off-sky, off-band)."""

    name: str
    ra_deg: float
    dec_deg: float
    freq_hz: float
    kind: str


@dataclass(frozen=True)
class Survey:
    tiles: tuple[SurveyTile, ...]
    sources: tuple[SurveySource, ...]
    catalogue_path: str
    size: str = SIZE


def tile_data(tile: SurveyTile) -> np.ndarray:
    """The tile's voxels (float32, numpy order): the oracle of every cut-out of it."""
    n = math.prod(tile.shape)
    flat = np.arange(n, dtype=np.int64) + tile.seed * _SEED_STRIDE
    return voxel_values(flat, -32).reshape(tile.shape)


def tile_header(tile: SurveyTile) -> fits.Header:
    """The tile's primary header: SIN about its own tangent point, its own channels, CASAMBM = T."""
    header = build_header(tile.shape, -32, beams=True, restfrq_hz=1.420405752e9)
    nchan, ny, nx = tile.shape
    header["CRVAL1"], header["CRPIX1"], header["CDELT1"] = tile.ra_deg, (nx + 1) / 2, -PIXEL_DEG
    header["CRVAL2"], header["CRPIX2"], header["CDELT2"] = tile.dec_deg, (ny + 1) / 2, PIXEL_DEG
    header["CRVAL3"], header["CRPIX3"], header["CDELT3"] = tile.first_hz, 1.0, CHANNEL_HZ
    header["OBJECT"] = tile.name
    return header


def write_tile(tile: SurveyTile) -> None:
    nchan = tile.shape[0]
    hdus = fits.HDUList([fits.PrimaryHDU(tile_data(tile), tile_header(tile)), beams_hdu(nchan, 1)])
    hdus.writeto(tile.path, overwrite=True)


def _offset(ra0: float, dec0: float, east_arcmin: float, north_arcmin: float) -> tuple[float, float]:
    """A point east/north of (ra0, dec0) by small angles (on the tangent plane, to well under a pixel here)."""
    dec = dec0 + north_arcmin / 60
    return (ra0 + east_arcmin / 60 / math.cos(math.radians(dec))) % 360, dec


def write_survey(directory, *, columns: int = 3, rows: int = 2, tile_px: int = 40, overlap_px: int = 12,
                 nchan: int = 16, ra_deg: float = 150.0, dec_deg: float = -30.0) -> Survey:
    """Write the tiles (tile_rROW_cCOL.fits) and catalogue.ecsv into `directory`; the Survey says
    where everything is. Tile (0, 1) is taller by 4 pixels and the last tile has 2 fewer channels."""
    os.makedirs(directory, exist_ok=True)
    step_arcmin = (tile_px - overlap_px) * PIXEL_DEG * 60
    tiles = []
    for r in range(rows):
        for c in range(columns):
            k = r * columns + c
            ra, dec = _offset(ra_deg, dec_deg, -c * step_arcmin, r * step_arcmin)  # columns run east to west
            ny = tile_px + (4 if (r, c) == (0, 1) else 0)
            nz = nchan - (2 if k == rows * columns - 1 else 0)
            name = f"tile_r{r}_c{c}"
            tiles.append(SurveyTile(name, os.path.join(directory, f"{name}.fits"), ra, dec, (nz, ny, tile_px),
                                    FIRST_HZ + k * CHANNEL_HZ, k + 1))
    for tile in tiles:
        write_tile(tile)
    sources = _sources(tiles, columns, rows, step_arcmin, tile_px)
    path = os.path.join(directory, "catalogue.ecsv")
    table = Table({"name": [s.name for s in sources], "ra": [s.ra_deg for s in sources],
                   "dec": [s.dec_deg for s in sources], "freq": [s.freq_hz for s in sources]})
    table["ra"].unit, table["dec"].unit, table["freq"].unit = "deg", "deg", "Hz"
    table.write(path, format="ascii.ecsv", overwrite=True)
    return Survey(tuple(tiles), tuple(sources), path)


def _sources(tiles, columns: int, rows: int, step_arcmin: float, tile_px: int) -> list[SurveySource]:
    lo_hz = max(t.first_hz for t in tiles)
    hi_hz = min(t.first_hz + (t.shape[0] - 1) * CHANNEL_HZ for t in tiles)
    # Mid-way through the channels every tile has (+0.3 channel: no band edge on a channel centre).
    common_hz = lo_hz + (round((hi_hz - lo_hz) / CHANNEL_HZ / 2) + 0.3) * CHANNEL_HZ
    half_arcmin = tile_px / 2 * PIXEL_DEG * 60
    at = {t.name: t for t in tiles}
    out = []

    def add(kind, ra_dec, freq=common_hz):
        out.append(SurveySource(f"{kind}-{len(out):02d}", round(ra_dec[0], 9), round(ra_dec[1], 9), freq, kind))

    for t in tiles:
        add("centre", _offset(t.ra_deg, t.dec_deg, 0.13, -0.07))
    t00, t01, t10 = at["tile_r0_c0"], at["tile_r0_c1"], at["tile_r1_c0"]
    for share in (0.45, 0.56):  # whole in tiles (0,0) and (0,1), 45% and 56% of the way west
        add("overlap2", _offset(t00.ra_deg, t00.dec_deg, -share * step_arcmin, 0.05))
    add("overlap2", _offset(t00.ra_deg, t00.dec_deg, 0.1, 0.45 * step_arcmin))  # (0,0) and (1,0)
    add("overlap4", _offset(t00.ra_deg, t00.dec_deg, -0.47 * step_arcmin, 0.55 * step_arcmin))
    add("edge", _offset(t00.ra_deg, t00.dec_deg, half_arcmin + 0.2, 0.3))  # over the mosaic's east edge
    add("edge", _offset(t00.ra_deg, t00.dec_deg, half_arcmin - 0.3, 0.8 * step_arcmin))  # east edge, more in (1,0)
    add("edge", _offset(t10.ra_deg, t10.dec_deg, 0.4, half_arcmin + 0.1))  # over the north edge
    # Half a channel before t00's last: its band runs past t00's channels but not t01's (one channel higher).
    add("band-edge", _offset(t00.ra_deg, t00.dec_deg, -0.45 * step_arcmin, -0.1),
        t00.first_hz + (t00.shape[0] - 1.5) * CHANNEL_HZ)
    add("off-sky", _offset(t01.ra_deg, t01.dec_deg, 0.0, 60.0))
    add("off-sky", _offset(t00.ra_deg, t00.dec_deg, half_arcmin + 2 * RADIUS_ARCMIN + 0.5, 0.0))  # just past the edge
    add("off-band", _offset(t01.ra_deg, t01.dec_deg, 0.0, 0.0), FIRST_HZ - 50 * CHANNEL_HZ)
    return out
