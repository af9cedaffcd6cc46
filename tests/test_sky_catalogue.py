"""Catalogues in (ingest.sky.catalogue) and the cut-out request of each source (ingest.sky.sources).

The SoFiA-2 fixtures in tests/data/catalogues are written in SoFiA-2's exact layout by
tests/data/catalogues/make_sofia_catalogues.py, whose SOURCES and REGION are the truth here.
"""
from __future__ import annotations

import os
import pickle
import re

import pytest
from astropy import units as u
from astropy.coordinates import Angle
from astropy.table import Table
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.errors import ConfigError
from ingest.sky.bands import SpectralRange, parse_band
from ingest.sky.catalogue import read_catalogue
from ingest.sky.sofia_files import read_par_settings
from ingest.sky.sources import (BoundingBox, ColumnSize, FixedSize, cutout_requests, file_stems, parse_size,
                                safe_stem)
from tests.data.catalogues import make_sofia_catalogues as made

DATA = os.path.join(os.path.dirname(__file__), "data", "catalogues")
REGION_TXT, REGION_XML = os.path.join(DATA, "wallaby_region_cat.txt"), os.path.join(DATA, "wallaby_region_cat.xml")
OFFSET_TXT, OFFSET_XML = os.path.join(DATA, "wallaby_offset_cat.txt"), os.path.join(DATA, "wallaby_offset_cat.xml")
REGION_PAR, OFFSET_PAR = os.path.join(DATA, "wallaby_region.par"), os.path.join(DATA, "wallaby_offset.par")
START = (made.REGION[0], made.REGION[2], made.REGION[4])  # where the region starts in the cube
C_KM_S = 299792.458
HI_REST_HZ = 1.420405752e9


def absolute_bboxes():
    return [tuple(b + START[k // 2] for k, b in enumerate(s["bbox"])) for s in made.SOURCES]


def write_csv(path, text):
    with open(path, "w") as fh:
        fh.write(text)
    return str(path)


# --- SoFiA-2's own catalogues ---------------------------------------------------------------

def test_sofia_fixtures_are_in_sofia_layout():
    """The text fixture has SoFiA-2's fixed widths: 1 + 28 characters for the quoted name, 14 per column."""
    with open(REGION_TXT) as fh:
        lines = fh.read().split("\n")
    assert lines[0] == "# SoFiA source catalogue"
    header = [line for line in lines if line.startswith("#") and line[1:].split()[:2] == ["name", "id"]]
    data = [line for line in lines if line.startswith(' ')]
    assert len(header) == 1 and len(data) == len(made.SOURCES)
    width = 1 + 2 * made.WIDTH + made.WIDTH * len(made.COLUMNS)
    assert {len(header[0])} | {len(line) for line in data} == {width}


def test_both_sofia_formats_read_to_the_same_sources():
    text = read_catalogue(REGION_TXT, sofia_par=REGION_PAR)
    xml = read_catalogue(REGION_XML, sofia_par=REGION_PAR)
    assert (text.format, xml.format) == ("sofia-ascii", "sofia-votable")
    assert text.creator == xml.creator == "SoFiA 2.5.0 (24-Jun-2022)"
    for c in (text, xml):
        assert (c.frame, c.spectral_kind, c.spectral_unit, c.pixel_offset) == ("icrs", "frequency", "Hz", START)
        assert [o.unit for o in (c.origin("ra"), c.origin("dec"), c.origin("freq"))] == ["deg", "deg", "Hz"]
    assert [s.bbox for s in text] == [s.bbox for s in xml] == absolute_bboxes()
    for a, b, truth in zip(text, xml, made.SOURCES):
        assert a.name == b.name and a.name.startswith("SoFiA J") and not a.problems and not b.problems
        # The text file keeps what %14.6f and %14.5e keep; the VOTable keeps %.15e.
        assert b.x == pytest.approx(truth["x"] + START[0], abs=1e-9)
        assert a.x == pytest.approx(b.x, abs=5e-7) and a.z == pytest.approx(b.z, abs=5e-7)
        assert a.lon_deg == pytest.approx(b.lon_deg, abs=5e-7) and a.lat_deg == pytest.approx(b.lat_deg, abs=5e-7)
        assert a.spectral == pytest.approx(b.spectral, rel=5e-6)


def test_sofia_names_follow_the_sky_position():
    """SoFiA-2 names a source from its centroid: 'SoFiA Jhhmmss.ss-ddmmss.s'."""
    for source in read_catalogue(REGION_XML):
        ra = Angle(source.lon_deg, u.deg).hms
        sign = "-" if source.lat_deg < 0 else "+"
        assert source.name.startswith(f"SoFiA J{int(ra.h):02d}{int(ra.m):02d}") and sign in source.name


# --- any table astropy reads ----------------------------------------------------------------

def reference_table():
    """The SoFiA-2 VOTable's sources as an astropy table with units."""
    xml = read_catalogue(REGION_XML)
    table = Table()
    table["name"] = [s.name for s in xml]
    table["ra"] = [s.lon_deg for s in xml] * u.deg
    table["dec"] = [s.lat_deg for s in xml] * u.deg
    table["freq"] = [s.spectral / 1e6 for s in xml] * u.MHz
    for k, column in enumerate(("x_min", "x_max", "y_min", "y_max", "z_min", "z_max")):
        table[column] = [s.bbox[k] for s in xml]
    return xml, table


@pytest.mark.parametrize("extension", ["csv", "ecsv", "vot", "fits"])
def test_astropy_formats_read_to_the_same_sources(tmp_path, extension):
    xml, table = reference_table()
    path = tmp_path / f"cat.{extension}"
    if extension == "csv":  # CSV carries no units: the frequency's is given
        table.write(path, format="ascii.csv")
    else:
        table.write(path, format={"vot": "votable"}.get(extension, None))
    cat = read_catalogue(path, units={"freq": "MHz"} if extension == "csv" else None)
    assert len(cat) == len(xml)
    assert cat.origin("freq").unit_from == ("units= override" if extension == "csv" else "table")
    for a, b in zip(cat, xml):
        assert (a.name, a.bbox) == (b.name, b.bbox)
        assert a.lon_deg == pytest.approx(b.lon_deg, abs=1e-12) and a.lat_deg == pytest.approx(b.lat_deg, abs=1e-12)
        assert a.spectral == pytest.approx(b.spectral, rel=1e-12)


def test_column_overrides_and_units(tmp_path):
    path = write_csv(tmp_path / "cat.csv", "Source,RAJ2000,DEJ2000,VHEL,fmhz\nNGC 1,150.1,-30.2,1234.5,1415.0\n")
    cat = read_catalogue(path, columns={"name": "source", "ra": "RAJ2000", "dec": "DEJ2000", "v_opt": "VHEL"},
                         units={"v_opt": "km/s"}, frame="fk5")
    (source,) = cat.sources
    assert (source.name, source.lon_deg, source.lat_deg, source.spectral) == ("NGC 1", 150.1, -30.2, 1234500.0)
    assert (cat.frame, cat.spectral_kind, cat.spectral_convention) == ("fk5", "velocity", "optical")
    assert cat.spectral_unit == "m/s"
    assert cat.origin("ra").matched_by == "columns= override" and cat.origin("v_opt").unit_from == "units= override"
    by_freq = read_catalogue(path, columns={"name": "Source", "ra": "RAJ2000", "dec": "DEJ2000", "freq": "fmhz"},
                             units={"freq": "MHz"})
    assert by_freq.sources[0].spectral == 1415.0e6 and by_freq.spectral_kind == "frequency"
    with pytest.raises(ConfigError, match=r"cat\.csv.*RAJ2001.*lacks.*Source, RAJ2000, DEJ2000, VHEL, fmhz"):
        read_catalogue(path, columns={"ra": "RAJ2001"})
    with pytest.raises(ConfigError, match="unknown key.*'radec'"):
        read_catalogue(path, columns={"radec": "RAJ2000"})
    with pytest.raises(ConfigError, match=r"VHEL \(v_opt\) has unit 'deg'.*velocity"):
        read_catalogue(path, columns={"v_opt": "VHEL"}, units={"v_opt": "deg"})


def test_sexagesimal_columns(tmp_path):
    path = write_csv(tmp_path / "cat.csv", "name,ra,dec\n"
                                           "a,10:00:28.81,-30:15:00.4\n"
                                           "b,10h00m06.71s,-30d02m10.8s\n"
                                           "c,150.12,-30.25\n"
                                           "d,25:99:xx,-30:00:00\n")
    cat = read_catalogue(path)
    a, b, c, d = cat.sources
    assert a.lon_deg == pytest.approx(Angle("10:00:28.81", u.hourangle).deg, abs=1e-12)
    assert a.lat_deg == pytest.approx(-(30 + 15 / 60 + 0.4 / 3600), abs=1e-12)
    assert b.lon_deg == pytest.approx(150.027958333, abs=1e-9) and b.lat_deg == pytest.approx(-30.036333333, abs=1e-9)
    assert (c.lon_deg, c.lat_deg) == (150.12, -30.25)  # a plain number is in degrees
    assert d.lon_deg is None and d.problem("sky") == "ra = '25:99:xx' is not an angle"


@pytest.mark.parametrize("lon, lat, frame", [
    ("RAJ2000", "DEJ2000", "fk5"), ("_RAJ2000", "_DEJ2000", "fk5"), ("RA_ICRS", "DE_ICRS", "icrs"),
    ("RAdeg", "DEdeg", "icrs"), ("ra_deg", "dec_deg", "icrs"), ("GLON", "GLAT", "galactic"),
    ("_Glon", "_Glat", "galactic"),
])
def test_vizier_and_cds_columns_are_usual_names_with_their_frame(tmp_path, lon, lat, frame):
    path = write_csv(tmp_path / "vizier.csv", f"Name,{lon},{lat}\nNGC 3109,150.78,-26.16\n")
    cat = read_catalogue(path)
    (source,) = cat.sources
    assert (cat.frame, source.lon_deg, source.lat_deg) == (frame, 150.78, -26.16)
    assert (cat.origin("lon").column, cat.origin("lat").column) == (lon, lat)
    assert cat.origin("lon").matched_by == "usual name"
    # The command line always passes its --frame (default icrs): a frame the names state wins.
    assert read_catalogue(path, frame="icrs").frame == frame
    assert cutout_requests(cat, FixedSize(0.1))[0].pos.frame == frame


def test_vizier_frames_against_frame_and_overrides(tmp_path):
    path = write_csv(tmp_path / "v.csv", "Name,RAdeg,DEdeg,RAJ2000,DEJ2000\na,150.1,-30.2,10 00 28.81,-30 15 00.4\n")
    sexagesimal = read_catalogue(path)  # RAJ2000 comes before RAdeg in SKY_NAMES
    assert (sexagesimal.origin("ra").column, sexagesimal.frame) == ("RAJ2000", "fk5")
    degrees = {"ra": "RAdeg", "dec": "DEdeg"}
    assert read_catalogue(path, columns=degrees).frame == "icrs"  # RAdeg states no frame: frame= decides
    assert read_catalogue(path, columns=degrees, frame="fk5").frame == "fk5"
    sexagesimal = read_catalogue(path, columns={"ra": "RAJ2000", "dec": "DEJ2000"})
    assert sexagesimal.frame == "fk5"  # named by columns=, the name still states the frame
    assert sexagesimal.sources[0].lon_deg == pytest.approx(Angle("10:00:28.81", u.hourangle).deg, abs=1e-12)
    assert sexagesimal.origin("ra").matched_by == "columns= override"
    with pytest.raises(ConfigError, match=r"columns RAJ2000/DE_ICRS name different frames \(fk5, icrs\)"):
        read_catalogue(write_csv(tmp_path / "m.csv", "Name,RAJ2000,DE_ICRS\na,1,2\n"),
                       columns={"ra": "RAJ2000", "dec": "DE_ICRS"})
    with pytest.raises(ConfigError, match=r"columns GLON/GLAT are galactic positions but stand for ra/dec"):
        read_catalogue(write_csv(tmp_path / "g.csv", "Name,GLON,GLAT\na,1,2\n"), columns={"ra": "GLON", "dec": "GLAT"})
    with pytest.raises(ConfigError, match=r"columns RAdeg/DEdeg are equatorial but frame='galactic'"):
        read_catalogue(path, columns=degrees, frame="galactic")


@pytest.mark.parametrize("spaced, unspaced", [
    ("1.4008 GHz 1.4012 GHz", "1.4008GHz 1.4012GHz"),
    ("1400 km/s 1500 km/s", "1400km/s 1500km/s"),
    ("1400 km/s 1500 km/s optical rest=1420.405752MHz", "1400km/s 1500km/s optical rest=1420.405752MHz"),
    ("1.4008GHz 1.4012 GHz", "1.4008GHz 1.4012GHz"),
    ("21.1 cm 21.2 cm", "21.1cm 21.2cm"),
])
def test_bands_spaced_as_astropy_writes_quantities(spaced, unspaced):
    assert parse_band(spaced) == parse_band(unspaced)
    quantity = " ".join(str(q) for q in (1.4008 * u.GHz, 1.4012 * u.GHz))  # astropy's own spacing
    assert parse_band(quantity) == SpectralRange(1.4008, 1.4012, "GHz", "frequency")


@pytest.mark.parametrize("text", ["1400 km/s 1500", "1400 1500 km/s 1600", "1400 1500km/s", "1400 GHz 1500 km/s"])
def test_spaced_bands_still_refuse_a_bare_number_beside_a_unit(text):
    with pytest.raises(ConfigError, match="band"):
        parse_band(text)


# --- SoFiA-2 regions: where the pixel columns start ----------------------------------------

def test_region_offset_from_the_parameter_file(tmp_path):
    # offset = false: the text catalogue is relative to the region, and the .par places it.
    relative = read_catalogue(REGION_TXT)
    assert relative.pixel_offset == (0, 0, 0) and [s.bbox for s in relative] == [s["bbox"] for s in made.SOURCES]
    placed = read_catalogue(REGION_TXT, sofia_par=REGION_PAR)
    assert [s.bbox for s in placed] == absolute_bboxes()
    assert placed.pixel_offset_from.startswith(f"SoFiA-2 parameter file {REGION_PAR}")
    # offset = true: SoFiA-2 already wrote full-cube pixels, and the .par says so.
    already = read_catalogue(OFFSET_TXT, sofia_par=OFFSET_PAR)
    assert already.pixel_offset == (0, 0, 0) and [s.bbox for s in already] == absolute_bboxes()
    assert [s.x for s in already] == [s.x for s in placed]
    # Given directly.
    direct = read_catalogue(REGION_TXT, region_offset=START)
    assert [s.bbox for s in direct] == absolute_bboxes()
    # A par file of the whole cube (no region) shifts nothing.
    whole = write_csv(tmp_path / "whole.par", "input.data = cube.fits\ninput.region =\nparameter.offset = false\n")
    assert read_catalogue(REGION_TXT, sofia_par=whole).pixel_offset == (0, 0, 0)


def test_sofia_votable_places_itself_and_refuses_another_runs_par():
    assert [s.bbox for s in read_catalogue(REGION_XML)] == absolute_bboxes()
    assert [s.bbox for s in read_catalogue(OFFSET_XML)] == absolute_bboxes()
    with pytest.raises(ConfigError, match=r"wallaby_region_cat\.xml.*\(128, 64, 100\).*wallaby_offset\.par"):
        read_catalogue(REGION_XML, sofia_par=OFFSET_PAR)
    with pytest.raises(ConfigError, match="not both"):
        read_catalogue(REGION_TXT, sofia_par=REGION_PAR, region_offset=START)


def test_par_file_read_by_sofia_rules(tmp_path):
    par = write_csv(tmp_path / "a.par", "# comment\n"
                                        "input.region = 1, 2, 3, 4, 5, 6   # inline comment\n"
                                        "  parameter.offset = True\n"
                                        "-bad line = ignored\n"
                                        "input.region = 10,20,30,40,50,60\n")
    settings_read = read_par_settings(par)
    assert settings_read["input.region"] == "10,20,30,40,50,60"  # a later setting replaces an earlier one
    assert settings_read["parameter.offset"] == "True"  # not exactly 'true': SoFiA-2 reads false
    assert read_catalogue(REGION_TXT, sofia_par=par).pixel_offset == (10, 30, 50)
    bad = write_csv(tmp_path / "bad.par", "input.region = 1, 2, 3\n")
    with pytest.raises(ConfigError, match=r"bad\.par.*input\.region = '1, 2, 3' is not six"):
        read_catalogue(REGION_TXT, sofia_par=bad)
    with pytest.raises(ConfigError, match="region_offset"):
        read_catalogue(REGION_TXT, region_offset=(1, -2, 3))


# --- bad rows and bad files -----------------------------------------------------------------

BAD_ROWS = ("name,ra,dec,freq,x_min,x_max,y_min,y_max,z_min,z_max\n"
            "good,150.0,-30.0,1.4e9,1,5,1,5,1,5\n"
            "nan ra,nan,-30.0,1.4e9,1,5,1,5,1,5\n"
            "far south,150.0,-95.0,1.4e9,1,5,1,5,1,5\n"
            "negative box,150.0,-30.0,1.4e9,-3,5,1,5,1,5\n"
            "inverted box,150.0,-30.0,1.4e9,1,5,9,5,1,5\n"
            ",150.0,-30.0,1.4e9,1,5,1,5,1,5\n"
            "half pixel,150.0,-30.0,1.4e9,1,5,1.5,5,1,5\n"
            "no freq,150.0,-30.0,,1,5,1,5,1,5\n")


def test_bad_rows_become_skipped_sources_with_reasons(tmp_path):
    cat = read_catalogue(write_csv(tmp_path / "cat.csv", BAD_ROWS), units={"freq": "Hz"})
    boxes = cutout_requests(cat, BoundingBox(2))
    assert boxes[0].pixel_box_fits == (-1, 7, -1, 7, -1, 7) and boxes[0].skip_reason is None
    assert [r.skip_reason for r in boxes[1:]] == [
        None, None,
        "negative bounding box: x_min = -3 in the cube",
        "inverted bounding box: y_min = 9 > y_max = 5",
        "no name in column name",
        "y_min = 1.5 is not a whole pixel",
        None]  # a bounding box needs no frequency
    sky = cutout_requests(cat, FixedSize(0.05, 300, "km/s"), rest_hz=HI_REST_HZ)
    assert [r.skip_reason for r in sky] == [
        None, "ra is not a number", "dec = -95 deg is outside -90..90", None, None, "no name in column name",
        None, "freq is not a number"]
    assert sky[5].file_stem == "unnamed" and sky[5].name == ""


def test_missing_columns_are_errors_naming_file_and_columns(tmp_path):
    path = write_csv(tmp_path / "nobox.csv", "name,ra,dec,x_min,x_max,y_min,y_max\na,150,-30,1,2,3,4\n")
    cat = read_catalogue(path)
    has = "it has columns: name, ra, dec, x_min, x_max, y_min, y_max"
    with pytest.raises(ConfigError, match=rf"nobox\.csv.*no bounding box.*a size is needed.*{has}"):
        cutout_requests(cat)
    with pytest.raises(ConfigError, match=rf"nobox\.csv: lacks column\(s\) z_min, z_max needed by bounding box.*{has}"):
        cutout_requests(cat, BoundingBox(10))
    with pytest.raises(ConfigError, match=rf"nobox\.csv: lacks column\(s\) a spectral column .*{has}"):
        cutout_requests(cat, parse_size("5arcmin 300km/s"))
    with pytest.raises(ConfigError, match=rf"nobox\.csv: lacks column\(s\) r_arcsec.*{has}"):
        cutout_requests(cat, ColumnSize("r_arcsec"))
    unnamed = read_catalogue(write_csv(tmp_path / "unnamed.csv", "ra,dec\n150,-30\n"))
    with pytest.raises(ConfigError, match=r"unnamed\.csv: lacks column\(s\) name \(or id\)"):
        cutout_requests(unnamed, FixedSize(0.1))


def test_unreadable_and_empty_catalogues_are_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"nothere\.csv: no such file"):
        read_catalogue(tmp_path / "nothere.csv")
    garbage = tmp_path / "garbage.fits"
    garbage.write_bytes(b"\x00\x01not a table" * 100)
    with pytest.raises(ConfigError, match=r"garbage\.fits: cannot read it as fits"):
        read_catalogue(garbage)
    with pytest.raises(ConfigError, match=r"empty\.csv: has no sources \(0 rows\); columns: name, ra, dec"):
        read_catalogue(write_csv(tmp_path / "empty.csv", "name,ra,dec\n"))
    truncated = tmp_path / "truncated_cat.txt"
    truncated.write_text(open(REGION_TXT).read()[:-200])
    with pytest.raises(ConfigError, match=r"truncated_cat\.txt line 25: .* columns where the header names 41"):
        read_catalogue(truncated)


# --- cut-out requests ------------------------------------------------------------------------

def test_bounding_box_is_the_default_and_is_not_clipped():
    requests = cutout_requests(read_catalogue(REGION_TXT))
    assert [r.pixel_box_fits for r in requests] == [
        tuple(v - 10 if k % 2 == 0 else v + 10 for k, v in enumerate(s["bbox"])) for s in made.SOURCES]
    assert requests[3].pixel_box_fits[0] == -10  # x_min 0 less the margin: clipping comes later
    assert all(r.pos is None and r.band is None for r in requests)
    assert [r.file_stem for r in requests][0] == requests[0].name.replace(" ", "_")


def test_velocity_half_width_about_a_frequency():
    cat = read_catalogue(REGION_XML)
    requests = cutout_requests(cat, parse_size("5arcmin 300km/s"), rest_hz=HI_REST_HZ)
    for r, s in zip(requests, cat):
        assert (r.pos.lon_deg, r.pos.lat_deg, r.pos.frame) == (s.lon_deg, s.lat_deg, "icrs")
        assert r.pos.radius_deg == pytest.approx(5 / 60, rel=1e-15)
        band = r.band
        assert (band.kind, band.convention, band.unit, band.rest_hz) == ("velocity", "radio", "km/s", HI_REST_HZ)
        v_radio_km_s = C_KM_S * (1 - s.spectral / HI_REST_HZ)  # the radio convention's definition
        assert (band.lo + band.hi) / 2 == pytest.approx(v_radio_km_s, abs=1e-9)
        assert band.hi - band.lo == pytest.approx(600, abs=1e-9)
    with pytest.raises(ConfigError, match="needs the rest frequency.*rest_hz"):
        cutout_requests(cat, parse_size("5arcmin 300km/s"))


def test_frequency_and_wavelength_half_widths():
    cat = read_catalogue(REGION_XML)
    s = cat.sources[0]
    band = cutout_requests(cat, FixedSize(0.1, 1.5, "MHz"))[0].band  # same kind: no rest frequency needed
    assert (band.kind, band.unit, band.convention, band.rest_hz) == ("frequency", "MHz", None, None)
    assert (band.lo, band.hi) == pytest.approx((s.spectral / 1e6 - 1.5, s.spectral / 1e6 + 1.5), abs=1e-9)
    band = cutout_requests(cat, FixedSize(0.1, 0.05, "mm"))[0].band
    centre_mm = 299792458.0 / s.spectral * 1e3
    assert band.kind == "wavelength" and (band.lo + band.hi) / 2 == pytest.approx(centre_mm, rel=1e-12)


def test_velocity_column_keeps_its_convention(tmp_path):
    path = write_csv(tmp_path / "v.csv", "name,ra,dec,v_opt\ngalaxy,150,-30,1500000\n")
    in_m_s = read_catalogue(path, units={"v_opt": "m/s"})
    band = cutout_requests(in_m_s, parse_size("2arcmin 250km/s"))[0].band  # no rest needed
    assert (band.kind, band.convention, band.lo, band.hi, band.rest_hz) == ("velocity", "optical", 1250, 1750, None)
    freq_band = cutout_requests(in_m_s, FixedSize(0.1, 1, "MHz"), rest_hz=HI_REST_HZ)[0].band
    f0 = (1500 * u.km / u.s).to(u.MHz, equivalencies=u.doppler_optical(HI_REST_HZ * u.Hz)).value
    assert (freq_band.lo + freq_band.hi) / 2 == pytest.approx(f0, rel=1e-12)


def test_column_size(tmp_path):
    path = write_csv(tmp_path / "c.csv", "name,glon,glat,freq,r,dv\n"
                                         "a,10,-1,1.41e9,90,200\n"
                                         "b,20,2,1.41e9,-5,200\n"
                                         "c,30,3,1.41e9,60,nan\n")
    cat = read_catalogue(path, units={"freq": "Hz"})
    requests = cutout_requests(cat, ColumnSize("r", "dv", radius_unit="arcsec", spectral_unit="km/s"),
                               rest_hz=HI_REST_HZ)
    a = requests[0]
    assert (a.pos.frame, a.pos.radius_deg, a.band.hi - a.band.lo) == ("galactic", 90 / 3600, pytest.approx(400))
    assert requests[1].skip_reason == "radius column r = -5 arcsec is not an angle in (0, 180] deg"
    assert requests[2].skip_reason == "half width nan km/s is not a number > 0"
    with pytest.raises(ConfigError, match=r"radius_unit: 'Hz' is not an angle unit"):
        ColumnSize("r", radius_unit="Hz")
    sofia = read_catalogue(REGION_XML)  # SoFiA-2 writes ell_maj and w20 in pixels unless parameter.physical
    with pytest.raises(ConfigError, match=r"radius column ell_maj is in 'pix', not an angle"):
        cutout_requests(sofia, ColumnSize("ell_maj", "w20"))
    with pytest.raises(ConfigError, match=r"column w20: 'pix' is not a spectral unit"):
        cutout_requests(sofia, ColumnSize("ell_maj", "w20", radius_unit="arcsec"))
    no_band = cutout_requests(cat, parse_size("column:r"))[0]  # a unit-less radius column is in degrees
    assert (no_band.pos.radius_deg, no_band.band) == (90.0, None)


def test_requests_and_catalogues_pickle():
    cat = read_catalogue(REGION_XML)
    requests = cutout_requests(cat, parse_size("5arcmin 300km/s"), rest_hz=HI_REST_HZ)
    assert pickle.loads(pickle.dumps(requests)) == requests
    again = pickle.loads(pickle.dumps(cat))
    assert again.sources == cat.sources and again.column("w20")[0] == "pix"


# --- the size option ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("bbox", BoundingBox(10)),
    ("bbox+0", BoundingBox(0)),
    ("BBOX + 25", BoundingBox(25)),
    ("5arcmin 300km/s", FixedSize(5 / 60, 300.0, "km/s")),
    ("0.1deg,2MHz", FixedSize(0.1, 2.0, "MHz")),
    ("5 arcmin, 1.5e5 m/s", FixedSize(5 / 60, 1.5e5, "m/s")),
    ("30arcsec", FixedSize(30 / 3600)),
    ("5' 0.2nm", FixedSize(5 / 60, 0.2, "nm")),
    ("column:r_arcsec,column:w50", ColumnSize("r_arcsec", "w50")),
    ("column:r", ColumnSize("r")),
])
def test_parse_size(text, expected):
    size = parse_size(text)
    assert type(size) is type(expected)
    if isinstance(size, FixedSize):
        assert size.radius_deg == pytest.approx(expected.radius_deg, rel=1e-15)
        assert (size.spectral_half_width, size.spectral_unit) == (expected.spectral_half_width, expected.spectral_unit)
    else:
        assert size == expected


@pytest.mark.parametrize("text, message", [
    ("300km/s 5arcmin", "not an angle; the radius comes first"),
    ("5arcmin 3Jy", "not a spectral unit"),
    ("bbox-3", "cannot read"),
    ("5arcmin 300 furlongs/fortnight", "cannot read|unknown unit"),
    ("", "empty"),
    ("0arcmin", r"radius_deg.*\(0, 180\]"),
    ("5arcmin -300km/s", "spectral_half_width.*> 0"),
])
def test_parse_size_refusals(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_size(text)


# --- file stems -----------------------------------------------------------------------------

SAFE = re.compile(r"[A-Za-z0-9+\-._]+\Z")


def test_file_stems_examples():
    assert safe_stem("SoFiA J100028.81-301500.4") == "SoFiA_J100028.81-301500.4"
    assert safe_stem("../etc/passwd") == "_._etc_passwd"
    assert safe_stem("..") == "_." and safe_stem(".") == "_" and safe_stem(None) == "unnamed"
    assert file_stems(["A", "a", "b", "A_0"], [0, 1, 2, 3]) == ["A_0_0", "a_1", "b", "A_0"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=30), st.sampled_from(["a", "A", "a_1", ".", "..", "x/y"])),
                min_size=1, max_size=40))
def test_file_stems_are_safe_and_unique(names):
    rows = list(range(len(names)))
    stems = file_stems(names, rows)
    assert len({s.casefold() for s in stems}) == len(stems)
    for name, stem in zip(names, stems):
        assert SAFE.match(stem) and not stem.startswith(".")
        assert stem.startswith(safe_stem(name))
    # A name that is already safe and shared with no other source is kept as it is.
    for name, stem in zip(names, stems):
        if name and SAFE.match(name) and not name.startswith(".") and \
                sum(safe_stem(n).casefold() == name.casefold() for n in names) == 1:
            assert stem == name
