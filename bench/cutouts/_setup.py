"""bench.cutouts.catalogue's inputs: a cube with a WCS on the bench server, catalogues spread over it, and
WALLABY's cut-out size scaled to the cube's pixels.

The synthetic cube (ingest.testbed.synth) has 1 arcsec pixels and 18.5 kHz channels about
1.4 GHz; WALLABY's cubes have 6 arcsec pixels and the same channels. A WALLABY source of
WALLABY_DIAMETER_ARCMIN across and WALLABY_WIDTH_KMS wide is WALLABY_DIAMETER_PX pixels and
about 77 channels; the benchmark keeps those pixel and channel counts, so on the synthetic cube
the radius is diameter_px / 2 x 1 arcsec and the half width is WALLABY_WIDTH_KMS / 2 (the
channels are as wide as WALLABY's). That keeps each cut-out's bytes and its byte pattern in the
object (rows, planes) what a WALLABY cubelet's are; only the cube is smaller than ASKAP's.
"""
from __future__ import annotations

import csv
import math
import os
import time

import numpy as np

from bench import common

HI_REST_HZ = 1.420405752e9  # the 21 cm line: RESTFRQ of the synthetic cube, as ASKAP HI cubes carry it
WALLABY_PIXEL_ARCSEC = 6.0
WALLABY_CHANNEL_HZ = 18.5e3
WALLABY_DIAMETER_ARCMIN = 3.0  # a typical WALLABY detection's extent on the sky
WALLABY_WIDTH_KMS = 300.0  # and in velocity
WALLABY_DIAMETER_PX = round(WALLABY_DIAMETER_ARCMIN * 60 / WALLABY_PIXEL_ARCSEC)  # 30
SYNTH_PIXEL_ARCSEC = 1.0  # CDELT1/2 of ingest.testbed.synth
C_KMS = 299792.458


def wallaby_size_text(pixel_arcsec: float = SYNTH_PIXEL_ARCSEC) -> str:
    """`--size` for a WALLABY-sized cut-out on a cube of `pixel_arcsec` pixels and WALLABY's channels:
    the same pixel and channel counts (the module docstring says why)."""
    radius_arcsec = WALLABY_DIAMETER_PX / 2 * pixel_arcsec
    return f"{radius_arcsec:g}arcsec {WALLABY_WIDTH_KMS / 2:g}km/s"


def wallaby_channels(freq_hz: float = 1.4e9, channel_hz: float = WALLABY_CHANNEL_HZ) -> int:
    """Channels a WALLABY_WIDTH_KMS wide source spans at `freq_hz` (radio convention): inclusive count."""
    return int(WALLABY_WIDTH_KMS / C_KMS * freq_hz / channel_hz) + 1


def wcs_cube(env: common.BenchEnv, shape: tuple[int, ...]) -> common.Cube:
    """A float32 cube of numpy-order `shape` with RESTFRQ (HI), written once into the cache and
    uploaded to the bench server."""
    from ingest.staging.upload import upload_file
    from ingest.testbed.synth import write_cube

    name = "cutcube_{}_hi.fits".format("x".join(str(n) for n in reversed(shape)))
    path = os.path.join(env.cache_dir, name)
    if not os.path.exists(path):
        write_cube(path, shape, -32, restfrq_hz=HI_REST_HZ)
    t0 = time.perf_counter()
    upload_file(path, f"s3://{common.BUCKET}/{name}", progress=False, client=env.server.client())
    upload_s = time.perf_counter() - t0
    data_bytes = math.prod(shape) * 4
    object_bytes = os.path.getsize(path)
    data_offset = object_bytes - data_bytes - (-data_bytes % 2880)
    return common.Cube(path, common.BUCKET, name, tuple(shape), -32, data_offset, data_bytes, object_bytes, upload_s)


def cube_header(cube: common.Cube):
    from astropy.io import fits

    return fits.getheader(cube.path)


def write_catalogue(path: str, cube: common.Cube, n_sources: int, seed: int) -> str:
    """A CSV `name,ra,dec,freq` of n_sources whose centres are uniform over the cube's voxels (so
    some cut-outs at the edges are clipped, as in a survey), with an ECSV header stating the units
    (deg, deg, Hz): ingest reads no spectral column without its unit."""
    from astropy.wcs import WCS

    nz, ny, nx = cube.shape
    rng = np.random.default_rng(seed)
    pix = np.column_stack([rng.uniform(-0.5, n - 0.5, n_sources) for n in (nx, ny, nz)])
    world = WCS(cube_header(cube)).wcs_pix2world(pix, 0)
    with open(path, "w", newline="") as fh:
        fh.write("# %ECSV 1.0\n# ---\n# delimiter: ','\n# datatype:\n# - {name: name, datatype: string}\n"
                 "# - {name: ra, unit: deg, datatype: float64}\n# - {name: dec, unit: deg, datatype: float64}\n"
                 "# - {name: freq, unit: Hz, datatype: float64}\n# schema: astropy-2.0\n")
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["name", "ra", "dec", "freq"])
        for i, (ra, dec, freq) in enumerate(world):
            out.writerow([f"WALLABY_like_{i:05d}", f"{ra:.9f}", f"{dec:.9f}", f"{freq:.3f}"])
    return path


def source_boxes(cube: common.Cube, catalogue: str, size: str) -> list[tuple[str, tuple]]:
    """(file stem, numpy-order half-open box) of every source that has a box, by ingest's own rule
    (ingest.driver.cutouts.sources on the local copy): the boxes every candidate cuts."""
    from ingest.config import load_config
    from ingest.driver.cutouts.sources import cube_sources
    from ingest.formats.reader import read_layout
    from ingest.transports import open_transport

    cfg = load_config({"source": cube.path, "catalogue": catalogue, "size": size, "progress": False})
    with open_transport(cube.path, "posix", threads=1) as transport:
        layout = read_layout(transport, 0)
    return [(s.file_stem, s.box) for s in cube_sources(cfg, layout) if s.box is not None]


def shifted_header(header, box):
    """A copy of the cube's header for the cut-out `box` (numpy order): NAXISn and CRPIXn shifted,
    so every pixel keeps its world coordinate (what a user cutting with astropy writes)."""
    out = header.copy()
    for k, (a, b) in enumerate(reversed(box), start=1):
        out[f"NAXIS{k}"] = b - a
        out[f"CRPIX{k}"] = header[f"CRPIX{k}"] - a
    return out


def read_box(path: str, box) -> np.ndarray:
    """The box's stored values from a FITS file on disk, by astropy's section (the oracle)."""
    from astropy.io import fits

    with fits.open(path, memmap=True) as hdul:
        return np.asarray(hdul[0].section[tuple(slice(a, b) for a, b in box)])
