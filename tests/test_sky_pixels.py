"""World regions to pixel boxes (ingest.sky.pixels) against brute force over every pixel centre.

The rule under test: the box is exactly the bounding box of the pixels whose centres lie in the
region (tests/sky_oracle.py computes membership independently for every pixel centre of small
cubes and of the ring round them), `clipped` names the axes whose ring holds members, and a
region with no member pixel is a RegionError naming it.
"""
from __future__ import annotations

import json
import pickle
import warnings

import astropy.units as u
import numpy as np
import pytest
from astropy.coordinates import SkyCoord
from astropy.io import fits
from astropy.wcs import WCS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ingest.errors import ConfigError, RegionError
from ingest.sky.pixels import WorldBox, world_box, world_boxes
from ingest.sky.regions import ChannelRange, SkyCircle, SkyPolygon, SkyRange, SpectralRange, parse_band, parse_pos
from tests.sky_oracle import FRAMES, channel_members, check_members_box, sky_header, sky_members, spectral_values

REST_HZ = 1.420405752e9


def check_sky(header, nx, ny, region):
    """world_box against the oracle; returns the WorldBox, or None when (rightly) refused."""
    return check_members_box(header, nx, ny, region, *sky_members(header, nx, ny, region))


# ------------------------------------------------------------------- the rule, by hypothesis

@st.composite
def sky_cubes(draw):
    """Small images in SIN, TAN or CAR near a pole, across RA 0 or anywhere, any CDELT signs."""
    proj = draw(st.sampled_from(["SIN", "TAN", "CAR"]))
    place = draw(st.sampled_from(["north", "south", "ra0", "anywhere"]))
    lat0 = {"north": st.floats(80, 90), "south": st.floats(-90, -80), "ra0": st.floats(-60, 60),
            "anywhere": st.floats(-75, 75)}[place]
    lat0 = draw(lat0)
    lon0 = draw(st.floats(-3, 3)) % 360.0 if place == "ra0" else draw(st.floats(0, 359.99))
    nx, ny = draw(st.integers(3, 50)), draw(st.integers(3, 60))
    scale = 10 ** draw(st.floats(-2.5, 0.0))
    cdelt1 = scale * draw(st.sampled_from([-1.0, 1.0]))
    cdelt2 = scale * draw(st.sampled_from([-1.0, 1.0])) * draw(st.floats(0.7, 1.3))
    frame = draw(st.sampled_from(["icrs", "fk5", "galactic", "fk4"]))
    rotation = draw(st.sampled_from([0.0, 0.0, 30.0, -115.0]))
    return sky_header(proj, lon0, lat0, cdelt1, cdelt2, nx, ny, frame, rotation), nx, ny, scale


@st.composite
def sky_requests(draw):
    """A cube and a circle, range or polygon placed on it, partly or wholly off it, in any frame."""
    header, nx, ny, scale = draw(sky_cubes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wcs = WCS(header)
    frame = draw(st.sampled_from(["icrs", "fk5", "galactic"]))
    if draw(st.integers(0, 3)):  # on or near the cube
        px, py = draw(st.floats(-0.6 * nx - 3, 1.6 * nx + 3)), draw(st.floats(-0.6 * ny - 3, 1.6 * ny + 3))
        centre = wcs.pixel_to_world(px, py)
        assume(np.isfinite(centre.spherical.lon.deg) and np.isfinite(centre.spherical.lat.deg))
        centre = centre.transform_to(FRAMES[frame])
        size = min(scale * 10 ** draw(st.floats(-0.5, 1.8)), 60.0)
    else:  # anywhere on the sky, the far side of a SIN or TAN projection included
        centre = SkyCoord(draw(st.floats(0, 360)) * u.deg, np.degrees(np.arcsin(draw(st.floats(-1, 1)))) * u.deg,
                          frame=FRAMES[frame])
        size = 10 ** draw(st.floats(-1, 2.2))
    lon, lat = float(centre.spherical.lon.deg), float(centre.spherical.lat.deg)
    shape = draw(st.sampled_from(["circle", "range", "polygon"]))
    if shape == "circle":
        region = SkyCircle(lon, lat, min(size, 179.0), frame)
    elif shape == "range":
        size = min(size, 60.0)
        stretch = size / max(np.cos(np.radians(lat)), 0.05)
        lon_min, lon_max = lon - stretch * draw(st.floats(0.1, 1)), lon + stretch * draw(st.floats(0.1, 1))
        lat_min = max(lat - size * draw(st.floats(0, 1)), -90.0)
        lat_max = 90.0 if draw(st.integers(0, 6)) == 0 else min(lat + size * draw(st.floats(0, 1)), 90.0)
        if draw(st.integers(0, 8)) == 0:
            lon_min, lon_max = 0.0, 360.0
        region = SkyRange(lon_min, lon_max, lat_min, lat_max, frame)
    else:
        count = draw(st.integers(3, 6))
        angles = np.sort(draw(st.lists(st.floats(0, 2 * np.pi), min_size=count, max_size=count, unique=True)))
        assume(np.diff(np.concatenate([angles, angles[:1] + 2 * np.pi])).min() > 0.05)
        radii = np.array(draw(st.lists(st.floats(0.3, 1.0), min_size=count, max_size=count))) * min(size, 40.0)
        points = centre.directional_offset_by(angles * u.rad, radii * u.deg)
        try:
            region = SkyPolygon(tuple(zip(points.spherical.lon.deg, points.spherical.lat.deg)), frame)
        except ConfigError:
            assume(False)
    return header, nx, ny, region


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(sky_requests())
def test_sky_box_is_the_bounding_box_of_member_pixel_centres(request):
    header, nx, ny, region = request
    check_sky(header, nx, ny, region)


def _spectral_header(ctype: str, cdelt: float, crpix: float, n: int, rest_key: str | None) -> fits.Header:
    header = sky_header("SIN", 10.0, -10.0, -0.01, 0.01, 4, 5)
    header["NAXIS"], header["NAXIS3"] = 3, n
    crval, unit = {"FREQ": (1.41e9, "Hz"), "WAVE": (0.2115, "m")}.get(ctype, (2000.0, "km/s"))
    header["CTYPE3"], header["CRVAL3"], header["CDELT3"], header["CRPIX3"], header["CUNIT3"] = ctype, crval, cdelt, crpix, unit
    header["SPECSYS"] = "BARYCENT"
    if rest_key:
        header[rest_key] = REST_HZ
    return header


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["FREQ", "WAVE", "VRAD", "VOPT", "VELO"]), st.sampled_from([-1.0, 1.0]), st.floats(-5, 55),
       st.sampled_from(["RESTFRQ", "RESTFREQ"]), st.sampled_from(["frequency", "wavelength", "velocity"]),
       st.sampled_from(["radio", "optical", "relativistic"]), st.booleans(), st.floats(-20, 70), st.floats(-20, 70))
def test_band_channels_are_the_channels_whose_centre_is_in_the_band(ctype, sign, crpix, rest_key, kind, convention,
                                                                   own_rest, at_a, at_b):
    n = 50
    step = {"FREQ": 2e5, "WAVE": 3e-5}.get(ctype, 40.0)
    header = _spectral_header(ctype, sign * step, crpix, n, rest_key)
    band_rest = REST_HZ * 1.0004 if own_rest and kind == "velocity" else None
    unit = {"frequency": "MHz", "wavelength": "cm", "velocity": "km/s"}[kind]
    values = spectral_values(header, n, unit, convention if kind == "velocity" else None, band_rest or REST_HZ)
    channels = np.arange(-1, n + 1)
    slope = (values[-1] - values[0]) / (n + 1)  # beyond the axis, carry on linearly
    lo, hi = (float(np.interp(a, channels, values, left=values[0] + slope * (a + 1), right=values[-1] + slope * (a - n)))
              for a in (at_a, at_b))
    band = SpectralRange(lo, hi, unit, kind, convention if kind == "velocity" else None, band_rest)
    strict, loose = channel_members(values, band.lo, band.hi)
    try:
        got = world_box(header, (n, 5, 4), band=band)
    except RegionError as exc:
        assert not strict[1:-1].any() and band.describe(for_people=True) in str(exc)
        return
    start, stop = got.box[0]
    inside_strict, inside_loose = np.flatnonzero(strict[1:-1]), np.flatnonzero(loose[1:-1])
    assert len(inside_loose) and start >= inside_loose.min() and stop <= inside_loose.max() + 1
    if len(inside_strict):
        assert start <= inside_strict.min() and stop >= inside_strict.max() + 1
    clipped = "spectral" in got.clipped
    assert clipped >= bool(strict[0] or strict[-1]) and clipped <= bool(loose[0] or loose[-1])
    assert got.box[1:] == ((0, 5), (0, 4))


# ------------------------------------------------------------------- poles, RA 0, undefined pixels

def _circle_near(header, dlon_deg, dlat_deg, radius_deg, frame="icrs"):
    return SkyCircle(header["CRVAL1"] + dlon_deg, header["CRVAL2"] + dlat_deg, radius_deg, frame)


@pytest.mark.parametrize("proj", ["SIN", "TAN", "CAR", "ARC"])
def test_circle_holding_the_north_pole(proj):
    header = sky_header(proj, 40.0, 88.0, -0.2, 0.2, 40, 60)
    got = check_sky(header, 40, 60, SkyCircle(200.0, 89.0, 2.5))
    assert got is not None
    pole = WCS(header).world_to_pixel(SkyCoord(0 * u.deg, 90 * u.deg))
    (y0, y1), (x0, x1) = got.box
    assert x0 <= pole[0] < x1 and y0 <= pole[1] < y1


@pytest.mark.parametrize("proj", ["SIN", "TAN", "CAR"])
def test_range_reaching_the_south_pole_in_another_frame(proj):
    header = sky_header(proj, 300.0, -87.0, 0.15, -0.15, 50, 40, frame="fk5")
    assert check_sky(header, 50, 40, SkyRange(0.0, 360.0, -90.0, -86.0, "icrs")) is not None
    assert check_sky(header, 50, 40, SkyRange(250.0, 20.0, -89.0, -90.0 + 3.5, "fk5")) is not None


@pytest.mark.parametrize("proj", ["SIN", "CAR"])
def test_circle_and_range_across_ra_zero(proj):
    header = sky_header(proj, 0.0, 20.0, -0.02, 0.02, 40, 30)
    circle = check_sky(header, 40, 30, SkyCircle(0.01, 20.0, 0.1))
    ra_zero_x = WCS(header).world_to_pixel(SkyCoord(0 * u.deg, 20 * u.deg))[0]
    (_, _), (x0, x1) = circle.box
    assert x0 < ra_zero_x - 3 and x1 > ra_zero_x + 3  # both sides of RA 0
    band = check_sky(header, 40, 30, parse_pos("RANGE 359.9 0.1 19.9 20.1"))
    assert band.box[1][1] - band.box[1][0] >= 9  # 0.2 deg of RA at 0.02 deg/px, not 359.8 deg nor nothing


def test_sin_pixels_beyond_the_hemisphere_are_in_no_region():
    header = sky_header("SIN", 120.0, 10.0, -3.0, 3.0, 45, 45)  # the corners lie off the sphere
    assert not np.isfinite(WCS(header).pixel_to_world_values(0, 0)[0])
    got = check_sky(header, 45, 45, SkyCircle(120.0 + 100.0, 10.0, 60.0))
    assert got is not None and got.clipped == ()
    check_sky(header, 45, 45, SkyCircle(300.0, -10.0, 5.0))  # on the far side: off the image


def test_galactic_circle_on_an_equatorial_cube_and_back():
    equatorial = sky_header("TAN", 266.4, -28.9, -0.01, 0.01, 50, 50)
    galactic = sky_header("CAR", 0.0, 0.0, -0.01, 0.01, 50, 50, frame="galactic")
    centre = SkyCoord(266.41 * u.deg, -28.93 * u.deg)
    for header in (equatorial, galactic):
        for region in (SkyCircle.around(centre, 6 * u.arcmin), SkyCircle.around(centre.galactic, 6 * u.arcmin)):
            assert check_sky(header, 50, 50, region) is not None


# ------------------------------------------------------------------- refusals name the region and cube

def test_a_region_wholly_off_the_cube_is_refused_by_name():
    header = sky_header("SIN", 150.0, -30.0, -0.01, 0.01, 40, 40)
    region = SkyCircle(160.0, -30.0, 0.1)
    with pytest.raises(RegionError, match=r"CIRCLE icrs 160 -30 0\.1 deg.*RA---SIN, DEC--SIN"):
        world_box(header, (40, 40), pos=region)


def test_a_band_on_an_image_and_a_sky_region_on_a_spectrum_are_refused():
    image = sky_header("SIN", 150.0, -30.0, -0.01, 0.01, 40, 40)
    with pytest.raises(RegionError, match="BAND 1.417 1.4185 GHz: the cube .* has no spectral axis"):
        world_box(image, (40, 40), band="1.4170GHz 1.4185GHz")
    with pytest.raises(RegionError, match="CHANNEL 1 2: the cube .* has no spectral axis"):
        world_box(image, (40, 40), channels="1 2")
    spectrum = fits.Header({"NAXIS": 1, "NAXIS1": 30, "CTYPE1": "FREQ", "CRVAL1": 1.4e9, "CDELT1": 1e5, "CRPIX1": 1})
    with pytest.raises(RegionError, match="CIRCLE icrs 150 -30 0.1 deg: the cube .* has no celestial axes"):
        world_box(spectrum, (30,), pos="CIRCLE 150 -30 0.1")


def test_a_velocity_band_needs_a_rest_frequency():
    header = _spectral_header("FREQ", 2e5, 1.0, 50, rest_key=None)
    with pytest.raises(RegionError, match="BAND 1200 1500 km/s radio: a velocity band needs a rest frequency"):
        world_box(header, (50, 5, 4), band="1200km/s 1500km/s")
    got = world_box(header, (50, 5, 4), band=parse_band("1200km/s 1500km/s", rest="1420.405752MHz"))
    assert got.box[0][1] > got.box[0][0]
    vrad = _spectral_header("VRAD", 40.0, 1.0, 50, rest_key=None)
    with pytest.raises(RegionError, match="velocity axis VRAD has no rest frequency"):
        world_box(vrad, (50, 5, 4), band="1.4170GHz 1.4185GHz")
    assert world_box(vrad, (50, 5, 4), band="2100 2300 km/s radio").box[0] == (3, 8)  # read directly
    air = _spectral_header("WAVE", 3e-5, 1.0, 50, rest_key=None)
    air["CTYPE3"] = "AWAV"
    with pytest.raises(RegionError, match="spectral axis AWAV cannot be converted"):
        world_box(air, (50, 5, 4), band="0.2112 0.2114")


def test_a_frame_that_cannot_be_converted_is_refused():
    header = sky_header("TAN", 0.0, 0.0, 0.001, 0.001, 20, 20)
    header["CTYPE1"], header["CTYPE2"] = "HPLN-TAN", "HPLT-TAN"  # helioprojective: needs an observer
    del header["RADESYS"]
    with pytest.raises(RegionError, match="CIRCLE icrs 0 0 0.01 deg"):
        world_box(header, (20, 20), pos=SkyCircle(0.0, 0.0, 0.01))


def test_band_and_channels_together_and_mismatched_lists_are_refused():
    header = _spectral_header("FREQ", 2e5, 1.0, 50, "RESTFRQ")
    with pytest.raises(RegionError, match="not both"):
        world_box(header, (50, 5, 4), band="1.41GHz 1.42GHz", channels="1 2")
    with pytest.raises(ConfigError, match="2 sky regions but 1 bands"):
        world_boxes(header, (50, 5, 4), [None, None], [None])


def test_a_header_that_does_not_fit_the_shape_or_couples_sky_and_spectrum_is_refused():
    header = _spectral_header("FREQ", 2e5, 1.0, 50, "RESTFRQ")
    with pytest.raises(RegionError, match=r"NAXIS3 = 50 but its shape \(40, 5, 4\)"):
        world_box(header, (40, 5, 4), channels="1 2")
    with pytest.raises(RegionError, match="describes 3 axes but its shape"):
        world_box(header, (5, 4), channels="1 2")
    header["PC1_3"] = 0.001  # RA moves with the channel: no box holds a region on every channel
    with pytest.raises(RegionError, match="coupled to others by the PC/CD matrix"):
        world_box(header, (50, 5, 4), pos="CIRCLE 10 -10 0.01")


def test_channels_are_clipped_or_refused_at_the_axis_end():
    header = _spectral_header("FREQ", 2e5, 1.0, 50, "RESTFRQ")
    assert world_box(header, (50, 5, 4), channels=ChannelRange(3, 9)).box[0] == (3, 10)
    part = world_box(header, (50, 5, 4), channels="45 60")
    assert part.box[0] == (45, 50) and part.clipped == ("spectral",)
    with pytest.raises(RegionError, match="CHANNEL 50 60: wholly off the cube: no channel of its spectral axis"):
        world_box(header, (50, 5, 4), channels="50 60")


# ------------------------------------------------------------------- an ASKAP-like cube

def askap_header(rest_key="RESTFRQ") -> fits.Header:
    """RA---SIN/DEC--SIN/FREQ/STOKES as ASKAP writes them (WALLABY-sized), with a rest frequency."""
    cards = {"NAXIS": 4, "NAXIS1": 5851, "NAXIS2": 5851, "NAXIS3": 6668, "NAXIS4": 1,
             "CTYPE1": "RA---SIN", "CRVAL1": 150.0, "CDELT1": -5.555555555556e-4, "CRPIX1": 2926.0, "CUNIT1": "deg",
             "CTYPE2": "DEC--SIN", "CRVAL2": -30.0, "CDELT2": 5.555555555556e-4, "CRPIX2": 2926.0, "CUNIT2": "deg",
             "CTYPE3": "FREQ", "CRVAL3": 1.2955e9, "CDELT3": 18518.51852, "CRPIX3": 1.0, "CUNIT3": "Hz",
             "CTYPE4": "STOKES", "CRVAL4": 1.0, "CDELT4": 1.0, "CRPIX4": 1.0, "CUNIT4": "",
             "RADESYS": "FK5", "EQUINOX": 2000.0, "SPECSYS": "BARYCENT", rest_key: REST_HZ, "BUNIT": "Jy/beam"}
    return fits.Header(cards)


ASKAP_SHAPE = (1, 6668, 5851, 5851)


@pytest.mark.parametrize("rest_key", ["RESTFRQ", "RESTFREQ"])
@pytest.mark.parametrize("convention", ["radio", "optical"])
def test_askap_velocity_band_gives_the_channels_astropy_gives(rest_key, convention):
    header = askap_header(rest_key)
    got = world_box(header, ASKAP_SHAPE, pos="circle 10h00m28.8s -30d15m00s 5arcmin",
                    band=parse_band(f"1200km/s 1500km/s {convention}"))
    velocity = spectral_values(header, 6668, u.km / u.s, convention, REST_HZ)[1:-1]
    expected = np.flatnonzero((velocity >= 1200.0) & (velocity <= 1500.0))
    assert got.box[1] == (expected.min(), expected.max() + 1)
    assert got.box[0] == (0, 1) and got.clipped == ()  # Stokes kept whole
    centre = WCS(header).celestial.world_to_pixel(SkyCoord(150.12 * u.deg, -30.25 * u.deg, frame="fk5"))
    (y0, y1), (x0, x1) = got.box[2], got.box[3]
    assert abs((x0 + x1 - 1) / 2 - centre[0]) <= 1 and abs((y0 + y1 - 1) / 2 - centre[1]) <= 1
    assert 5 / 60 / 5.555555555556e-4 * 2 - 2 <= x1 - x0 <= 5 / 60 / 5.555555555556e-4 * 2 + 2
    json.dumps(got.as_dict(), allow_nan=False)
    assert pickle.loads(pickle.dumps(got)) == got


def test_radio_and_optical_bands_differ_and_reversed_axes_agree():
    header = askap_header()
    radio = world_box(header, ASKAP_SHAPE, band="1200 1500 km/s radio").box[1]
    optical = world_box(header, ASKAP_SHAPE, band="1200 1500 km/s optical").box[1]
    assert radio != optical
    flipped = askap_header()
    flipped["CRVAL3"], flipped["CDELT3"] = 1.2955e9 + 6667 * 18518.51852, -18518.51852
    flipped_radio = world_box(flipped, ASKAP_SHAPE, band=parse_band("1200 1500 km/s")).box[1]
    assert flipped_radio == (6668 - radio[1], 6668 - radio[0])
    wave = world_box(flipped, ASKAP_SHAPE, band="0.2112 0.2114").box[1]  # SODA: vacuum wavelength, metres
    freq = spectral_values(flipped, 6668, u.m)[1:-1]
    inside = np.flatnonzero((freq >= 0.2112) & (freq <= 0.2114))
    assert wave == (inside.min(), inside.max() + 1)


# ------------------------------------------------------------------- many regions at once

def _mixed_requests(rng, header, count):
    regions, bands = [], []
    for _ in range(count):
        lon, lat = 150.0 + rng.uniform(-1.9, 1.9), -30.0 + rng.uniform(-1.7, 1.7)
        size = rng.uniform(0.02, 0.3)
        kind = rng.integers(0, 4)
        regions.append([None, SkyCircle(lon, lat, size), SkyRange(lon - size, lon + size, lat - size, lat),
                        SkyPolygon(((lon, lat), (lon + size, lat), (lon, lat + size)), "fk5")][kind])
        v = rng.uniform(-3000, 30000)
        bands.append([None, SpectralRange(v, v + 300, "km/s", "velocity", "optical"), ChannelRange(int(v) % 7000, int(v) % 7000 + 9),
                      parse_band("1.4170GHz 1.4185GHz")][rng.integers(0, 4)])
    return regions, bands


def test_world_boxes_equals_world_box_per_entry():
    header = askap_header()
    regions, bands = _mixed_requests(np.random.default_rng(5), header, 60)
    answers = world_boxes(header, ASKAP_SHAPE, regions, bands)
    assert any(isinstance(a, str) for a in answers) and any(isinstance(a, WorldBox) for a in answers)
    for region, band, answer in zip(regions, bands, answers):
        spectral = {"channels": band} if isinstance(band, ChannelRange) else {"band": band}
        if isinstance(answer, str):
            with pytest.raises(RegionError) as exc:
                world_box(header, ASKAP_SHAPE, pos=region, **spectral)
            assert str(exc.value) == answer
        else:
            assert world_box(header, ASKAP_SHAPE, pos=region, **spectral) == answer


def test_ten_thousand_few_arcminute_circles_on_an_askap_cube():
    header = askap_header()
    rng = np.random.default_rng(44)
    count = 10_000
    lon = 150.0 + rng.uniform(-1.5, 1.5, count) / np.cos(np.radians(30.0))
    lat = -30.0 + rng.uniform(-1.5, 1.5, count)
    regions = [SkyCircle(a, b, r) for a, b, r in zip(lon, lat, rng.uniform(2, 5, count) / 60.0)]
    velocity = rng.uniform(500, 15000, count)
    bands = [SpectralRange(v, v + 300.0, "km/s", "velocity", "radio") for v in velocity]
    answers = world_boxes(header, ASKAP_SHAPE, regions, bands)
    assert len(answers) == count and all(isinstance(a, WorldBox) for a in answers)
    for i in rng.choice(count, 4, replace=False):  # check a few against brute force round the box
        (y0, y1), (x0, x1) = answers[i].box[2], answers[i].box[3]
        window = (x0 - 3, x1 + 3, y0 - 3, y1 + 3)
        strict, loose = sky_members(header, 5851, 5851, regions[i], window)
        assert not loose[[0, 1, 2, -3, -2, -1], :].any() and not loose[:, [0, 1, 2, -3, -2, -1]].any()
        ys, xs = np.nonzero(strict)
        assert (xs.min() + x0 - 3, xs.max() + x0 - 2, ys.min() + y0 - 3, ys.max() + y0 - 2) == (x0, x1, y0, y1)
