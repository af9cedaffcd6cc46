"""Per-rank FITS outputs: astropy's reading of a written subcube is the oracle, compared bit for
bit with astropy's reading of the same box of the original; WCS shifted; writes atomic."""
import dataclasses
import math
import os
import warnings

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

from ingest.errors import IngestError, RegionError
from ingest.formats.reader import read_layout
from ingest.outputs.subcubes import check_output_dir, output_name, subcube_header, write_subcube
from ingest.testbed.synth import voxel_values, write_cube
from ingest.transports import open_transport

CASES = [  # (id, bitpix, scaling, shape, extension, box in numpy order)
    ("f32", -32, {}, (7, 29, 37), False, ((1, 5), (3, 20), (10, 37))),
    ("i16-bzero", 16, {"bzero": 32768, "bscale": 1}, (6, 19, 21), False, ((0, 6), (4, 19), (2, 9))),
    ("i16-scaled-blank", 16, {"bscale": 0.5, "bzero": 3.0, "blank": -32768}, (6, 19, 21), False,
     ((2, 3), (0, 19), (5, 21))),
    ("i32-extension", 32, {"bscale": 2.5, "bzero": -1.0}, (4, 33, 31), True, ((1, 4), (10, 30), (0, 31))),
    ("f64-4d-extension", -64, {}, (2, 9, 40, 11), True, ((1, 2), (3, 9), (0, 40), (4, 11))),
]


def _cube(tmp_path, bitpix, scaling, shape, extension):
    path = str(tmp_path / "cube.fits")
    write_cube(path, shape, bitpix, extension=extension, **scaling)
    with open_transport(path) as transport:
        layout = read_layout(transport, hdu=1 if extension else 0)
    return path, layout


def _raw_box(layout, box) -> np.ndarray:
    """The box's RAW stored values from the synth oracle, as the executor would hand them over."""
    flat = np.arange(math.prod(layout.shape), dtype=np.int64).reshape(layout.shape)
    index = flat[tuple(slice(a, b) for a, b in box)]
    return voxel_values(index, layout.bitpix).astype(layout.raw_dtype)


def _as_bits(a: np.ndarray) -> np.ndarray:
    native = a.astype(a.dtype.newbyteorder("="))
    return native.view(f"u{a.dtype.itemsize}")


def assert_bit_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert (got.dtype.kind, got.dtype.itemsize) == (want.dtype.kind, want.dtype.itemsize)
    assert np.array_equal(_as_bits(got), _as_bits(want))  # NaN from BLANK compares by bits too


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_subcube_matches_astropy_and_wcs(tmp_path, case):
    _, bitpix, scaling, shape, extension, box = case
    path, layout = _cube(tmp_path, bitpix, scaling, shape, extension)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    written = write_subcube(out_dir, 7, box, _raw_box(layout, box), layout)
    assert os.path.basename(written) == output_name(7, box)
    assert os.path.getsize(written) % 2880 == 0
    assert sorted(os.listdir(out_dir)) == [output_name(7, box)]  # no temp file left behind

    slices = tuple(slice(a, b) for a, b in box)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fits.open(path) as original, fits.open(written) as sub:
            sub.verify("exception")
            assert len(sub) == 1 and isinstance(sub[0], fits.PrimaryHDU)
            hdr = sub[0].header
            assert hdr["SIMPLE"] is True and "XTENSION" not in hdr and "PCOUNT" not in hdr
            assert hdr["BITPIX"] == bitpix
            for key in ("BSCALE", "BZERO", "BLANK"):
                assert hdr.get(key) == original[layout.hdu].header.get(key)
            assert_bit_equal(sub[0].data, original[layout.hdu].data[slices])

            ndim = len(shape)
            start = [box[ndim - n][0] for n in range(1, ndim + 1)]  # FITS axis order
            wcs_orig, wcs_sub = WCS(original[layout.hdu].header), WCS(hdr)
            for offset in ([0] * ndim, [1, 2, 0, 0][:ndim]):
                pix_sub = np.array([offset], dtype=float)
                pix_orig = pix_sub + np.array(start, dtype=float)
                np.testing.assert_allclose(wcs_sub.wcs_pix2world(pix_sub, 0),
                                           wcs_orig.wcs_pix2world(pix_orig, 0), rtol=0, atol=1e-10)


def test_output_name_scheme():
    assert output_name(3, ((0, 30), (50, 100), (0, 100))) == "rank0003_x0-100_y50-100_z0-30.fits"
    assert output_name(12, ((0, 1), (0, 30), (50, 100), (0, 100))) == "rank0012_x0-100_y50-100_z0-30_s0-1.fits"
    assert output_name(0, ((5, 9),)) == "rank0000_x5-9.fits"
    assert output_name(12345, ((0, 2), (0, 3))) == "rank12345_x0-3_y0-2.fits"


def test_header_shifts_crpix_and_names_box_without_secrets(tmp_path):
    _, layout = _cube(tmp_path, -32, {}, (7, 29, 37), False)
    signed = dataclasses.replace(layout, source="https://s3.example/b/cube.fits?X-Amz-Signature=deadbeef")
    box = ((1, 5), (3, 20), (10, 37))
    original = fits.Header.fromstring(layout.header_text)
    hdr = subcube_header(signed, box)
    assert hdr["CRPIX1"] == original["CRPIX1"] - 10
    assert hdr["CRPIX2"] == original["CRPIX2"] - 3
    assert hdr["CRPIX3"] == original["CRPIX3"] - 1
    assert (hdr["NAXIS1"], hdr["NAXIS2"], hdr["NAXIS3"]) == (27, 17, 4)
    history = " ".join(str(v) for v in hdr["HISTORY"])
    assert "x=10:37" in history and "z=1:5" in history
    assert "X-Amz-Signature" not in hdr.tostring() and "deadbeef" not in hdr.tostring()


def test_box_outside_cube_is_refused(tmp_path):
    _, layout = _cube(tmp_path, -32, {}, (4, 5, 6), False)
    with pytest.raises(RegionError, match="axis 2"):
        subcube_header(layout, ((0, 4), (0, 5), (3, 7)))


def test_wrong_size_array_leaves_no_file(tmp_path):
    _, layout = _cube(tmp_path, -32, {}, (4, 5, 6), False)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    box = ((0, 2), (0, 5), (0, 6))
    with pytest.raises(IngestError, match="does not match box extents"):
        write_subcube(out_dir, 0, box, np.zeros((2, 5, 5), ">f4"), layout)
    with pytest.raises(IngestError, match="stored dtype"):
        write_subcube(out_dir, 0, box, np.zeros((2, 5, 6), "f8"), layout)  # scaled values, not raw
    assert os.listdir(out_dir) == []


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_failed_write_leaves_neither_final_nor_temp(tmp_path, monkeypatch, failing):
    _, layout = _cube(tmp_path, 16, {"bzero": 32768, "bscale": 1}, (4, 5, 6), False)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    box = ((0, 4), (1, 5), (0, 6))

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(f"ingest.outputs.subcubes.os.{failing}", boom)
    with pytest.raises(OSError, match="No space"):
        write_subcube(out_dir, 2, box, _raw_box(layout, box), layout)
    assert os.listdir(out_dir) == []


def test_failed_rewrite_keeps_previous_complete_file(tmp_path, monkeypatch):
    _, layout = _cube(tmp_path, -32, {}, (4, 5, 6), False)
    box = ((0, 4), (0, 5), (0, 6))
    first = write_subcube(tmp_path, 0, box, _raw_box(layout, box), layout)
    before = open(first, "rb").read()
    monkeypatch.setattr("ingest.outputs.subcubes.os.replace", lambda *a: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError):
        write_subcube(tmp_path, 0, box, np.zeros((4, 5, 6), ">f4"), layout)
    assert open(first, "rb").read() == before
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_check_output_dir_creates_and_accepts_same_grid(tmp_path):
    out_dir = tmp_path / "a" / "b"
    names = [output_name(r, ((r, r + 1), (0, 5))) for r in range(3)]
    check_output_dir(out_dir, names)
    assert out_dir.is_dir()
    for name in names[:2]:
        (out_dir / name).write_bytes(b"")  # an earlier run of the same grid
    (out_dir / "notes.txt").write_text("not ours")
    check_output_dir(out_dir, names)


def test_check_output_dir_refuses_other_runs_and_names_them(tmp_path):
    expected = [output_name(r, ((0, 5), (r * 5, r * 5 + 5))) for r in range(2)]
    strays = [output_name(r, ((r, r + 1), (0, 10))) for r in range(7)]
    for name in strays:
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(IngestError) as info:
        check_output_dir(tmp_path, expected)
    message = str(info.value)
    assert str(tmp_path) in message and strays[0] in message and "7 rank*.fits" in message
    assert "2 more" in message  # a few names shown, the rest counted


def test_check_output_dir_removes_own_leftover_temps_but_refuses_foreign_ones(tmp_path):
    expected = [output_name(0, ((0, 5), (0, 5)))]
    leftover = tmp_path / f".{expected[0]}.tmp-12345"
    leftover.write_bytes(b"SIMPLE")
    check_output_dir(tmp_path, expected)
    assert not leftover.exists()
    foreign = tmp_path / f".{output_name(3, ((0, 1), (0, 5)))}.tmp-999"
    foreign.write_bytes(b"")
    with pytest.raises(IngestError, match=foreign.name.replace(".", r"\.")):
        check_output_dir(tmp_path, expected)


def test_check_output_dir_refuses_a_file_path(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(IngestError, match=str(target)):
        check_output_dir(target, [])
