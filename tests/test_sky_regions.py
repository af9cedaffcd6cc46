"""Parsing world regions (ingest.sky.regions): SODA's syntax and the readable one give the same
region, sexagesimal reads right, frames are checked, and every refusal names the text and the
field at fault."""
from __future__ import annotations

import json
import math
import pickle

import astropy.units as u
import pytest
from astropy.coordinates import FK4, FK5, SkyCoord
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.errors import ConfigError
from ingest.sky.regions import (ChannelRange, SkyCircle, SkyPolygon, SkyRange, SpectralRange, normalize_frame,
                                parse_band, parse_channels, parse_pos)


def close(a, b) -> bool:
    """Regions equal up to float rounding (sexagesimal and unit conversions are not exact)."""
    if type(a) is not type(b):
        return False
    da, db = a.as_dict(), b.as_dict()
    da.pop("text"), db.pop("text")
    for key in da:
        x, y = da[key], db[key]
        if isinstance(x, float) and isinstance(y, float):
            if not math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-9):
                return False
        elif isinstance(x, list):
            if any(not math.isclose(p, q, abs_tol=1e-9) for vx, vy in zip(x, y) for p, q in zip(vx, vy)):
                return False
        elif x != y:
            return False
    return True


# ------------------------------------------------------------------- the two forms agree

@pytest.mark.parametrize("soda, readable", [
    ("CIRCLE 150.12 -30.25 0.04", "circle 150.12deg -30.25deg 2.4arcmin"),
    ("CIRCLE 150.12 -30.25 0.08333333333333333", "circle 10h00m28.8s -30d15m00s 5arcmin"),
    ("CIRCLE 150.12 -30.25 0.08333333333333333", "circle 10:00:28.8 -30:15:00 5arcmin"),
    ("CIRCLE 150.12 -30.25 0.5", "CIRCLE icrs 150.12 -30.25 0.5 deg"),
    ("RANGE 150.0 150.5 -30.5 -30.0", "range 10h00m 10h02m -30d30m -30d00m"),
    ("POLYGON 150.0 -30.4 150.3 -30.4 150.3 -30.1", "polygon 150deg -30.4deg 150.3deg -30.4deg 150.3deg -30.1deg"),
    ("POLYGON 150.0 -30.4 150.3 -30.4 150.3 -30.1", "POLYGON 150, -30.4, 150.3, -30.4, 150.3, -30.1, 150, -30.4"),
    # a space before the unit, as astropy writes a quantity
    ("CIRCLE 150.12 -30.25 0.016666666666666666", "circle 10h00m28.8s -30d15m 1 arcmin"),
    ("CIRCLE icrs 150.1 -30.2 0.04", "circle icrs 150.1 deg -30.2 deg 2.4 arcmin"),
    ("RANGE 150.0 150.5 -30.5 -30.0", "range 10h00m 10h02m -30.5 deg -30 deg"),
    ("CIRCLE fk5 J2010 150.1 -30.2 0.5", "circle fk5 J2010 150.1 deg -30.2deg 30 arcmin"),
])
def test_soda_and_readable_forms_give_the_same_region(soda, readable):
    assert close(parse_pos(soda), parse_pos(readable))


def test_sexagesimal_reads_as_hours_for_equatorial_longitude_only():
    assert math.isclose(parse_pos("circle 10h00m28.8s -30d15m00s 1arcsec").lon_deg, 150.12, abs_tol=1e-9)
    assert parse_pos("circle 10h00m -30d15m00s 1arcsec").lat_deg == -30.25
    assert math.isclose(parse_pos("circle 0:30:00 -0:30:00 1arcsec").lon_deg, 7.5)  # hours
    assert math.isclose(parse_pos("circle galactic 0:30:00 -0:30:00 1arcsec").lon_deg, 0.5)  # degrees
    assert parse_pos("circle 1:00:00 -0:30:00 1arcsec").lat_deg == -0.5  # the sign of a zero degree field
    with pytest.raises(ConfigError, match=r"'2h' is in hours, which only a longitude may be"):
        parse_pos("circle 10h 2h 1deg")


def test_a_frame_word_overrides_the_argument_and_bad_frames_are_named():
    assert parse_pos("circle galactic 263.5deg 20.1deg 3arcmin").frame == "galactic"
    assert parse_pos("CIRCLE 263.5 20.1 0.05", frame="Galactic").frame == "galactic"
    assert parse_pos("CIRCLE J2000 263.5 20.1 0.05").frame == "fk5"
    assert parse_pos("circle FK5 263.5deg 20.1deg 3arcmin", frame="galactic").frame == "fk5"
    with pytest.raises(ConfigError, match=r"'circle ecliptic 1 2 3'.*'ecliptic' is not supported: use one of icrs, fk5, fk4"):
        parse_pos("circle ecliptic 1 2 3")
    with pytest.raises(ConfigError, match=r"'ecliptic' is not supported"):
        normalize_frame("ecliptic")


@pytest.mark.parametrize("name, expected", [
    ("FK5 J2000", "fk5"), ("fk5 J2010", "fk5 J2010"), ("fk5  j2010.50", "fk5 J2010.5"), ("FK4", "fk4"),
    ("B1950", "fk4"), ("fk4 B1950", "fk4"), ("fk4 B1900", "fk4 B1900"), ("fk5 B1950", "fk5 J1949.999790442"),
])
def test_frames_name_their_equinox(name, expected):
    assert normalize_frame(name) == expected
    region = parse_pos(f"circle {name} 150.1deg -30.2deg 1arcmin")
    assert region.frame == expected and region.describe().startswith(f"CIRCLE {expected} 150.1 -30.2 ")
    assert parse_pos(region.describe()) == region


@pytest.mark.parametrize("text, message", [
    ("circle galactic J2010 1 2 3", r"only fk5 and fk4 take an equinox \('J2010' follows 'galactic'\)"),
    ("circle fk5 X2010 1 2 3", r"'X2010' is not an equinox; write a Julian or Besselian year"),
    ("circle fk5 J20 1 2 3", r"equinox year 20 is outside 1000..3000"),
])
def test_bad_equinoxes_are_named(text, message):
    with pytest.raises(ConfigError, match=rf"position {text!r}: .*{message}"):
        parse_pos(text)


def test_ranges_wrap_through_zero_and_open_sides_are_the_whole_coordinate():
    wrap = parse_pos("RANGE 350 10 -5 5")
    assert (wrap.lon_min_deg, wrap.lon_max_deg) == (350.0, 10.0) and not wrap.full_lon
    assert parse_pos("RANGE -10 10 -5 5") == wrap
    open_sides = parse_pos("RANGE -Inf +Inf 80 +Inf")
    assert open_sides.full_lon and (open_sides.lat_min_deg, open_sides.lat_max_deg) == (80.0, 90.0)
    assert parse_pos("RANGE 0 360 -90 90").full_lon


# ------------------------------------------------------------------- refusals name the text

@pytest.mark.parametrize("text, message", [
    ("CIRCLE 150 -30 -0.1", r"'CIRCLE 150 -30 -0.1'.*radius -0.1 deg must be > 0"),
    ("CIRCLE 150 95 0.1", r"'CIRCLE 150 95 0.1'.*latitude 95.0 deg is outside -90..90"),
    ("RANGE 0 10 20 10", r"latitude range is reversed"),
    ("RANGE 0 10 -100 10", r"latitude -100.0 deg is outside"),
    ("circle 10h00m 150.12 5arcmin", r"'150.12' has no unit; beside values with units every angle needs one"),
    ("circle 150.12deg -30.25deg 5arcmin arcmin", r"the unit word 'arcmin' follows '5arcmin', which is not a bare number"),
    ("circle 150.1 deg -30.2 deg 2.4", r"'2.4' has no unit; beside values with units every angle needs one"),
    ("circle 150.1 -30.2 deg 2.4arcmin", r"'150.1' has no unit"),
    ("circle deg 1 2 3", r"the unit word 'deg' comes before any number"),
    ("circle 150deg 30 hourangle 1deg", r"'30 hourangle' is in hours, which only a longitude may be"),
    ("CIRCLE 1 2 3 furlong", r"'furlong' is not an angle unit"),
    ("circle 150.1 -30.2 2.4 arcmin", r"'arcmin' after bare numbers could be the unit of them all or of the last one only"),
    ("CIRCLE 1 2", r"CIRCLE takes 3 values \(lon lat radius\), got 2"),
    ("RANGE 1 2 3", r"RANGE takes 4 values"),
    ("POLYGON 0 0 1 1", r"POLYGON takes lon lat pairs, at least 3 of them; got 4 values"),
    ("POLYGON 0 0 1 1 2", r"got 5 values"),
    ("POLYGON 0 0 120 0 240 0", r"spans a hemisphere or more"),
    ("POLYGON 0 0 1 1 1 0 0 1", r"edge 1 \(vertex 1 to 2\) crosses edge 3"),
    ("CIRCLE inf 0 1", r"'inf' is infinite; only a RANGE side may be open"),
    ("circle 150.12xyz -30deg 1deg", r"'150.12xyz' is not an angle"),
    ("square 1 2 3", r"'square 1 2 3': expected CIRCLE, RANGE or POLYGON"),
    ("", r"expected CIRCLE, RANGE or POLYGON"),
])
def test_position_errors_name_the_text_and_what_was_expected(text, message):
    with pytest.raises(ConfigError, match=message) as exc:
        parse_pos(text)
    assert repr(text) in str(exc.value) or text == ""


# ------------------------------------------------------------------- bands

@pytest.mark.parametrize("text, expected", [
    ("0.2112 0.2114", SpectralRange(0.2112, 0.2114, "m", "wavelength")),
    ("BAND 0.2114 0.2112", SpectralRange(0.2112, 0.2114, "m", "wavelength")),
    ("1.4170GHz 1.4185GHz", SpectralRange(1.417, 1.4185, "GHz", "frequency")),
    ("1417.0 1418.5 MHz", SpectralRange(1417.0, 1418.5, "MHz", "frequency")),
    ("1418.5MHz 1.417GHz", SpectralRange(1417.0, 1418.5, "MHz", "frequency")),
    ("21.1cm 21.2cm", SpectralRange(21.1, 21.2, "cm", "wavelength")),
    ("1200km/s 1500km/s", SpectralRange(1200.0, 1500.0, "km/s", "velocity", "radio")),
    ("1500 1200 km/s optical", SpectralRange(1200.0, 1500.0, "km/s", "velocity", "optical")),
    ("-Inf 0.2114", SpectralRange(-math.inf, 0.2114, "m", "wavelength")),
    ("1200 1500 km/s relativistic rest=1420.405752MHz",
     SpectralRange(1200.0, 1500.0, "km/s", "velocity", "relativistic", 1420405752.0)),
])
def test_band_forms(text, expected):
    assert close(parse_band(text), expected)


def test_band_convention_and_rest_from_arguments():
    band = parse_band("1200km/s 1500km/s", convention="optical", rest="1420.405752 MHz")
    assert band.convention == "optical" and math.isclose(band.rest_hz, 1420405752.0)
    assert parse_band("1200km/s 1500km/s radio", convention="optical").convention == "radio"
    assert math.isclose(parse_band("1 2 km/s", rest="21.106114cm").rest_hz, 299792458.0 / 0.21106114, rel_tol=1e-12)
    assert parse_band("1 2 GHz", convention="optical").convention is None  # only velocities have one
    assert parse_band("1 2 km/s", rest=1.4204e9).rest_hz == 1.4204e9


@pytest.mark.parametrize("text, message", [
    ("1 2 3 4", r"'1 2 3 4': expected two values"),
    ("1GHz 2", r"give both values with units, or two numbers and one unit"),
    ("1 2 furlong", r"'furlong' is neither a unit nor a velocity convention"),
    ("1200km/s 1500km/s weird", r"'weird' is neither a unit nor a velocity convention"),
    ("1kg 2kg", r"unit 'kg' is not a frequency, wavelength or velocity"),
    ("-1 2", r"a wavelength must be positive"),
    ("0 1 GHz", r"a frequency must be positive"),
    ("0 400000 km/s", r"a velocity must be below the speed of light"),
    ("1GHz 2km/s", r"cannot read the values with units"),
])
def test_band_errors_name_the_text(text, message):
    with pytest.raises(ConfigError, match=message) as exc:
        parse_band(text)
    assert repr(text) in str(exc.value)
    with pytest.raises(ConfigError, match=r"rest frequency 'soon'"):
        parse_band("1 2 km/s", rest="soon")


def test_channels():
    assert parse_channels("3 9") == ChannelRange(3, 9)
    assert parse_channels("CHANNEL 0, 0") == ChannelRange(0, 0)
    for text in ("9 3", "-1 4", "1.5 3", "1", "a b"):
        with pytest.raises(ConfigError, match=rf"channels {text!r}"):
            parse_channels(text)
    with pytest.raises(ConfigError, match="channels are integers"):
        ChannelRange(1.0, 2)


# ------------------------------------------------------------------- astropy objects in

def test_regions_from_skycoord_and_quantities():
    centre = SkyCoord(150.12 * u.deg, -30.25 * u.deg)
    assert SkyCircle.around(centre, 5 * u.arcmin) == parse_pos("CIRCLE 150.12 -30.25 0.08333333333333333")
    galactic = SkyCircle.around(centre.galactic, 0.1 * u.deg)
    assert galactic.frame == "galactic" and math.isclose(galactic.lon_deg, centre.galactic.l.deg)
    b1950 = centre.transform_to(FK4(equinox="B1950"))
    fk4 = SkyCircle.around(b1950, 0.1 * u.deg)  # kept in its own frame
    assert fk4.frame == "fk4" and (fk4.lon_deg, fk4.lat_deg) == (b1950.ra.deg, b1950.dec.deg)
    j2010 = centre.transform_to(FK5(equinox="J2010"))
    fk5 = SkyCircle.around(j2010, 0.1 * u.deg)
    assert fk5.frame == "fk5 J2010" and (fk5.lon_deg, fk5.lat_deg) == (j2010.ra.deg, j2010.dec.deg)
    observed = SkyCircle.around(centre.transform_to(FK4(equinox="B1950", obstime="J1990")), 0.1 * u.deg)
    assert observed.frame == "icrs" and math.isclose(observed.lon_deg, 150.12, abs_tol=1e-9)  # carried to ICRS
    with pytest.raises(ConfigError, match="give an angle with a unit"):
        SkyCircle.around(centre, 0.1)
    band = SpectralRange.between(1500 * u.km / u.s, 1200 * u.km / u.s, "optical", rest=1420.405752 * u.MHz)
    assert (band.lo, band.hi, band.unit, band.convention, band.rest_hz) == (1200.0, 1500.0, "km/s", "optical", 1420405752.0)
    assert SpectralRange.between(1.417 * u.GHz, 1418.5 * u.MHz) == parse_band("1.417 1.4185 GHz")
    with pytest.raises(ConfigError, match="not in the same kind of unit"):
        SpectralRange.between(1 * u.GHz, 2 * u.km / u.s)


# ------------------------------------------------------------------- round trips

lons = st.floats(0, 359.999, allow_nan=False)
lats = st.floats(-89.9, 89.9)
frames = st.one_of(st.sampled_from(["icrs", "fk5", "fk4", "galactic"]),
                   st.builds("fk5 J{:.6f}".format, st.floats(1950, 2050)),
                   st.builds("fk4 B{:.6f}".format, st.floats(1900, 2000)))


@st.composite
def regions(draw):
    kind = draw(st.sampled_from(["circle", "range", "polygon", "band", "channels"]))
    if kind == "circle":
        return SkyCircle(draw(lons), draw(lats), draw(st.floats(1e-6, 180)), draw(frames))
    if kind == "range":
        a, b = sorted([draw(lats), draw(lats)])
        return SkyRange(draw(lons), draw(lons), a, b, draw(frames))
    if kind == "polygon":
        lon, lat, size = draw(lons), draw(st.floats(-80, 80)), draw(st.floats(1e-3, 5))
        return SkyPolygon(((lon, lat), (lon + size, lat), (lon + size, lat + size), (lon, lat + size)), draw(frames))
    if kind == "band":
        unit, kind = draw(st.sampled_from([("GHz", "frequency"), ("m", "wavelength"), ("km/s", "velocity")]))
        top = 1e5 if kind == "velocity" else 1e3
        low = -top if kind == "velocity" else 1e-6
        rest = draw(st.one_of(st.none(), st.floats(1e6, 1e12)))
        return SpectralRange(draw(st.floats(low, top)), draw(st.floats(low, top)), unit, kind,
                             draw(st.sampled_from(["radio", "optical", "relativistic"])), rest)
    lo = draw(st.integers(0, 10000))
    return ChannelRange(lo, lo + draw(st.integers(0, 1000)))


@settings(max_examples=150, deadline=None)
@given(regions())
def test_describe_parses_back_to_the_same_region_and_pickles(region):
    parser = {"CIRCLE": parse_pos, "RANGE": parse_pos, "POLYGON": parse_pos, "BAND": parse_band,
              "CHANNEL": parse_channels}[region.describe().split()[0]]
    assert parser(region.describe()) == region
    assert pickle.loads(pickle.dumps(region)) == region
    json.dumps(region.as_dict(), allow_nan=False)
