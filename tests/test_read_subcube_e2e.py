"""read_subcube over all three source kinds, every BITPIX, compared with astropy's own reading
of the same file (values, dtype kind and itemsize); cubes served by a real S3 server."""
import warnings

import numpy as np
import pytest
from astropy.io import fits

from ingest import read_subcube
from ingest.transports.presign import presign_url
from ingest.testbed.synth import write_cube

CASES = [  # (bitpix, scaling, shape, extension)
    (8, {}, (5, 17, 23), False),
    (8, {"bzero": -128, "bscale": 1}, (5, 17, 23), False),
    (16, {}, (6, 19, 21), True),
    (16, {"bzero": 32768, "bscale": 1}, (6, 19, 21), False),
    (16, {"bscale": 0.5, "bzero": 3.0, "blank": -32768}, (6, 19, 21), False),
    (32, {}, (1, 4, 33, 31), False),
    (32, {"bscale": 2.5, "bzero": -1.0}, (4, 33, 31), True),
    (64, {}, (3, 11, 13), False),
    (64, {"bzero": 2**63, "bscale": 1}, (3, 11, 13), False),
    (-32, {}, (7, 29, 37), False),
    (-32, {"bscale": 2.0, "bzero": 1.0}, (7, 29, 37), False),
    (-64, {}, (2, 9, 40, 11), True),
]
REGIONS = [
    (),
    (Ellipsis, slice(1, 3), slice(None), slice(None)),
    (Ellipsis, slice(2, 9), slice(3, 10)),
    (Ellipsis, 4, slice(None, None, 3)),
    (Ellipsis, slice(0, 5), 2),
]


@pytest.fixture(scope="module")
def cubes(s3_server, tmp_path_factory):
    """Each case written once, uploaded once, presigned once."""
    root = tmp_path_factory.mktemp("cubes")
    bucket = s3_server.make_bucket("e2e-cubes")
    client = s3_server.client()
    out = []
    for k, (bitpix, scaling, shape, extension) in enumerate(CASES):
        path = root / f"cube{k}.fits"
        write_cube(path, shape, bitpix, extension=extension, header_blocks=1 + k % 3, **scaling)
        client.upload_file(str(path), bucket, f"c/cube{k}.fits")
        url = presign_url(bucket, f"c/cube{k}.fits", expires_s=3600, client=client)
        sources = {"posix": str(path), "s3": f"s3://{bucket}/c/cube{k}.fits", "presigned": url}
        out.append((CASES[k], str(path), sources))
    return out


def astropy_section(path, hdu, region):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fits.open(path) as f:
            values = np.asarray(f[hdu].section[region])
            dtype = f[hdu].data[region].dtype
    return values, dtype


@pytest.mark.parametrize("method", ["posix", "presigned", "s3"])
def test_matches_astropy_for_every_bitpix(cubes, method, s3_env):
    for (bitpix, scaling, shape, extension), path, sources in cubes:
        hdu = 1 if extension else 0
        for region in REGIONS:
            for strategy, chunk in (("auto", 16 << 20), ("large", 3000), ("small", 1000), ("intermediate", 5000)):
                got = read_subcube(sources[method], region, hdu=hdu, strategy=strategy, chunk_bytes=chunk, threads=3)
                want, want_dtype = astropy_section(path, hdu, region)
                where = f"{method} bitpix={bitpix} {scaling} region={region} {strategy}"
                assert got.shape == want.shape, where
                assert (got.dtype.kind, got.dtype.itemsize) == (want_dtype.kind, want_dtype.itemsize), where
                assert np.array_equal(got, want, equal_nan=True), where


def test_native_byteorder_swaps_in_place(cubes):
    (_, _, _, _), path, sources = cubes[-3]  # float32, unscaled
    stored = read_subcube(sources["posix"], (1,))
    native = read_subcube(sources["posix"], (1,), native_byteorder=True)
    assert stored.dtype.str == ">f4" and native.dtype.isnative
    assert np.array_equal(stored, native)
