"""Units of catalogue columns stated or refused (ingest.sky.catalogue), and numbers in catalogue
and band messages written for people (ingest.sky.bands.readable).

The trap: a CSV `name,ra,dec,v_rad` in km/s (4201.33) read as m/s puts every source 4.2 km/s from
the cube's 4200 km/s instead of on it, and the job skips them all as off the cube. A spectral
column with no unit in the file and none given is refused, naming the column and how to give it.
"""
from __future__ import annotations

import argparse
import re

import numpy as np
import pytest
from astropy.io import fits

from ingest.config import load_config
from ingest.config.arguments import add_run_arguments, config_from_args
from ingest.driver.cutouts.sources import cube_sources
from ingest.errors import ConfigError
from ingest.formats.reader import read_layout
from ingest.sky.bands import SpectralRange, readable
from ingest.sky.catalogue import read_catalogue
from ingest.sky.sources import FixedSize, cutout_requests
from ingest.transports import open_transport

N_SOURCES = 200
V_KM_S = 4201.33  # the cube's channels run 4060..4340 km/s
LONG_TAIL = re.compile(r"\d\.\d{7,}|\d{11,}")  # 159.17499999999998, 0.30000000000000004


def km_s_catalogue(path, header="name,ra,dec,v_rad"):
    rows = [f"src{i:03d},{150 + (i % 5) * 1e-3:.6f},{-30 + (i // 5 % 5) * 1e-3:.6f},{V_KM_S + i % 7}"
            for i in range(N_SOURCES)]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def velocity_cube(tmp_path_factory):
    """A 40 x 40 x 30 cube about (150, -30) deg whose VRAD axis runs 4060..4350 km/s in m/s."""
    header = fits.Header()
    for key, value in {"CTYPE1": "RA---SIN", "CRVAL1": 150.0, "CRPIX1": 20.0, "CDELT1": -1e-3, "CUNIT1": "deg",
                       "CTYPE2": "DEC--SIN", "CRVAL2": -30.0, "CRPIX2": 20.0, "CDELT2": 1e-3, "CUNIT2": "deg",
                       "CTYPE3": "VRAD", "CRVAL3": 4.2e6, "CRPIX3": 15.0, "CDELT3": 1e4, "CUNIT3": "m/s",
                       "SPECSYS": "BARYCENT", "RESTFRQ": 1.420405752e9}.items():
        header[key] = value
    path = tmp_path_factory.mktemp("units") / "vcube.fits"
    fits.PrimaryHDU(np.zeros((30, 40, 40), dtype=np.float32), header).writeto(path)
    return str(path)


def sources_of(cube_path, cfg):
    with open_transport(cube_path, "posix", threads=1) as transport:
        return cube_sources(cfg, read_layout(transport, 0))


def cli_config(argv):
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, "cutouts")
    return config_from_args(parser.parse_args(argv))


# --- a spectral column's unit: from the file, given, or refused -----------------------------

def test_a_velocity_column_without_a_unit_is_refused_naming_it(tmp_path, velocity_cube):
    path = km_s_catalogue(tmp_path / "cat.csv")
    with pytest.raises(ConfigError, match=r"cat\.csv: column v_rad \(a velocity\) has no unit; say which, e\.g\. "
                                          r"with --columns v_rad=v_rad\[km/s\] \(or units=\{'v_rad': 'km/s'\}"):
        read_catalogue(path)
    cfg = load_config({"source": velocity_cube, "catalogue": path, "size": "20arcsec 30km/s", "progress": False})
    with pytest.raises(ConfigError, match=r"column v_rad \(a velocity\) has no unit"):
        sources_of(velocity_cube, cfg)  # before any data moves, not 200 skipped sources
    renamed = km_s_catalogue(tmp_path / "vel.csv", "name,ra,dec,VEL")
    with pytest.raises(ConfigError, match=r"column VEL \(a velocity\) has no unit.*--columns v_rad=VEL\[km/s\]"):
        read_catalogue(renamed, columns={"v_rad": "VEL"})
    freq = tmp_path / "f.csv"
    freq.write_text("name,ra,dec,freq\na,150,-30,1.4e9\n")
    with pytest.raises(ConfigError, match=r"column freq \(a frequency\) has no unit.*--columns freq=freq\[MHz\]"):
        read_catalogue(str(freq))


@pytest.mark.parametrize("columns", ["v_rad=v_rad[km/s]", "v_rad=[km/s]", "name=name,v_rad=V_RAD[ km/s ]"])
def test_the_command_lines_column_unit_reads_km_s(tmp_path, velocity_cube, columns):
    path = km_s_catalogue(tmp_path / "cat.csv")
    cfg = cli_config(["--source", velocity_cube, "--catalogue", path, "--output-dir", str(tmp_path / "o"),
                      "--size", "20arcsec 30km/s", "--columns", columns, "--no-progress"])
    sources = sources_of(velocity_cube, cfg)
    assert len(sources) == N_SOURCES and all(s.skip_reason is None for s in sources)
    # channel k is 4200 + 10 (k - 14) km/s: 4201.33 +- 30 km/s takes channels 12..17 (4180..4230)
    assert sources[0].box[0] == (12, 18)
    assert "4171.33 4231.33 km/s" in sources[0].region_text


def test_units_from_python_and_given_twice(tmp_path):
    path = km_s_catalogue(tmp_path / "cat.csv")
    by_units = read_catalogue(path, units={"v_rad": "km/s"})
    by_columns = read_catalogue(path, columns={"v_rad": "v_rad[km/s]"})
    for cat in (by_units, by_columns):
        assert cat.sources[0].spectral == pytest.approx(V_KM_S * 1e3, rel=1e-15)
        assert (cat.spectral_unit, cat.origin("v_rad").unit, cat.origin("v_rad").unit_from) == \
            ("m/s", "km/s", "units= override")
    band = cutout_requests(by_units, FixedSize(0.01, 300, "km/s"))[0].band
    assert (band.lo, band.hi) == pytest.approx((V_KM_S - 300, V_KM_S + 300), abs=1e-9)
    with pytest.raises(ConfigError, match=r"unit of v_rad is given twice, 'km/s' in columns= and 'm/s' in units="):
        read_catalogue(path, columns={"v_rad": "[km/s]"}, units={"v_rad": "m/s"})
    with pytest.raises(ConfigError, match=r"has unit 'deg', which is not a velocity; give its unit with "
                                          r"--columns v_rad=v_rad\[UNIT\]"):
        read_catalogue(path, columns={"v_rad": "[deg]"})


def test_a_column_named_with_brackets_is_that_column(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("name,ra,dec,f[MHz]\na,150,-30,1420\n")
    cat = read_catalogue(str(path), columns={"freq": "f[MHz]"}, units={"freq": "MHz"})
    assert cat.origin("freq").column == "f[MHz]" and cat.sources[0].spectral == 1420e6


def test_angles_without_a_unit_stay_degrees_and_sofia_units_are_read(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("name,ra,dec,x_min,x_max,y_min,y_max,z_min,z_max\na,150.5,-30.25,1,2,3,4,5,6\n")
    cat = read_catalogue(str(path))  # no spectral column: nothing to state
    assert (cat.sources[0].lon_deg, cat.sources[0].lat_deg, cat.sources[0].bbox) == (150.5, -30.25, (1, 2, 3, 4, 5, 6))
    assert cat.origin("ra").unit_from == "default" and cat.origin("x_min").unit is None


def test_an_ecsv_named_csv_keeps_its_units(tmp_path):
    path = tmp_path / "cat.csv"
    path.write_text("# %ECSV 1.0\n# ---\n# delimiter: ','\n# datatype:\n# - {name: name, datatype: string}\n"
                    "# - {name: ra, unit: deg, datatype: float64}\n# - {name: dec, unit: deg, datatype: float64}\n"
                    "# - {name: v_rad, unit: km / s, datatype: float64}\n# schema: astropy-2.0\n"
                    "name,ra,dec,v_rad\na,150,-30,4201.33\n")
    cat = read_catalogue(str(path))
    assert cat.format == "ascii.ecsv" and cat.sources[0].spectral == pytest.approx(4201330.0, rel=1e-15)


# --- numbers for people ---------------------------------------------------------------------

@pytest.mark.parametrize("values, unit, text", [
    (159.17499999999998, "deg", "159.175 deg"),
    (-95.123456789, "deg", "-95.123457 deg"),
    (-1e-9, "deg", "0 deg"),
    (1417300000.0000002, "Hz", "1.4173 GHz"),
    ([1417.3000000000002, 1417.6], "MHz", "1417.3..1417.6 MHz"),
    ([999e3, 1.001e6], "Hz", "0.999..1.001 MHz"),
    (150000.00000000003, "m/s", "150 km/s"),
    (float("nan"), "km/s", "nan km/s"),
    (1234567.0, "", "1234567"),
])
def test_readable(values, unit, text):
    assert readable(values, unit) == text


def test_band_and_catalogue_messages_have_no_float_tails(tmp_path):
    with pytest.raises(ConfigError) as band_error:
        SpectralRange(0.1 + 0.2, 300000.1 + 0.2, "km/s", "velocity")
    assert str(band_error.value) == "band 0.3 300000.3 km/s: a velocity must be below the speed of light"
    path = tmp_path / "cat.csv"
    path.write_text("name,ra,dec,v_rad\nfast,150,-30,299700.1\nsouth,150,-95.12345678901234,1000\n")
    cat = read_catalogue(str(path), units={"v_rad": "km/s"})
    reasons = [r.skip_reason for r in cutout_requests(cat, FixedSize(0.01, 300, "km/s"))]
    assert reasons == ["band 299400.1 300000.1 km/s: a velocity must be below the speed of light",
                       "dec = -95.123457 deg is outside -90..90"]
    freq = tmp_path / "f.csv"
    freq.write_text("name,ra,dec,freq\nneg,150,-30,-1417.3000000000002\n")
    (source,) = read_catalogue(str(freq), units={"freq": "MHz"}).sources
    assert source.problem("spectral") == "freq = -1.4173 GHz is not positive"
    assert not any(LONG_TAIL.search(text) for text in [*reasons, source.problem("spectral")])


def test_an_off_cube_reason_rounds_its_region_and_band_for_people(velocity_cube):
    """The region and band in a 'wholly off the cube' reason are rounded (159.17499999999998 deg
    is 159.175 deg), while the region text recorded for a re-run still parses back exactly."""
    from ingest.sky.header import wcs_header
    from ingest.sky.pixels import world_boxes
    from ingest.sky.regions import SkyCircle, parse_pos

    with open_transport(velocity_cube, "posix", threads=1) as transport:
        layout = read_layout(transport, 0)
    far = SkyCircle(159.17499999999998, -30.000000000000004, 0.1 + 0.2)
    far_band = SpectralRange(0.1 + 0.2, 1000.1 + 0.2, "km/s", "velocity")
    off_sky, off_band = world_boxes(wcs_header(layout), layout.shape, [far, None], [None, far_band])
    assert off_sky == "CIRCLE icrs 159.175 -30 0.3 deg: wholly off the cube" + off_sky.split("wholly off the cube")[1]
    assert off_band.startswith("BAND 0.3 1000.3 km/s radio: wholly off the cube")
    assert not any(LONG_TAIL.search(text) for text in (off_sky, off_band))
    assert parse_pos(far.describe()) == far  # the exact form is kept where it must parse back
