"""A RemoteCube in dask and xarray: from_array with one plan per task, a moment-0 map on a
dask.distributed cluster over S3 equal to numpy's on the local file, the labelled lazy xarray
view, and `import ingest` without the dask extra."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

import ingest
from ingest.testbed.synth import write_cube
from ingest.testbed.synth_hdf5 import write_hdf5_cube
from tests.mpitools import ROOT

try:
    import dask.array as da
except ImportError:  # scripts/setup.sh installs the extra: missing is a failure, not a skip
    pytest.fail("dask is not installed: pip install -e .[dask] (scripts/setup.sh does)", pytrace=False)
SHAPE = (16, 40, 48)  # channels, dec, ra
BOX = (slice(None), slice(5, 35), slice(8, 44))  # a moment-0 map's box: every channel of a sky window


@pytest.fixture(scope="module")
def cube_files(tmp_path_factory, s3_server):
    """An int32 FITS cube (sums are exact, so dask's order of summing cannot matter), uploaded."""
    root = tmp_path_factory.mktemp("open-dask")
    path = root / "cube.fits"
    write_cube(path, SHAPE, 32)
    bucket = s3_server.make_bucket("open-dask")
    s3_server.client().upload_file(str(path), bucket, "cube.fits")
    with fits.open(path) as f:
        data = np.array(f[0].data)
    return {"path": str(path), "s3": f"s3://{bucket}/cube.fits", "data": data}


def moment0(data) -> np.ndarray:
    return data[BOX].sum(axis=0, dtype=np.int64)


def test_from_array_reads_each_chunk_with_one_plan(cube_files):
    import dask

    with ingest.open(cube_files["path"]) as cube:
        arr = da.from_array(cube, chunks=(8, 16, 16))
        assert cube.stats.reads == 0  # building the graph reads nothing (meta: an empty index)
        with dask.config.set(scheduler="threads"):
            got = moment0(arr).compute()
        # 2 x 3 x 3 chunks hold the box; each was read once, as one plan (one getitem)
        assert cube.stats.reads == arr[BOX].npartitions == 18
    assert np.array_equal(got, moment0(cube_files["data"]))


def test_moment0_on_a_distributed_cluster_over_s3(cube_files, s3_env):
    """Two worker processes: each unpickles the cube (no connection, no key in it), opens its own
    transport with keys from boto3's chain (s3_env, inherited) and reads its chunks."""
    import os

    from distributed import Client, LocalCluster

    with ingest.open(cube_files["s3"]) as cube, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        arr = da.from_array(cube, chunks=(4, 20, 24))
        got = client.compute(moment0(arr)).result()
        assert os.getpid() not in client.run(os.getpid).values()
        assert cube.stats.reads == 0  # every chunk was read in a worker
    assert got.dtype == np.int64 and np.array_equal(got, moment0(cube_files["data"]))


def test_to_xarray_is_lazy_and_labelled(cube_files):
    with ingest.open(cube_files["path"]) as cube:
        xa = cube.to_xarray(chunks=(4, 20, 24))
        assert cube.stats.reads == 0
        assert xa.dims == ("freq", "dec", "ra") and xa.shape == SHAPE and xa.name is None
        assert xa.attrs["units"] == "Jy/beam" and set(xa.coords) == {"freq"}  # RA/Dec are 2-D: see cube.wcs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spectral = WCS(fits.getheader(cube_files["path"])).spectral
        assert np.array_equal(xa["freq"].values, spectral.pixel_to_world_values(np.arange(SHAPE[0])))
        assert xa["freq"].attrs["units"] == "Hz"
        plane = xa.sel(freq=xa["freq"][5]).isel(dec=slice(2, 9)).values
        assert cube.stats.reads == 2  # the two chunks the selection touches, nothing else
    assert np.array_equal(plane, cube_files["data"][5, 2:9])


def test_to_xarray_for_hdf5(tmp_path):
    plain = tmp_path / "plain.h5"
    write_hdf5_cube(plain, (6, 10, 12), -32, chunks=(2, 5, 6))
    idia = tmp_path / "idia.h5"
    write_hdf5_cube(idia, (6, 10, 12), -32, idia=True)  # FITS keys as the dataset's attributes
    with ingest.open(plain) as cube:
        xa = cube.to_xarray()
        assert xa.dims == ("dim_0", "dim_1", "dim_2") and xa.data.chunksize == (6, 10, 12)
        assert np.array_equal(xa[1:3].values, cube[1:3])
    with ingest.open(idia) as cube:
        xa = cube.to_xarray()
        assert xa.dims == ("dim_0", "freq", "dec", "ra") and xa["freq"].shape == (6,)
        assert xa.attrs["CTYPE3"] == "FREQ" and cube.wcs.naxis == 3


def test_to_xarray_without_xarray_says_how_to_install(cube_files, monkeypatch):
    monkeypatch.setitem(sys.modules, "xarray", None)  # as if not installed
    with ingest.open(cube_files["path"]) as cube:
        with pytest.raises(ImportError, match=r"pip install ingest\[dask\]"):
            cube.to_xarray()


def test_import_ingest_does_not_import_dask():
    code = "import sys, ingest; print(sorted(m for m in ('dask', 'xarray', 'distributed') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
