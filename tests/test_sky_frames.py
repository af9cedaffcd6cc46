"""Frames as astropy means them: a sky region in ICRS, Galactic, FK5 or FK4 at any equinox, on a
cube whose RADESYS/EQUINOX says any of those, gives the box of the pixel centres astropy puts in it.

The oracle builds its astropy frames itself, with every attribute set (a SkyCoord.transform_to a
default-made FK5() keeps the SkyCoord's own equinox, the trap these tests guard against), carries
every pixel centre of a small cube into the region's frame with astropy and tests it there:
SkyCoord.separation for a circle, longitude and latitude for a range (tests/sky_oracle.py).
"""
from __future__ import annotations

import warnings

import astropy.units as u
import numpy as np
import pytest
from astropy.coordinates import FK4, FK5, ICRS, Galactic, SkyCoord
from astropy.io import fits
from astropy.time import Time
from astropy.wcs import WCS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ingest
from ingest.sky.pixels import world_box
from ingest.sky.regions import SkyCircle, SkyRange, parse_pos
from tests.sky_oracle import EPS_DEG, _range_members, check_members_box, sky_header


def frame_and_text(kind: str, year: float | None):
    """An astropy frame with every attribute set, and how a region's text names it."""
    if kind == "fk5":
        return FK5(equinox=Time(year, format="jyear")), f"fk5 J{year!r}"
    if kind == "fk4":
        equinox = Time(year, format="byear")
        return FK4(equinox=equinox, obstime=equinox), f"fk4 B{year!r}"
    return {"icrs": ICRS(), "galactic": Galactic()}[kind], kind


def members(header, nx: int, ny: int, region, frame, centre=None):
    """(strict, loose) over pixel centres -1..nx by -1..ny ([y+1, x+1]): a circle about `centre`
    (a SkyCoord) by astropy's separation in the centre's frame, a range by its bounds in `frame`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wcs = WCS(header).celestial
        yy, xx = np.mgrid[-1:ny + 1, -1:nx + 1]
        coords = wcs.pixel_to_world(xx.ravel(), yy.ravel())
        finite = np.isfinite(coords.spherical.lon.deg) & np.isfinite(coords.spherical.lat.deg)
        coords = coords[finite]
        if isinstance(region, SkyCircle):
            separation = centre.separation(coords).deg
            answers = separation < region.radius_deg - EPS_DEG, separation <= region.radius_deg + EPS_DEG
        else:
            inframe = coords.transform_to(frame)
            answers = _range_members(region, inframe.spherical.lon.deg % 360.0, inframe.spherical.lat.deg)
    out = []
    for values in answers:
        grid = np.zeros(xx.size, bool)
        grid[np.flatnonzero(finite)] = values
        out.append(grid.reshape(xx.shape))
    return out[0], out[1]


def check_box(header, nx, ny, region, frame, centre=None):
    """world_box against the oracle of `members`; the WorldBox, or None when (rightly) refused."""
    return check_members_box(header, nx, ny, region, *members(header, nx, ny, region, frame, centre))


years = {"fk5": st.floats(1950, 2050), "fk4": st.floats(1900, 2000)}


@st.composite
def framed_requests(draw):
    """A small cube in ICRS, Galactic, FK5 or FK4 (its EQUINOX any year) and a circle or range
    placed near it, in ICRS, Galactic, or FK5/FK4 at a random equinox."""
    nx, ny = draw(st.integers(4, 40)), draw(st.integers(4, 40))
    scale = 10 ** draw(st.floats(-3.0, -1.5))
    cube_kind = draw(st.sampled_from(["icrs", "galactic", "fk5", "fk4"]))
    header = sky_header(draw(st.sampled_from(["SIN", "TAN", "CAR"])), draw(st.floats(0, 359.99)), draw(st.floats(-70, 70)),
                        -scale, scale * draw(st.floats(0.8, 1.2)), nx, ny, cube_kind)
    if cube_kind in years and draw(st.booleans()):
        header["EQUINOX"] = round(draw(years[cube_kind]), 3)
    kind = draw(st.sampled_from(["icrs", "galactic", "fk5", "fk4"]))
    year = round(draw(years[kind]), 6) if kind in years else None
    frame, frame_text = frame_and_text(kind, year)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        at = WCS(header).pixel_to_world(draw(st.floats(-0.3 * nx, 1.3 * nx)), draw(st.floats(-0.3 * ny, 1.3 * ny)))
        centre = at.transform_to(frame)
    size_deg = scale * draw(st.floats(0.5, 12.0))
    lon, lat = float(centre.spherical.lon.deg), float(centre.spherical.lat.deg)
    if draw(st.booleans()):
        return header, nx, ny, SkyCircle.around(centre, size_deg * u.deg), frame, centre
    stretch = size_deg / np.cos(np.radians(lat))
    bounds = (lon - stretch * draw(st.floats(0.1, 1)), lon + stretch * draw(st.floats(0.1, 1)),
              lat - size_deg * draw(st.floats(0.1, 1)), lat + size_deg * draw(st.floats(0.1, 1)))
    region = parse_pos(f"range {frame_text} " + " ".join(f"{float(v)!r}deg" for v in bounds))
    assume(isinstance(region, SkyRange))
    return header, nx, ny, region, frame, None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(framed_requests())
def test_any_frame_and_equinox_gives_the_box_of_the_pixel_centres_astropy_puts_in_it(request):
    check_box(*request)


# ------------------------------------------------------------------- one star, every form

STAR = SkyCoord(150.0123 * u.deg, -30.0087 * u.deg, frame=FK5(equinox="J2000"))
RADIUS = 20 * u.arcsec
B1950 = FK4(equinox="B1950")


def _forms(star):
    """The star in other frames, each with every attribute set."""
    return {"fk5 J2010": star.transform_to(FK5(equinox="J2010")), "fk5 J1950": star.transform_to(FK5(equinox="J1950")),
            "fk4 B1950": star.transform_to(B1950), "fk4 B1950 observed J1990": star.transform_to(FK4(equinox="B1950", obstime="J1990")),
            "galactic": star.galactic, "icrs": star.icrs}


def _texts(star):
    """The star as text: FK5 J2010 and FK4 B1950 (fk4 alone meaning B1950), units after a space."""
    j2010, b1950 = star.transform_to(FK5(equinox="J2010")), star.transform_to(B1950)
    (ra10, dec10), (ra50, dec50) = ((repr(float(c.ra.deg)), repr(float(c.dec.deg))) for c in (j2010, b1950))
    return [f"circle fk5 J2010 {ra10}deg {dec10}deg 20arcsec",
            f"circle fk5 J2010 {ra10} deg {dec10} deg 20 arcsec",
            f"circle fk4 B1950 {ra50}deg {dec50}deg 20arcsec",
            f"CIRCLE fk4 {ra50} {dec50} {20 / 3600!r}",
            f"circle B1950 {ra50}deg {dec50}deg 0.3333333333333333arcmin"]


def _write_image(path, header, shape) -> np.ndarray:
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    fits.PrimaryHDU(data, header).writeto(path)
    return data


def _image_header(frame: str) -> fits.Header:
    """160 x 160 pixels of 1 arcsec round the star (FK5 J2000 or FK4 B1950: RADESYS, EQUINOX)."""
    centre = STAR if frame == "fk5" else STAR.transform_to(B1950)
    return sky_header("SIN", centre.spherical.lon.deg - 0.004, centre.spherical.lat.deg + 0.003,
                      -1 / 3600, 1 / 3600, 160, 160, frame)


@pytest.mark.parametrize("cube_frame", ["fk5", "fk4"])
def test_one_star_in_any_frame_gives_its_j2000_box_from_python(tmp_path, cube_frame):
    header = _image_header(cube_frame)
    assert (header["RADESYS"], header["EQUINOX"]) == (("FK4", 1950.0) if cube_frame == "fk4" else ("FK5", 2000.0))
    path = tmp_path / "image.fits"
    data = _write_image(path, header, (160, 160))
    with ingest.open(str(path)) as cube:
        j2000 = cube.cutout(STAR, RADIUS)
        truth = check_box(header, 160, 160, SkyCircle.around(STAR, RADIUS), None, STAR)
        assert j2000.box == truth.box and 30 <= j2000.box[1][1] - j2000.box[1][0] <= 42
        for name, form in _forms(STAR).items():
            cut = cube.cutout(form, RADIUS)
            assert cut.box == j2000.box, (name, cut.box, j2000.box)
            np.testing.assert_array_equal(cut.data, data[tuple(slice(a, b) for a, b in j2000.box)])
        for text in _texts(STAR):
            assert cube.cutout(pos=text).box == j2000.box, text


@pytest.mark.parametrize("cube_frame", ["fk5", "fk4"])
def test_one_star_as_text_gives_its_j2000_box(cube_frame):
    header = _image_header(cube_frame)
    j2000 = world_box(header, (160, 160), pos=SkyCircle.around(STAR, RADIUS))
    for text in _texts(STAR):
        region = parse_pos(text)
        assert region.frame in ("fk5 J2010", "fk4") and parse_pos(region.describe()) == region
        assert world_box(header, (160, 160), pos=region).box == j2000.box, text


def test_an_fk4_cube_is_read_in_b1950():
    """RADESYS='FK4' EQUINOX=1950: the cube's pixels are B1950 directions (E-terms included), so
    the star's J2000 position lands where astropy's world_to_pixel puts it."""
    header = _image_header("fk4")
    got = world_box(header, (160, 160), pos=SkyCircle.around(STAR, RADIUS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, y = WCS(header).world_to_pixel(STAR)
    (y0, y1), (x0, x1) = got.box
    assert abs((x0 + x1 - 1) / 2 - x) <= 0.5 and abs((y0 + y1 - 1) / 2 - y) <= 0.5
    assert check_box(header, 160, 160, parse_pos(_texts(STAR)[2]), B1950, STAR.transform_to(B1950)).box == got.box


def test_frame_names_round_trip_through_astropy():
    from ingest.sky.regions import frame_of
    from ingest.sky.sphere import astropy_frame

    for name, (kind, year) in {"icrs": ("icrs", None), "galactic": ("galactic", None), "fk5": ("fk5", 2000.0),
                               "fk4": ("fk4", 1950.0), "fk5 J2010": ("fk5", 2010.0), "fk5 J1987.123456": ("fk5", 1987.123456),
                               "fk4 B1900": ("fk4", 1900.0), "fk4 B1975.5": ("fk4", 1975.5)}.items():
        frame, _ = frame_and_text(kind, year)
        assert astropy_frame(name).is_equivalent_frame(frame) and frame_of(frame) == name, name
    assert frame_of(FK4(equinox="B1950", obstime="J1990")) is None  # no name says it: carried to ICRS


def test_one_star_on_the_command_line_gives_its_j2000_box(tmp_path):
    """`python -m ingest run --pos` with the star in FK5 J2010 (a frame word in --pos, or --frame)
    and in FK4 B1950 writes the one file the J2000 box names, with that box's pixels."""
    import glob
    import subprocess
    import sys

    header = _image_header("fk5")
    path = tmp_path / "image.fits"
    data = _write_image(path, header, (160, 160))
    j2000 = world_box(header, (160, 160), pos=SkyCircle.around(STAR, RADIUS))
    j2010, b1950 = STAR.transform_to(FK5(equinox="J2010")), STAR.transform_to(B1950)
    ra10, dec10, ra50, dec50 = (repr(float(v)) for v in (j2010.ra.deg, j2010.dec.deg, b1950.ra.deg, b1950.dec.deg))
    forms = [["--pos", _texts(STAR)[0]],
             ["--pos", f"circle {ra10}deg {dec10}deg 20arcsec", "--frame", "fk5 J2010"],
             ["--pos", f"circle {ra50}deg {dec50}deg 20arcsec", "--frame", "FK4"]]
    for i, form in enumerate(forms):
        out = tmp_path / f"out{i}"
        done = subprocess.run([sys.executable, "-m", "ingest", "run", "--source", str(path), "--method", "posix",
                               "--output-dir", str(out), *form], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (form, done.stderr[-2000:])
        (written,) = glob.glob(str(out / "*.fits"))
        with fits.open(written) as hdul:
            np.testing.assert_array_equal(hdul[0].data, data[tuple(slice(a, b) for a, b in j2000.box)], err_msg=str(form))
