"""Where a cube is (`ingest.sky.footprint`): `info` shows its footprint, spectral range and beam,
a region wholly off the cube and a cut-out job that skipped every source say the same. Every
figure is checked against astropy's own WCS (pixel_to_world at the centre and the corner
pixels), the Doppler formulas written out, and the BEAMS rows' known values."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from astropy import units as u
from astropy.coordinates import ICRS
from astropy.io import fits
from astropy.wcs import WCS

from ingest.errors import RegionError
from ingest.formats.reader import read_any_layout
from ingest.sky.footprint import cube_footprint
from ingest.sky.header import wcs_header
from ingest.sky.world import world_region_box
from ingest.testbed.synth import beams_hdu, build_header
from ingest.transports import open_transport
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (1, 16, 24, 20)  # numpy order: Stokes, FREQ, Dec, RA, as ASKAP writes its cubes
NX, NY, NCHAN = SHAPE[3], SHAPE[2], SHAPE[1]
REST_HZ = 1.420405752e9
C_KM_S = 299792.458
POINTS = [((NX - 1) / 2, (NY - 1) / 2), (0, 0), (NX - 1, 0), (NX - 1, NY - 1), (0, NY - 1)]  # centre, corners


@pytest.fixture(scope="module")
def askap(tmp_path_factory):
    """An ASKAP-like cube: RA/Dec in FK5 J2000, FREQ with RESTFRQ, a BEAMS table of a beam a channel."""
    path = tmp_path_factory.mktemp("info_sky") / "askap.fits"
    header = build_header(SHAPE, -32, restfrq_hz=REST_HZ, beams=True)
    header["RADESYS"] = "FK5"
    header["EQUINOX"] = 2000.0
    header["CDELT1"], header["CDELT2"] = -4.0 / 3600, 4.0 / 3600  # 4 arcsec pixels: corners well apart
    fits.HDUList([fits.PrimaryHDU(np.zeros(SHAPE, np.float32), header), beams_hdu(NCHAN, 1)]).writeto(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wcs = WCS(header)
    fk5 = wcs.celestial.pixel_to_world([p[0] for p in POINTS], [p[1] for p in POINTS])
    freqs_hz = wcs.spectral.pixel_to_world(np.arange(NCHAN)).to_value(u.Hz)
    chan = np.arange(NCHAN)
    return {"path": path, "fk5": fk5, "icrs": fk5.transform_to(ICRS()), "freqs_hz": freqs_hz,
            "radio_km_s": C_KM_S * (1 - freqs_hz / REST_HZ), "optical_km_s": C_KM_S * (REST_HZ / freqs_hz - 1),
            "bmaj": 10 + 0.001 * chan, "bmin": 8 + 0.0005 * chan, "bpa": -40 + 0.01 * chan}


def _layout(path):
    with open_transport(str(path), "posix") as transport:
        return read_any_layout(transport)


def _deg(value: float) -> str:
    """Degrees as a person reads them: to 1e-6 deg."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _check_footprint(fp, askap):
    sky = fp["sky"]
    assert sky["frame"] == "fk5" and sky["pixels"] == [NX, NY]
    points = [sky["centre"], *sky["corners"]]
    assert [tuple(p["pixel"]) for p in points] == [tuple(map(float, p)) for p in POINTS]
    for k, point in enumerate(points):
        np.testing.assert_allclose(point["cube_deg"], [askap["fk5"].ra.deg[k], askap["fk5"].dec.deg[k]],
                                   rtol=0, atol=1e-9)
        np.testing.assert_allclose(point["icrs_deg"], [askap["icrs"].ra.deg[k], askap["icrs"].dec.deg[k]],
                                   rtol=0, atol=1e-9)
    # FK5 J2000 is not ICRS: the two columns must differ by more than the 1e-6 deg people read.
    assert abs(points[0]["icrs_deg"][0] - points[0]["cube_deg"][0]) > 2e-6
    spectral = fp["spectral"]
    assert spectral["ctype"] == "FREQ" and spectral["n_channels"] == NCHAN and spectral["rest_hz"] == REST_HZ
    for key, want in (("frequency_hz", askap["freqs_hz"]), ("velocity_radio_km_s", askap["radio_km_s"]),
                      ("velocity_optical_km_s", askap["optical_km_s"])):
        got = spectral[key]
        np.testing.assert_allclose(got["range"], [want.min(), want.max()], rtol=1e-12)
        np.testing.assert_allclose([got["first"], got["last"]], [want[0], want[-1]], rtol=1e-12)
        np.testing.assert_allclose(got["channel_width"], abs(want[-1] - want[0]) / (NCHAN - 1), rtol=1e-3)
    assert spectral["frequency_hz"]["channel_width"] == pytest.approx(18.5e3, rel=1e-12)
    beam = fp["beam"]
    for key, want in (("bmaj_arcsec", askap["bmaj"]), ("bmin_arcsec", askap["bmin"]), ("bpa_deg", askap["bpa"])):
        np.testing.assert_allclose(beam[key], [want.min(), want.max()], rtol=1e-6)


def test_footprint_of_an_askap_like_cube_is_astropys_wcs_at_its_centre_and_corners(askap):
    layout = _layout(askap["path"])
    _check_footprint(cube_footprint(wcs_header(layout), layout.shape, layout.beams), askap)


def test_info_text_and_json_show_where_the_cube_is(askap):
    env = child_env()
    as_json = cli(["info", askap["path"], "--json"], env)
    assert as_json.returncode == 0, as_json.stderr
    _check_footprint(json.loads(as_json.stdout)["footprint"], askap)
    text = cli(["info", askap["path"]], env)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    for k in range(len(POINTS)):  # every point, in ICRS and in the cube's FK5, to 1e-6 deg
        for coord in (askap["icrs"], askap["fk5"]):
            assert f"{_deg(coord.ra.deg[k])} {_deg(coord.dec.deg[k])} deg" in out
    h, m, s = askap["icrs"][0].ra.hms
    assert f"{int(h):02d}h{int(m):02d}m{s:07.4f}s" in out  # the centre's RA, sexagesimal
    ghz = askap["freqs_hz"] / 1e9
    assert f"{ghz.min():.10g}..{ghz.max():.10g} GHz" in out
    radio, optical = askap["radio_km_s"], askap["optical_km_s"]
    assert f"radio {radio.min():.3f}..{radio.max():.3f} km/s" in out
    assert f"optical {optical.min():.3f}..{optical.max():.3f} km/s" in out
    assert f"BMAJ 10..{askap['bmaj'].max():.3f} arcsec" in out


def test_info_on_an_image_and_a_spectrum_says_what_they_lack(tmp_path):
    image, spectrum = tmp_path / "image.fits", tmp_path / "spectrum.fits"
    fits.PrimaryHDU(np.zeros((24, 20), np.float32), build_header((24, 20), -32)).writeto(image)
    fits.PrimaryHDU(np.zeros(16, np.float32), build_header((16,), -32)).writeto(spectrum)
    env = child_env()
    got = {}
    for path in (image, spectrum):
        proc = cli(["info", path, "--json"], env)
        assert proc.returncode == 0, proc.stderr
        got[path] = json.loads(proc.stdout)["footprint"]
        text = cli(["info", path], env)
        assert text.returncode == 0, text.stderr
        assert "spectral: none" in text.stdout if path == image else "sky: none" in text.stdout
    assert got[image]["sky"] is not None and got[image]["spectral"] is None
    assert "no spectral axis" in got[image]["spectral_problem"]
    assert got[spectrum]["sky"] is None and "no celestial axes" in got[spectrum]["sky_problem"]
    assert got[spectrum]["spectral"]["frequency_hz"] is not None and got[spectrum]["beam"] is None


def test_a_region_wholly_off_the_cube_says_where_the_cube_is(askap):
    centre = askap["icrs"][0]
    where = f"{_deg(centre.ra.deg)} {_deg(centre.dec.deg)} deg"
    proc = cli(["info", askap["path"], "--pos", "CIRCLE 10 10 0.01"], child_env())
    assert proc.returncode == 1
    assert "wholly off the cube" in proc.stderr and where in proc.stderr
    corner = askap["icrs"][3]
    assert f"({_deg(corner.ra.deg)} {_deg(corner.dec.deg)})" in proc.stderr
    ghz = askap["freqs_hz"] / 1e9
    assert f"{ghz.min():.10g}..{ghz.max():.10g} GHz" in proc.stderr
    # A band off the cube: the cube's range in the band's own terms (optical km/s).
    with pytest.raises(RegionError) as caught:
        world_region_box(_layout(askap["path"]), band="100km/s 200km/s optical")
    optical = askap["optical_km_s"]
    assert f"{optical.min():.3f}..{optical.max():.3f} km/s (optical)" in str(caught.value)


def _catalogue(path, rows):
    path.write_text("name,ra,dec,v_opt\n" + "".join(f"{n},{r},{d},{v}\n" for n, r, d, v in rows))
    return path


def test_a_cutouts_job_that_skipped_every_source_fails_saying_where_the_cube_is(askap, tmp_path):
    ra, dec = askap["icrs"][0].ra.deg, askap["icrs"][0].dec.deg
    inside_km_s = float(np.mean(askap["optical_km_s"]))
    env = child_env()
    off = _catalogue(tmp_path / "off.csv", [("slow", ra, dec, 1000.0), ("north", ra, 10.0, inside_km_s)])
    args = ["--source", askap["path"], "--size", "8arcsec 20km/s", "--columns", "v_opt=[km/s]", "--no-probe"]
    proc, _ = mpiexec(2, ["cutouts", "--catalogue", off, "--output-dir", tmp_path / "off", *args], env)
    assert proc.returncode != 0, proc.stdout
    message = proc.stderr
    assert "every one of the catalogue's 2 sources was skipped" in message
    assert f"{_deg(ra)} {_deg(dec)} deg" in message  # the cube's centre, ICRS
    optical = askap["optical_km_s"]  # the catalogue's v_opt: optical velocities in km/s
    assert f"{optical.min():.3f}..{optical.max():.3f} km/s (optical)" in message
    assert "wholly off the cube" in message  # a skip reason
    manifest = json.loads((tmp_path / "off" / "manifest.json").read_text())
    assert [e["status"] for e in manifest["sources"]] == ["skipped", "skipped"]
    # One source on the cube: the job cut it and succeeds, the other still skipped.
    some = _catalogue(tmp_path / "some.csv", [("on", ra, dec, inside_km_s), ("north", ra, 10.0, inside_km_s)])
    proc = cli(["cutouts", "--catalogue", some, "--output-dir", tmp_path / "some", *args], env)
    assert proc.returncode == 0, proc.stderr
