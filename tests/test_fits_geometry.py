"""FITS geometry from the header alone: HDU kinds, header sizes, and every bad input's error."""
import warnings

import numpy as np
import pytest
from astropy.io import fits

from ingest import read_subcube
from ingest.errors import FitsFormatError, RegionError
from ingest.formats.reader import read_layout
from ingest.transports import MemoryTransport, open_transport


def _write(path, hdus):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits.HDUList(hdus).writeto(path, overwrite=True)
    return str(path)


def _cube(shape=(4, 5, 6), dtype=">f4"):
    return (np.arange(np.prod(shape)).reshape(shape) * 3 - 7).astype(dtype)


def test_extension_hdu_by_index_and_layout_facts(tmp_path):
    cube = _cube()
    p = _write(tmp_path / "ext.fits", [fits.PrimaryHDU(), fits.ImageHDU(np.zeros((2, 2), ">i2")), fits.ImageHDU(cube)])
    with open_transport(p) as t:
        layout = read_layout(t, hdu=2)
    with fits.open(p) as f:
        assert layout.data_offset == f[2]._data_offset
        assert layout.header_offset == f[2]._header_offset
    assert layout.shape == cube.shape
    np.testing.assert_array_equal(read_subcube(p, (1, slice(0, 3)), hdu=2), cube[1, 0:3])


def test_header_spanning_many_blocks(tmp_path):
    hdu = fits.PrimaryHDU(_cube())
    for k in range(200):  # 200 cards ~ 6 blocks
        hdu.header["HISTORY"] = f"padding card {k}"
    p = _write(tmp_path / "long.fits", [hdu])
    with open_transport(p) as t:
        layout = read_layout(t)
    assert layout.data_offset >= 6 * 2880
    np.testing.assert_array_equal(read_subcube(p, (slice(1, 3),)), _cube()[1:3])


def test_four_axes_with_degenerate_stokes(tmp_path):
    cube = _cube((1, 4, 5, 6))
    p = _write(tmp_path / "stokes.fits", [fits.PrimaryHDU(cube)])
    np.testing.assert_array_equal(read_subcube(p, (0, slice(1, 3), slice(None), slice(2, 4))), cube[0, 1:3, :, 2:4])


def test_header_reads_stop_at_end_card(tmp_path):
    """The header is fetched block by block and nothing past END is read for it."""
    p = _write(tmp_path / "c.fits", [fits.PrimaryHDU(_cube())])
    blob = open(p, "rb").read()
    t = MemoryTransport(blob)
    layout = read_layout(t)
    assert t.requests == layout.data_offset // 2880


@pytest.mark.parametrize(
    "content, message",
    [
        (b"hello world" * 1000, "not a FITS file"),
        (b"", "not a FITS file|ends inside the header"),
        (b"SIMPLE  =                    T" + b" " * 50, "ends inside the header"),
    ],
)
def test_not_fits(tmp_path, content, message):
    p = tmp_path / "bad.fits"
    p.write_bytes(content)
    with pytest.raises(FitsFormatError, match=message) as err:
        read_subcube(str(p))
    assert "bad.fits" in str(err.value)


def test_table_hdu_refused(tmp_path):
    table = fits.BinTableHDU.from_columns([fits.Column(name="a", format="E", array=np.arange(3.0))])
    p = _write(tmp_path / "table.fits", [fits.PrimaryHDU(), table])
    with pytest.raises(FitsFormatError, match="BINTABLE extension, not an image"):
        read_subcube(p, hdu=1)


def test_compressed_image_refused(tmp_path):
    p = _write(tmp_path / "comp.fits", [fits.PrimaryHDU(), fits.CompImageHDU(_cube())])
    with pytest.raises(FitsFormatError, match="tile-compressed"):
        read_subcube(p, hdu=1)


def test_empty_primary_points_to_extension(tmp_path):
    p = _write(tmp_path / "empty.fits", [fits.PrimaryHDU(), fits.ImageHDU(_cube())])
    with pytest.raises(FitsFormatError, match="NAXIS = 0.*hdu=1"):
        read_subcube(p)


def test_missing_hdu(tmp_path):
    p = _write(tmp_path / "one.fits", [fits.PrimaryHDU(_cube())])
    with pytest.raises(FitsFormatError, match="no HDU 3"):
        read_subcube(p, hdu=3)


def test_truncated_object(tmp_path):
    p = _write(tmp_path / "cut.fits", [fits.PrimaryHDU(_cube((10, 20, 30)))])
    blob = open(p, "rb").read()
    (tmp_path / "cut.fits").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(FitsFormatError, match="cut.fits.*truncated"):
        read_subcube(p)


@pytest.mark.parametrize(
    "region, message",
    [
        ((slice(0, 5),), "axis 0: 0:5 is outside the cube"),
        ((0, 9), "axis 1: index 9 is outside"),
        ((slice(2, 2),), "empty region"),
        ((slice(None), slice(None), slice(None), 0), "region has 4 axes"),
        ((slice(None, None, -1),), "steps must be positive"),
        (("a",), "not a slice or an integer"),
    ],
)
def test_bad_regions(tmp_path, region, message):
    p = _write(tmp_path / "c.fits", [fits.PrimaryHDU(_cube())])
    with pytest.raises(RegionError, match=message):
        read_subcube(p, region)
