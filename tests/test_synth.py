"""Synthetic cubes: astropy (the oracle reader) must see exactly voxel_values in a valid file."""
import math
import os
import tracemalloc
import warnings

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

from ingest.testbed import synth
from ingest.cli.main import main
from ingest.errors import ConfigError
from ingest.testbed.synth import BITPIX_DTYPES, voxel_values, write_cube

ALL_BITPIX = sorted(BITPIX_DTYPES)
SHAPES = {1: (37,), 2: (5, 7), 3: (3, 4, 5), 4: (2, 3, 4, 5)}  # numpy order, odd sizes on purpose
CTYPES = {1: ["FREQ"], 2: ["RA---SIN", "DEC--SIN"], 3: ["RA---SIN", "DEC--SIN", "FREQ"],
          4: ["RA---SIN", "DEC--SIN", "FREQ", "STOKES"]}


def expected(shape, bitpix):
    return voxel_values(np.arange(math.prod(shape)), bitpix).reshape(shape)


def open_strict(path, **kwargs):
    """fits.open with every warning an error, then verify('exception')."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hdul = fits.open(path, **kwargs)
        hdul.verify("exception")
    return hdul


@pytest.mark.parametrize("bitpix", ALL_BITPIX)
def test_voxel_values_are_exact_distinct_and_cover_the_range(bitpix):
    idx = np.arange(200_000)
    v = voxel_values(idx, bitpix)
    assert v.dtype == BITPIX_DTYPES[bitpix] and v.shape == idx.shape
    assert np.array_equal(v, voxel_values(idx, bitpix))  # deterministic
    assert np.array_equal(v[1234:1300], voxel_values(idx[1234:1300], bitpix))  # position-free
    assert np.all(v[1:] != v[:-1])  # neighbours along the fastest axis always differ
    for plane in (256, 4096, 65536, 12345):  # same (x, y) in consecutive planes
        assert np.mean(v[plane:] == v[:-plane]) < 0.01
    if bitpix > 0:
        info = np.iinfo(v.dtype)
        span = float(info.max) - float(info.min)
        assert v.min() < info.min + span / 16 and v.max() > info.max - span / 16
        high = v.astype(v.dtype.newbyteorder(">")).view(np.uint8)[:: v.dtype.itemsize]
        assert len(np.unique(high)) == 256  # the high byte takes every value
    else:
        assert np.all(np.isfinite(v)) and v.min() < 0 < v.max()
        assert np.mean(v != np.round(v)) > 0.9  # fractional
        assert np.array_equal(v.astype(np.float64).astype(v.dtype), v)


def test_voxel_values_keeps_the_index_shape():
    idx = np.arange(24).reshape(2, 3, 4)
    assert voxel_values(idx, 16).shape == (2, 3, 4)
    assert voxel_values(7, -32).shape == ()
    assert voxel_values(7, -32) == voxel_values(np.array([7]), -32)[0]


@pytest.mark.parametrize("extension", [False, True], ids=["primary", "extension"])
@pytest.mark.parametrize("naxis", [1, 2, 3, 4])
@pytest.mark.parametrize("bitpix", ALL_BITPIX)
def test_astropy_reads_exactly_voxel_values(tmp_path, bitpix, naxis, extension):
    shape = SHAPES[naxis]
    header_blocks = 1 if naxis % 2 else 3
    path = tmp_path / "cube.fits"
    info = write_cube(path, shape, bitpix, extension=extension, header_blocks=header_blocks)
    n_bytes = math.prod(shape) * BITPIX_DTYPES[bitpix].itemsize
    assert info == {"path": str(path), "shape": shape, "bitpix": bitpix,
                    "data_offset": info["data_offset"], "data_bytes": n_bytes,
                    "file_bytes": os.path.getsize(path)}
    assert info["file_bytes"] % 2880 == 0 and info["data_offset"] % 2880 == 0
    with open_strict(path, do_not_scale_image_data=True) as hdul:
        assert len(hdul) == (2 if extension else 1)
        hdu = hdul[1 if extension else 0]
        if extension:
            assert hdul[0].header["NAXIS"] == 0 and hdu.header["XTENSION"] == "IMAGE"
            assert hdu.header["PCOUNT"] == 0 and hdu.header["GCOUNT"] == 1
        loc = hdu.fileinfo()
        assert loc["datLoc"] == info["data_offset"]
        assert loc["datLoc"] - loc["hdrLoc"] >= header_blocks * 2880
        data = hdu.data
        assert data.dtype == BITPIX_DTYPES[bitpix].newbyteorder(">")
        assert data.shape == shape
        assert data.tobytes() == expected(shape, bitpix).astype(data.dtype).tobytes()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            wcs = WCS(hdu.header)
        assert wcs.naxis == naxis and list(wcs.wcs.ctype) == CTYPES[naxis]
        assert wcs.pixel_shape == tuple(reversed(shape))
    with open(path, "rb") as f:  # data padding is zeros
        f.seek(info["data_offset"] + n_bytes)
        assert set(f.read()) <= {0}


def test_stokes_puts_stokes_before_freq(tmp_path):
    path = tmp_path / "casa.fits"
    write_cube(path, (4, 2, 3, 5), -32, stokes=True)
    with open_strict(path) as hdul:
        assert list(WCS(hdul[0].header).wcs.ctype) == ["RA---SIN", "DEC--SIN", "STOKES", "FREQ"]


@pytest.mark.parametrize("bitpix,bscale,bzero", [
    (16, 0.5, -3.0), (32, 2.0, 1000.0), (64, 4.0, -2.0), (8, 0.25, 10.0),
    (-32, 0.5, 1.5), (-64, 1e-3, 7.0),
])
def test_astropy_scaled_data_is_raw_times_bscale_plus_bzero(tmp_path, bitpix, bscale, bzero):
    shape = (3, 4, 5)
    path = tmp_path / "scaled.fits"
    write_cube(path, shape, bitpix, bscale=bscale, bzero=bzero)
    with open_strict(path) as hdul:
        assert hdul[0].header["BSCALE"] == bscale and hdul[0].header["BZERO"] == bzero
        phys = expected(shape, bitpix).astype(np.float64) * bscale + bzero
        np.testing.assert_allclose(hdul[0].data, phys, rtol=1e-6 if bitpix in (16, 8, -32) else 1e-12)


@pytest.mark.parametrize("bitpix,bzero,dtype", [
    (8, -128, np.int8), (16, 32768, np.uint16), (32, 2**31, np.uint32), (64, 2**63, np.uint64),
])
def test_unsigned_and_signed_byte_conventions_are_exact(tmp_path, bitpix, bzero, dtype):
    path = tmp_path / "unsigned.fits"
    write_cube(path, (4, 6), bitpix, bzero=bzero)
    raw = expected((4, 6), bitpix)
    unsigned = raw.view(raw.dtype.str.replace("i", "u"))
    # adding BZERO = -/+ 2^(bits-1) to raw is flipping its sign bit, exactly
    want = (unsigned ^ unsigned.dtype.type(1 << (bitpix - 1))).view(dtype)
    with open_strict(path) as hdul:
        assert hdul[0].data.dtype == dtype
        assert np.array_equal(hdul[0].data, want)


def test_blank_voxels_become_nan(tmp_path):
    path = tmp_path / "blank.fits"
    raw = expected((3, 4, 5), 16)
    blank = int(raw[1, 2, 3])
    write_cube(path, (3, 4, 5), 16, bscale=2.0, bzero=0.0, blank=blank)
    with open_strict(path) as hdul:
        assert hdul[0].header["BLANK"] == blank
        assert np.array_equal(np.isnan(hdul[0].data), raw == blank)


def test_streaming_keeps_memory_well_below_the_cube(tmp_path):
    batch_bytes = 1 << 20
    shape = (16, 128, 1024)  # float64: 16 MiB, 16 batches of 1 MiB working arrays
    tracemalloc.start()
    try:
        info = write_cube(tmp_path / "big.fits", shape, -64, batch_bytes=batch_bytes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info["data_bytes"] == 16 * batch_bytes
    assert peak < info["data_bytes"] / 4, f"peak {peak} bytes for a {info['data_bytes']}-byte cube"
    with open_strict(tmp_path / "big.fits", memmap=True) as hdul:
        assert np.array_equal(hdul[0].section[15, 100:, 999:], expected(shape, -64)[15, 100:, 999:])


@pytest.mark.parametrize("kwargs,field", [
    ({"bitpix": 12}, "bitpix"),
    ({"bitpix": "float"}, "bitpix"),
    ({"shape": (3, 0, 4)}, "shape"),
    ({"shape": (3, -1)}, "shape"),
    ({"shape": ()}, "shape"),
    ({"shape": (1, 2, 3, 4, 5)}, "shape"),
    ({"shape": (2.5, 3)}, "shape"),
    ({"bscale": 0}, "bscale"),
    ({"bscale": float("nan")}, "bscale"),
    ({"bzero": float("inf")}, "bzero"),
    ({"bitpix": -32, "blank": 0}, "blank"),
    ({"bitpix": 8, "blank": 300}, "blank"),
    ({"header_blocks": 0}, "header_blocks"),
    ({"stokes": True, "shape": (3, 4, 5)}, "stokes"),
    ({"batch_bytes": 4}, "batch_bytes"),
])
def test_bad_inputs_raise_config_error_naming_the_field(tmp_path, kwargs, field):
    args = {"shape": (3, 4, 5), "bitpix": 16, **kwargs}
    with pytest.raises(ConfigError, match=f"^{field}:"):
        write_cube(tmp_path / "bad.fits", args.pop("shape"), args.pop("bitpix"), **args)
    assert list(tmp_path.iterdir()) == []


def test_failure_mid_write_leaves_no_file(tmp_path, monkeypatch):
    target = tmp_path / "cube.fits"
    real, calls = synth.voxel_values, []

    def failing(flat_index, bitpix):
        calls.append(len(flat_index))
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        return real(flat_index, bitpix)

    monkeypatch.setattr(synth, "voxel_values", failing)
    with pytest.raises(OSError, match="simulated"):
        write_cube(target, (8, 64, 64), -32, batch_bytes=8 * 4096)
    assert len(calls) == 3 and list(tmp_path.iterdir()) == []
    # an existing file at the target survives a failed rewrite untouched
    target.write_bytes(b"old")
    calls.clear()
    with pytest.raises(OSError):
        write_cube(target, (8, 64, 64), -32, batch_bytes=8 * 4096)
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]


def test_cli_shape_is_fits_order(tmp_path, capsys):
    path = tmp_path / "cli.fits"
    status = main(["synth", str(path), "--shape", "7x5x3", "--bitpix", "16", "--extension",
                   "--bscale", "0.5", "--bzero", "1", "--header-blocks", "2"])
    assert status == 0
    out = capsys.readouterr().out
    assert str(path) in out and "7x5x3" in out
    with open_strict(path, do_not_scale_image_data=True) as hdul:
        hdr = hdul[1].header
        assert (hdr["NAXIS1"], hdr["NAXIS2"], hdr["NAXIS3"]) == (7, 5, 3)
        assert hdr["BSCALE"] == 0.5 and hdr["BZERO"] == 1.0
        assert np.array_equal(hdul[1].data, expected((3, 5, 7), 16))


def test_cli_bad_shape_is_a_user_error(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "x.fits"), "--shape", "7xAx3"]) == 1
    assert "--shape" in capsys.readouterr().err
    assert main(["synth", str(tmp_path / "x.fits"), "--shape", "7x0"]) == 1
    assert "shape" in capsys.readouterr().err


@pytest.mark.parametrize("kw", [dict(), dict(chunks=(3, 5, 7), compression="gzip", shuffle=True, byteorder="<"),
                                dict(chunks=(4, 8, 8), compression="zstd"), dict(idia=True)])
def test_hdf5_cubes_hold_the_computable_voxels(tmp_path, kw):
    import h5py

    from ingest.testbed.synth_hdf5 import write_hdf5_cube

    shape = (10, 12, 14)
    info = write_hdf5_cube(tmp_path / "c.h5", shape, -32, **kw)
    with h5py.File(tmp_path / "c.h5", "r") as f:
        dset = f[info["dataset"]]
        want = synth.voxel_values(np.arange(math.prod(shape)), -32).reshape(shape)
        assert np.array_equal(dset[...].reshape(shape), want)
        assert dset.dtype.str == info["dtype"] == ("<f4" if kw.get("byteorder") == "<" else ">f4")
        if kw.get("idia"):
            assert dset.name == "/0/DATA" and dset.shape == (1,) + shape and dset.attrs["CTYPE3"] == "FREQ"
    assert [p.name for p in tmp_path.iterdir()] == ["c.h5"]  # atomic: no temporary left


def test_hdf5_filters_need_chunks(tmp_path):
    from ingest.testbed.synth_hdf5 import write_hdf5_cube

    with pytest.raises(ConfigError, match="compression: filters need a chunked dataset"):
        write_hdf5_cube(tmp_path / "c.h5", (4, 4, 4), compression="gzip")
    assert list(tmp_path.iterdir()) == []
