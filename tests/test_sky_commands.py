"""World regions wherever a region is taken (plan, info, run, read_subcube, ingest.open) and sky
cut-outs of a catalogue, against a real S3 server; every box checked against brute force over
every pixel centre, every cut-out against astropy's section of that box."""
from __future__ import annotations

import json
import os
import uuid
import warnings

import numpy as np
import pytest
from astropy import units as u
from astropy.coordinates import SkyCoord
from astropy.io import fits
from astropy.wcs import WCS

import ingest
from ingest.testbed.synth import write_cube
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (32, 48, 40)  # z, y, x; 1 arcsec pixels about (150, -30), 18.5 kHz channels about 1.4 GHz
REST_HZ = 1.420405752e9
C_M_S = 299792458.0


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    work = tmp_path_factory.mktemp("sky")
    path = work / "cube.fits"
    write_cube(path, SHAPE, -32, restfrq_hz=REST_HZ, beams=True)
    bucket = s3_server.make_bucket(f"sky-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, "cube.fits")
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        header = f[0].header
        data = np.array(f[0].data)
    return {"path": path, "s3": f"s3://{bucket}/cube.fits", "header": header, "data": data, "work": work}


def _expected_box(header, center, radius_deg, lo_hz, hi_hz):
    """Brute force: the bounding box of every pixel whose centre is in the circle and the band."""
    wcs = WCS(header)
    ny, nx = SHAPE[1:]
    yy, xx = np.mgrid[0:ny, 0:nx]
    sky = wcs.celestial.pixel_to_world(xx, yy)
    inside = sky.separation(center).deg <= radius_deg
    freqs = wcs.spectral.pixel_to_world(np.arange(SHAPE[0])).to_value(u.Hz)
    chans = np.flatnonzero((freqs >= lo_hz) & (freqs <= hi_hz))
    ys, xs = np.nonzero(inside)
    return ((int(chans.min()), int(chans.max()) + 1), (int(ys.min()), int(ys.max()) + 1),
            (int(xs.min()), int(xs.max()) + 1))


def _freq(channel):
    return 1.4e9 + (channel - 15.5) * 18.5e3


CENTER = SkyCoord(150.001 * u.deg, -30.002 * u.deg)
RADIUS_DEG = 6 / 3600
LO_HZ, HI_HZ = _freq(9.7), _freq(21.2)
SODA_POS = f"CIRCLE {CENTER.ra.deg} {CENTER.dec.deg} {RADIUS_DEG}"
SODA_BAND = f"{C_M_S / HI_HZ} {C_M_S / LO_HZ}"  # vacuum wavelengths in metres


def _section(path, box):
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        return np.array(f[0].section[tuple(slice(a, b) for a, b in box)])


def test_plan_and_info_give_the_brute_force_box_in_soda_and_readable_forms(s3_server, cube):
    want = _expected_box(cube["header"], CENTER, RADIUS_DEG, LO_HZ, HI_HZ)
    env = child_env(s3_server)
    soda = cli(["plan", cube["s3"], "--pos", SODA_POS, "--band", SODA_BAND, "--json"], env)
    assert soda.returncode == 0, soda.stderr
    summary = json.loads(soda.stdout)
    assert [tuple(b) for b in summary["box"]] == list(want)
    assert summary["world_region"]["clipped"] == []
    readable = cli(["info", cube["s3"], "--pos", "circle 10h00m00.24s -30d00m07.2s 6arcsec",
                    "--band", f"{LO_HZ / 1e9}GHz {HI_HZ / 1e9}GHz", "--json"], env)
    assert readable.returncode == 0, readable.stderr
    assert [tuple(b) for b in json.loads(readable.stdout)["world_region"]["box"]] == list(want)


def test_run_with_a_sky_region_writes_exact_cutouts_with_their_beams(s3_server, cube, tmp_path):
    want = _expected_box(cube["header"], CENTER, RADIUS_DEG, LO_HZ, HI_HZ)
    out = tmp_path / "out"
    proc, _ = mpiexec(2, ["run", "--source", cube["s3"], "--pos", SODA_POS, "--band", SODA_BAND, "--output-dir",
                          out, "--report", tmp_path / "r.json", "--no-probe"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [tuple(b) for b in report["grid"]["world_region"]["box"]] == list(want)
    with fits.open(cube["path"]) as f:
        cube_beams = np.array(f["BEAMS"].data)
    files = sorted(os.listdir(out))
    assert len(files) == 1  # one region: one file, whatever the rank count (ingest.outputs.onefile)
    for name in files:
        with fits.open(out / name) as f:
            header, data, beams = f[0].header, np.array(f[0].data), np.array(f["BEAMS"].data)
        z0 = int(round(-header["CRPIX3"] + cube["header"]["CRPIX3"]))  # the file's first channel
        box = [(z0, z0 + data.shape[0])]
        y0 = int(round(cube["header"]["CRPIX2"] - header["CRPIX2"]))
        x0 = int(round(cube["header"]["CRPIX1"] - header["CRPIX1"]))
        box += [(y0, y0 + data.shape[1]), (x0, x0 + data.shape[2])]
        np.testing.assert_array_equal(data, _section(cube["path"], box))
        np.testing.assert_array_equal(beams["BMAJ"], cube_beams["BMAJ"][z0: z0 + data.shape[0]])
        assert list(beams["CHAN"]) == list(range(data.shape[0]))


def test_read_subcube_and_open_cutout_take_soda_text_and_astropy_objects(s3_server, s3_env, cube):
    want = _expected_box(cube["header"], CENTER, RADIUS_DEG, LO_HZ, HI_HZ)
    expected = _section(cube["path"], want)
    got = ingest.read_subcube(cube["s3"], pos=SODA_POS, band=SODA_BAND)
    np.testing.assert_array_equal(got, expected)
    with ingest.open(cube["s3"]) as remote:
        cut = remote.cutout(CENTER, RADIUS_DEG * u.deg, spectral=(LO_HZ * u.Hz, HI_HZ * u.Hz))
        np.testing.assert_array_equal(cut.data, expected)
        assert cut.box == want and cut.clipped == ()
        world = cut.wcs.pixel_to_world_values(1.0, 2.0, 3.0)
        whole = WCS(cube["header"]).pixel_to_world_values(1.0 + want[2][0], 2.0 + want[1][0], 3.0 + want[0][0])
        np.testing.assert_allclose(world, whole, rtol=0, atol=1e-9)
        # The same band as radio velocities about the header's RESTFRQ.
        v_lo, v_hi = (C_M_S * (1 - f / REST_HZ) / 1e3 for f in (HI_HZ, LO_HZ))
        by_velocity = remote.cutout(CENTER, RADIUS_DEG * u.deg, spectral=(v_lo * u.km / u.s, v_hi * u.km / u.s))
        assert by_velocity.box == want
        # Partly off the cube: clipped, and said so.
        edge = remote.cutout(SkyCoord(150.0 - 19 / 3600 / np.cos(np.radians(30)), -30.0, unit="deg"), 5 * u.arcsec)
        # RA grows to the left (CDELT1 < 0): a centre 19 arcsec west of the middle runs off the right edge.
        assert edge.clipped == ("ra",) and edge.box[2][1] == SHAPE[2] and edge.data.shape == tuple(b - a for a, b in edge.box)


def test_a_region_off_the_cube_is_an_error_naming_it_before_any_data_moves(cube, counting_source, tmp_path):
    out = tmp_path / "out"
    with counting_source(cube["path"]) as source:  # its BEAMS table is read, beside the data
        proc = cli(["run", "--source", source.url, "--pos", "CIRCLE 10 10 0.01", "--output-dir", out], child_env())
    assert proc.returncode == 1
    assert "CIRCLE" in proc.stderr and "10" in proc.stderr
    source.assert_no_data_moved()
    assert not out.exists() or not os.listdir(out)


def test_sky_catalogue_cutouts_match_brute_force_boxes(s3_server, cube, tmp_path):
    rows = [("A", 150.001, -30.002, _freq(15)), ("B", 149.999, -29.998, _freq(6)), ("off", 10.0, 10.0, _freq(5))]
    catalogue = tmp_path / "cat.csv"
    catalogue.write_text("name,ra,dec,freq\n" + "".join(f"{n},{r},{d},{f}\n" for n, r, d, f in rows))
    out = tmp_path / "cut"
    proc, _ = mpiexec(2, ["cutouts", "--source", cube["s3"], "--catalogue", catalogue, "--output-dir", out,
                          "--size", "6arcsec 20km/s", "--columns", "freq=[Hz]", "--no-probe"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    by_name = {e["name"]: e for e in manifest["sources"]}
    assert by_name["off"]["status"] == "skipped"
    for name, ra, dec, freq in rows[:2]:
        dv_hz = 20e3 / C_M_S * REST_HZ  # 20 km/s (radio) in Hz about the rest frequency
        want = _expected_box(cube["header"], SkyCoord(ra * u.deg, dec * u.deg), 6 / 3600, freq - dv_hz, freq + dv_hz)
        entry = by_name[name]
        assert [tuple(b) for b in entry["box"]] == list(want)
        with fits.open(out / entry["file"]) as f:
            np.testing.assert_array_equal(np.array(f[0].data), _section(cube["path"], want))
            assert f[0].header["OBJECT"] == name and len(f["BEAMS"].data) == want[0][1] - want[0][0]


def test_a_carta_hdf5_cube_takes_a_sky_region_by_its_group_header(s3_server, s3_env, cube, tmp_path):
    # CARTA/IDIA's schema: the FITS header as attributes of group /0, the pixels in /0/DATA.
    import h5py

    path = tmp_path / "carta.h5"
    with h5py.File(path, "w") as f:
        f.attrs["SCHEMA_VERSION"] = "0.3"
        group = f.create_group("0")
        for key, value in cube["header"].items():
            if key and not key.startswith(("NAXIS", "SIMPLE", "BITPIX", "EXTEND")) and isinstance(value, (str, int, float)):
                group.attrs[key] = value
        group.create_dataset("DATA", data=cube["data"])
    bucket = s3_server.make_bucket(f"carta-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, "carta.h5")
    want = _expected_box(cube["header"], CENTER, RADIUS_DEG, LO_HZ, HI_HZ)
    got = ingest.read_subcube(f"s3://{bucket}/carta.h5", pos=SODA_POS, band=SODA_BAND)
    np.testing.assert_array_equal(got, _section(cube["path"], want))
