"""`cube.cutout(...)` is the file the command line writes: `writeto` gives the bytes of `python -m
ingest run --pos ... --band ... --output-dir` for the same region (header, data, cut BEAMS table),
`to_spectral_cube` what spectral-cube reads from that file, its WCS has the cube's every axis, and
an array SkyCoord gives, from one planned read, what one call per position gives. On an ASKAP-like
cube (RA, Dec, FREQ, STOKES; a beam per channel) in a local file and in a real S3 store. An HDF5
cube's `writeto` is the command line's .h5 file, byte for byte."""
from __future__ import annotations

import io
import uuid
import warnings

import numpy as np
import pytest
from astropy import units as u
from astropy.coordinates import SkyCoord
from astropy.io import fits
from astropy.wcs import WCS

import ingest
from ingest.errors import ConfigError
from ingest.testbed.synth import build_header, write_cube
from tests.mpitools import child_env, cli

SHAPE = (1, 40, 48, 40)  # numpy order: STOKES, FREQ, Dec, RA (ASKAP's FITS axes RA, DEC, FREQ, STOKES)
CENTER = SkyCoord(150.001 * u.deg, -30.002 * u.deg)
RADIUS = 6 * u.arcsec
SPECTRAL = (1.39985 * u.GHz, 1.40010 * u.GHz)
POS, BAND = "CIRCLE 150.001 -30.002 0.0016666666666666668", "1.39985GHz 1.40010GHz"  # the same region as text


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    """Local ASKAP-like cubes with a BEAMS table: float32, and 16-bit scaled (BSCALE, BZERO)."""
    work = tmp_path_factory.mktemp("product")
    out = {}
    for name, options in (("f32", {"bitpix": -32}), ("i16", {"bitpix": 16, "bscale": 0.5, "bzero": 3.0})):
        path = work / f"{name}.fits"
        write_cube(path, SHAPE, beams=True, **options)
        out[name] = str(path)
    return out


@pytest.fixture(scope="module")
def s3_cube(s3_server, cubes):
    """The float32 cube in a versitygw bucket: its s3:// URL."""
    bucket = s3_server.make_bucket(f"product-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(cubes["f32"], bucket, "askap.fits")
    return f"s3://{bucket}/askap.fits"


def _cli_file(source, out_dir, env, suffix=".fits") -> bytes:
    """The one file `python -m ingest run --pos POS --band BAND --output-dir` writes (one process)."""
    proc = cli(["run", "--source", source, "--pos", POS, "--band", BAND, "--output-dir", out_dir], env)
    assert proc.returncode == 0, proc.stderr
    files = sorted(out_dir.glob(f"*{suffix}"))
    assert len(files) == 1, files
    return files[0].read_bytes()


def _product_matches_cli(cube, source, tmp_path, env):
    cut = cube.cutout(CENTER, RADIUS, spectral=SPECTRAL)
    expected = _cli_file(source, tmp_path / "cli", env)
    mine = tmp_path / "mine.fits"
    cut.writeto(mine)
    assert mine.read_bytes() == expected
    with pytest.raises(OSError, match="overwrite=True"):
        cut.writeto(mine)
    cut.writeto(mine, overwrite=True)
    assert mine.read_bytes() == expected
    with warnings.catch_warnings(), fits.open(io.BytesIO(expected)) as want:
        warnings.simplefilter("ignore")
        got = cut.to_hdulist()
        assert [hdu.name for hdu in got] == ["PRIMARY", "BEAMS"]
        assert got[0].header.tostring() == want[0].header.tostring() == cut.header.tostring()
        np.testing.assert_array_equal(got[0].data, want[0].data)
        assert got["BEAMS"].data.tobytes() == want["BEAMS"].data.tobytes()
        assert cut.beams.rows.tobytes() == np.asarray(want["BEAMS"].data).astype(cut.beams.rows.dtype).tobytes()
        assert len(want["BEAMS"].data) < SHAPE[1]  # the table was cut to the box's channels
        # The attributes a cut-out had before it was a file still hold.
        np.testing.assert_array_equal(cut.data, want[0].data)
        assert cut.data.shape == tuple(b - a for a, b in cut.box) and cut.clipped == ()
        assert cut.region_text.startswith("CIRCLE")
    return cut


@pytest.mark.parametrize("name", ["f32", "i16"])
def test_writeto_is_the_command_lines_file_byte_for_byte_from_a_local_file(cubes, name, tmp_path):
    with ingest.open(cubes[name]) as cube:
        cut = _product_matches_cli(cube, cubes[name], tmp_path, child_env())
    if name == "i16":  # the stored integers are written, BSCALE/BZERO kept; data is scaled as astropy does
        assert cut.raw.dtype.kind == "i" and cut.data.dtype.kind == "f"


def test_writeto_is_the_command_lines_file_byte_for_byte_from_s3(s3_server, s3_env, s3_cube, tmp_path):
    with ingest.open(s3_cube) as cube:
        _product_matches_cli(cube, s3_cube, tmp_path, child_env(s3_server))


@pytest.fixture(scope="module")
def h5_cubes(s3_server, tmp_path_factory):
    """An HDF5 cube (float32 at /0/DATA, the FITS cube's WCS as the dataset's attributes), local
    and in a versitygw bucket: {"local": path, "s3": s3:// URL}."""
    import h5py

    shape = SHAPE[1:]
    path = tmp_path_factory.mktemp("product_h5") / "askap.h5"
    with h5py.File(path, "w") as f:
        dset = f.create_dataset("/0/DATA", data=np.arange(np.prod(shape), dtype=">f4").reshape(shape))
        for key, value in build_header(shape, -32).items():
            if key not in ("SIMPLE", "BITPIX", "EXTEND") and not key.startswith("NAXIS"):
                dset.attrs[key] = value
    bucket = s3_server.make_bucket(f"product-h5-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, "askap.h5")
    return {"local": str(path), "s3": f"s3://{bucket}/askap.h5"}


@pytest.mark.parametrize("where", ["local", "s3"])
def test_writeto_of_an_hdf5_cube_is_the_command_lines_h5_file_byte_for_byte(where, h5_cubes, s3_server, request,
                                                                           tmp_path):
    import h5py

    if where == "s3":
        request.getfixturevalue("s3_env")
    source = h5_cubes[where]
    with ingest.open(source) as cube:
        cut = cube.cutout(CENTER, RADIUS, spectral=SPECTRAL)
    expected = _cli_file(source, tmp_path / "cli", child_env(s3_server if where == "s3" else None), suffix=".h5")
    mine = tmp_path / "mine.h5"
    cut.writeto(mine)
    assert mine.read_bytes() == expected
    with pytest.raises(OSError, match="overwrite=True"):
        cut.writeto(mine)
    mine.write_bytes(b"old")
    cut.writeto(mine, overwrite=True)
    assert mine.read_bytes() == expected and sorted(p.name for p in tmp_path.iterdir()) == ["cli", "mine.h5"]
    with h5py.File(mine, "r") as f:  # the region and where it came from, as h5py reads them
        dset = f["/0/DATA"]
        np.testing.assert_array_equal(dset[...], cut.data)
        assert list(dset.attrs["ingest_region_start"]) == [a for a, _ in cut.box]
        assert dset.attrs["ingest_source"] == source and 0 < cut.box[2][0]
        assert dset.attrs["CRPIX1"] == 20.5 - cut.box[2][0]  # the region's pixels keep their world coordinates
    with pytest.raises(ConfigError, match="Cutout.to_hdulist: .* HDF5 cube"):
        cut.to_hdulist()
    assert cut.header is None and cut.beams is None


def test_the_cutouts_wcs_has_the_cubes_axes_stokes_too(cubes, tmp_path):
    with ingest.open(cubes["f32"]) as cube:
        cut = cube.cutout(CENTER, RADIUS, spectral=SPECTRAL)
        assert cube.wcs.naxis == cut.wcs.naxis == 4
        assert list(cut.wcs.wcs.ctype) == ["RA---SIN", "DEC--SIN", "FREQ", "STOKES"]
        cut.writeto(tmp_path / "cut.fits")
        pixel = (1.0, 2.0, 3.0, 0.0)  # FITS order, 0-based
        from_file = WCS(fits.getheader(tmp_path / "cut.fits")).pixel_to_world_values(*pixel)
        np.testing.assert_allclose(cut.wcs.pixel_to_world_values(*pixel), from_file, rtol=0, atol=1e-9)
        whole = cube.wcs.pixel_to_world_values(*(p + cut.box[::-1][k][0] for k, p in enumerate(pixel)))
        np.testing.assert_allclose(cut.wcs.pixel_to_world_values(*pixel), whole, rtol=0, atol=1e-9)


def test_to_spectral_cube_is_spectral_cubes_own_reading_of_the_file(cubes, tmp_path):
    spectral_cube = pytest.importorskip("spectral_cube")
    with ingest.open(cubes["f32"]) as cube, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # spectral-cube's StokesWarning: the I component of a Stokes cube
        cut = cube.cutout(CENTER, RADIUS, spectral=SPECTRAL)
        mine = cut.to_spectral_cube()
        cut.writeto(tmp_path / "cut.fits")
        theirs = spectral_cube.SpectralCube.read(tmp_path / "cut.fits")
    assert type(mine) is type(theirs) is spectral_cube.VaryingResolutionSpectralCube
    np.testing.assert_array_equal(mine.unmasked_data[:].value, theirs.unmasked_data[:].value)
    np.testing.assert_array_equal(mine.unmasked_data[:].value, cut.data[0])
    assert mine.unit == theirs.unit == u.Jy / u.beam
    assert mine.wcs.wcs.compare(theirs.wcs.wcs) and mine.wcs.naxis == 3
    assert len(mine.beams) == cut.data.shape[1]
    np.testing.assert_array_equal(mine.beams.major.to_value(u.arcsec), theirs.beams.major.to_value(u.arcsec))
    np.testing.assert_array_equal(mine.beams.minor.to_value(u.arcsec), theirs.beams.minor.to_value(u.arcsec))
    np.testing.assert_array_equal(mine.beams.pa.to_value(u.deg), theirs.beams.pa.to_value(u.deg))
    np.testing.assert_allclose(mine.beams.major.to_value(u.arcsec), cut.beams.rows["BMAJ"], rtol=1e-6)


def test_to_spectral_cube_of_a_cube_with_one_beam_in_its_header(tmp_path):
    spectral_cube = pytest.importorskip("spectral_cube")
    shape = SHAPE[1:]
    header = build_header(shape, -32)
    header["BMAJ"], header["BMIN"], header["BPA"] = 12 / 3600, 9 / 3600, 30.0
    path = tmp_path / "one_beam.fits"
    fits.PrimaryHDU(np.arange(np.prod(shape), dtype=">f4").reshape(shape), header=header).writeto(path)
    with ingest.open(str(path)) as cube, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cut = cube.cutout(CENTER, RADIUS, spectral=SPECTRAL)
        mine = cut.to_spectral_cube()
        cut.writeto(tmp_path / "cut.fits")
        theirs = spectral_cube.SpectralCube.read(tmp_path / "cut.fits")
    assert cut.beams is None and type(mine) is type(theirs) is spectral_cube.SpectralCube
    assert mine.beam == theirs.beam and mine.beam.major.to_value(u.arcsec) == pytest.approx(12)
    np.testing.assert_array_equal(mine.unmasked_data[:].value, cut.data)


def _same(one, other):
    assert one.box == other.box and one.clipped == other.clipped and one.region_text == other.region_text
    assert one.data.dtype == other.data.dtype and one.data.tobytes() == other.data.tobytes()
    assert one.header.tostring() == other.header.tostring()
    assert one.beams == other.beams and one.wcs.wcs.compare(other.wcs.wcs)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_an_array_skycoord_gives_one_at_a_time_products_from_one_planned_read(where, cubes, request):
    source = cubes["f32"] if where == "local" else request.getfixturevalue("s3_cube")
    if where == "s3":
        request.getfixturevalue("s3_env")
    # Overlapping, neighbouring and far-apart positions, one partly off the cube's edge.
    ra = 150.0 + np.array([0.001, 0.0015, -0.003, 0.0, 0.0055])
    dec = -30.0 + np.array([-0.002, -0.002, 0.004, 0.0, 0.0])
    coords = SkyCoord(ra * u.deg, dec * u.deg)
    radii = [6, 6, 4, 8, 5] * u.arcsec
    with ingest.open(source) as cube:
        before = cube.stats.reads
        many = cube.cutouts(coords, radii, spectral=SPECTRAL)
        assert cube.stats.reads == before + 1  # one plan for all five boxes
        singles = [cube.cutout(c, r, spectral=SPECTRAL) for c, r in zip(coords, radii)]
        assert len(many) == len(coords) and any(cut.clipped for cut in many)
        for one, other in zip(many, singles):
            _same(one, other)
        # The same regions as a list, and one radius for all.
        for one, other in zip(cube.cutouts(pos=[(c, 6 * u.arcsec) for c in coords[:2]], spectral=SPECTRAL),
                              cube.cutouts(coords[:2], 6 * u.arcsec, spectral=SPECTRAL)):
            _same(one, other)
        with pytest.raises(TypeError, match=r"cube\.cutouts"):
            cube.cutout(coords, RADIUS, spectral=SPECTRAL)
