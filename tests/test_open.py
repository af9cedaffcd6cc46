"""`ingest.open`: a RemoteCube over posix, presigned URLs and the S3 API, FITS and HDF5, compared
bit for bit with astropy's section and h5py's read of the same local file; numpy basic indexing
(property-tested against numpy); strict options on every entry point; pickling without secrets;
many threads through one cube; reads into a memmap; plan(); a closed cube."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from astropy.io import fits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ingest
import ingest.driver
import ingest.api.cube
import ingest.config.settings
from ingest.cli.main import main as cli_main
from ingest.errors import ConfigError, RegionError
from ingest.transports.presign import presign_url
from ingest.testbed.synth import write_cube
from ingest.testbed.synth_hdf5 import write_hdf5_cube
from tests.mpitools import ROOT, child_env

# name -> how it is written; hdu/dataset say where the cube is
CUBES = {
    "fits_f32": dict(kind="fits", shape=(12, 23, 29), bitpix=-32, hdu=0),
    "fits_scaled_ext": dict(kind="fits", shape=(6, 19, 21), bitpix=16, hdu=1,
                            scaling={"bscale": 0.5, "bzero": 3.0, "blank": -32768}),
    "h5_chunked": dict(kind="hdf5", shape=(10, 30, 40), bitpix=-32, chunks=(4, 16, 16), compression="gzip"),
    "h5_contiguous": dict(kind="hdf5", shape=(9, 17, 25), bitpix=16, chunks=None, compression="none"),
}
FIXED_KEYS = [(), (2,), (Ellipsis, 7), (slice(1, 5), slice(None, None, 3), -4),
              (slice(None, None, -2), slice(3, 100), slice(-9, -1, 4)), (-1, -1, -1)]


def _write(root, name: str, spec: dict) -> str:
    if spec["kind"] == "fits":
        path = root / f"{name}.fits"
        write_cube(path, spec["shape"], spec["bitpix"], extension=spec["hdu"] == 1, **spec.get("scaling", {}))
    else:
        path = root / f"{name}.h5"
        write_hdf5_cube(path, spec["shape"], spec["bitpix"], chunks=spec["chunks"], compression=spec["compression"],
                        shuffle=spec["chunks"] is not None)
    return str(path)


def local_array(path: str, spec: dict) -> np.ndarray:
    """The whole cube as astropy (scaled) or h5py reads it: numpy's side of every comparison."""
    if spec["kind"] == "fits":
        with warnings.catch_warnings(), fits.open(path) as f:
            warnings.simplefilter("ignore")
            return np.array(f[spec["hdu"]].data)
    with h5py.File(path) as f:
        return f["/cube"][()]


def oracle(path: str, spec: dict, key):
    """astropy's section[key] (FITS) or h5py's dset[key] (HDF5; it refuses negative steps, which
    are then numpy's on h5py's whole read)."""
    if spec["kind"] == "fits":
        with warnings.catch_warnings(), fits.open(path) as f:
            warnings.simplefilter("ignore")
            return np.asarray(f[spec["hdu"]].section[key])
    with h5py.File(path) as f:
        try:
            return f["/cube"][key]
        except ValueError:  # "Step must be >= 1"
            return f["/cube"][()][key]


def assert_bits(got, want, where: str = "") -> None:
    """Same shape and the same bits in the cube's dtype (astropy's section may hand floats back
    widened to float64; narrowing them to the stored float32 is exact)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, where
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want.astype(got.dtype)).tobytes(), where


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    root = tmp_path_factory.mktemp("open-cubes")
    return {name: (_write(root, name, spec), spec) for name, spec in CUBES.items()}


@pytest.fixture(scope="module")
def sources(cubes, s3_server):
    """Per cube: its posix path, s3:// URI and presigned URL on the test server."""
    bucket = s3_server.make_bucket("open-cubes")
    client = s3_server.client()
    out = {}
    for name, (path, _) in cubes.items():
        key = f"c/{path.rsplit('/', 1)[1]}"
        client.upload_file(path, bucket, key)
        out[name] = {"posix": path, "s3": f"s3://{bucket}/{key}",
                     "presigned": presign_url(bucket, key, expires_s=3600, client=client)}
    return out


def _where(spec: dict) -> dict:
    return {"hdu": spec["hdu"]} if spec["kind"] == "fits" else {}


# -- values: every method, every cube ----------------------------------------------------------
@pytest.mark.parametrize("method", ["posix", "presigned", "s3"])
def test_open_equals_astropy_and_h5py(cubes, sources, s3_env, method):
    for name, (path, spec) in cubes.items():
        whole = local_array(path, spec)
        with ingest.open(sources[name][method], threads=3, **_where(spec)) as cube:
            assert cube.shape == whole.shape and cube.ndim == whole.ndim, name
            assert (cube.dtype.kind, cube.dtype.itemsize) == (whole.dtype.kind, whole.dtype.itemsize), name
            assert cube.nbytes == whole.nbytes, name
            for key in FIXED_KEYS:
                assert_bits(cube[key], oracle(path, spec, key), f"{method} {name} {key}")
            assert_bits(cube.read((slice(2, 5), slice(1, 9))), whole[2:5, 1:9], f"{method} {name} read")
            assert cube.stats.reads == len(FIXED_KEYS) + 1


def test_header_attrs_and_wcs(cubes):
    path, spec = cubes["fits_scaled_ext"]
    with ingest.open(path, hdu=1) as cube, fits.open(path) as f:
        assert cube.header["BSCALE"] == 0.5 and cube.header["NAXIS3"] == 6
        assert cube.attrs["BUNIT"] == f[1].header["BUNIT"]
        assert list(cube.wcs.wcs.ctype) == ["RA---SIN", "DEC--SIN", "FREQ"]
        assert cube.dtype == np.dtype("float32")  # astropy's float32 for scaled 16-bit data
    path, spec = cubes["h5_chunked"]
    with ingest.open(path) as cube:
        assert cube.header is None and cube.wcs is None and isinstance(cube.attrs, dict)
        assert cube.chunks == (4, 16, 16) and cube.dtype.str == ">f4"
    with ingest.open(cubes["fits_f32"][0], native_byteorder=True) as cube:
        assert cube.dtype.isnative and cube[0].dtype.isnative


# -- numpy basic indexing, property-tested on local files ---------------------------------------
@st.composite
def basic_keys(draw, shape):
    """Any numpy basic index: ints (negative, some out of bounds), slices with any bounds and
    steps (negative too), at most one Ellipsis, new axes."""
    def axis(n):
        bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
        steps = st.sampled_from([None, 1, 2, 3, 7, -1, -2, -3])
        return st.one_of(st.integers(-n - 1, n), st.builds(slice, bound, bound, steps))

    parts = [draw(axis(n)) for n in shape[: draw(st.integers(0, len(shape)))]]
    for extra in (Ellipsis, None):
        if draw(st.booleans()):
            parts.insert(draw(st.integers(0, len(parts))), extra)
    return parts[0] if len(parts) == 1 and draw(st.booleans()) else tuple(parts)


@pytest.fixture(scope="module")
def opened(cubes):
    out = {}
    for name in ("fits_f32", "h5_chunked"):
        path, spec = cubes[name]
        out[name] = (ingest.open(path, **_where(spec)), local_array(path, spec))
    yield out
    for cube, _ in out.values():
        cube.close()


@pytest.mark.parametrize("name", ["fits_f32", "h5_chunked"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_getitem_is_numpy_basic_indexing(opened, name, data):
    cube, whole = opened[name]
    key = data.draw(basic_keys(whole.shape))
    try:
        want = whole[key]
    except IndexError:
        with pytest.raises(IndexError):
            cube[key]
        return
    got = cube[key]
    assert type(got) is type(want) or np.ndim(want) > 0  # a scalar for all-integer keys, as numpy
    assert_bits(got, want, str(key))


def test_getitem_refuses_fancy_indexing_clearly(opened):
    cube, _ = opened["fits_f32"]
    for key in ([0, 1], np.array([1, 2]), (True,), (slice(None), np.zeros(23, bool))):
        with pytest.raises(IndexError, match="only basic indexing"):
            cube[key]
    with pytest.raises(ValueError, match="step cannot be zero"):
        cube[::0]


# -- strict options ----------------------------------------------------------------------------
def test_unknown_options_name_the_closest_valid_one(cubes):
    path = cubes["fits_f32"][0]
    for call in (ingest.open, lambda p, **kw: ingest.read_subcube(p, (slice(0, 1),), **kw)):
        with pytest.raises(TypeError, match=r"'chunk_byte'.*did you mean chunk_bytes"):
            call(path, chunk_byte=1 << 20)
        with pytest.raises(TypeError, match=r"'thread'.*did you mean threads"):
            call(path, thread=2)
        with pytest.raises(TypeError, match="'bogus_option'"):
            call(path, bogus_option=3)
    with pytest.raises(TypeError, match=r"ingest.driver.run\(\).*'chunk_byte'.*did you mean chunk_bytes"):
        ingest.driver.run(None, source=path, chunk_byte=3)  # refused before any MPI call
    with pytest.raises(TypeError, match=r"'thread'.*did you mean threads"):
        ingest.driver.run(None, {"source": path, "thread": 2})
    with pytest.raises(ConfigError, match="threads"):  # a known option with a bad value: the unit
        ingest.open(path, threads=0)


def test_transport_options_pass_through(sources, s3_server, s3_env):
    src = sources["fits_f32"]
    with ingest.open(src["s3"], endpoint_url=s3_server.endpoint_url, verify_tls=True, connect_timeout_s=5,
                     read_timeout_s=30, client=s3_server.client()) as cube:
        assert cube[1, 2, 3] == ingest.read_subcube(src["posix"], (1, 2, 3))
    got = ingest.read_subcube(src["presigned"], (0,), connect_timeout_s=5, read_timeout_s=30, verify_tls=True)
    assert_bits(got, ingest.read_subcube(src["posix"], (0,)))


def test_driver_run_takes_keyword_options(cubes, tmp_path):
    """ingest.driver.run(comm, source=..., threads=...) on COMM_SELF in a child process (MPI
    is initialised there, not in pytest's)."""
    path, spec = cubes["fits_f32"]
    code = ("import json, numpy as np; from mpi4py import MPI; import ingest.driver as d; "
            f"r = d.run(MPI.COMM_SELF, source={path!r}, threads=2, chunk_bytes='64KiB', progress=False); "
            "print(json.dumps({'box': r.box, 'sum': float(np.asarray(r.data, 'f8').sum())}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=child_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["box"] == [[0, n] for n in spec["shape"]]
    assert result["sum"] == float(local_array(path, spec).astype("f8").sum())


# -- pickling, threads, out=, plan, close ------------------------------------------------------
def test_pickle_carries_no_secret_and_reopens_lazily(sources, s3_server, s3_env, cubes):
    path, spec = cubes["h5_chunked"]
    whole = local_array(path, spec)
    for method in ("s3", "presigned"):
        src = sources["h5_chunked"][method]
        # Live options (a boto3 client, a re-signing callable: neither picklable) stay behind.
        live = {"client": s3_server.client()} if method == "s3" else {"refresh_url": lambda: src}
        with ingest.open(src, **live) as cube:
            cube[0:2]  # tuned and connected: none of it travels
            blob = pickle.dumps(cube)
        assert s3_server.secret_key.encode() not in blob
        copy = pickle.loads(blob)
        assert not copy.closed and copy._transport is None  # nothing opened until the first read
        assert_bits(copy[3:7, ::2, -5:], whole[3:7, ::2, -5:], method)  # keys from boto3's chain (s3_env)
        assert copy._transport is not None and copy.stats.reads == 1
        copy.close()
        assert pickle.loads(pickle.dumps(copy)).closed  # a closed cube stays closed


def test_eight_threads_share_one_cube(sources, cubes, s3_env):
    path, spec = cubes["fits_f32"]
    whole = local_array(path, spec)
    boxes = [(slice(k, k + 4), slice(k, 23), slice(2 * k, 29, k + 1)) for k in range(8)]
    with ingest.open(sources["fits_f32"]["s3"], threads=2) as cube:
        start = threading.Barrier(8)

        def read(box):
            start.wait()
            return cube[box]

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(read, boxes))
        assert cube.stats.reads == 8
    for box, got in zip(boxes, results):
        assert_bits(got, whole[box], str(box))


def test_the_probe_runs_once_under_a_lock(tmp_path, monkeypatch):
    """Eight threads' first reads of an untuned cube: one tunes (the probe), the rest wait for
    it and reuse its cost model through the pure tuner."""
    path = tmp_path / "probe.fits"
    write_cube(path, (20, 128, 128), -32)  # 1.25 MiB: enough data to be worth probing
    real = ingest.config.settings.tune_read
    calls, active, most = [], [0], [0]

    def slow_tune(*args, **kw):
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.05)  # long enough for the other threads to arrive
        tuning, _ = real(*args, **{**kw, "probe": False})
        calls.append(1)
        active[0] -= 1
        return tuning, object()  # "the probe measured something"

    monkeypatch.setattr(ingest.config.settings, "tune_read", slow_tune)
    whole = local_array(str(path), {"kind": "fits", "hdu": 0})
    with ingest.open(path) as cube, ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda k: cube[k, 10:90], range(8)))
        plan = cube.plan((slice(0, 20),))
    assert len(calls) == 1 and most[0] == 1
    assert "measured once" in plan["tuning"]["reason"]
    for k, got in enumerate(results):
        assert_bits(got, whole[k, 10:90])


def test_read_into_memmap_and_checked_out(cubes, tmp_path):
    for name in ("fits_f32", "fits_scaled_ext", "h5_chunked"):
        path, spec = cubes[name]
        region = (slice(1, 4), slice(2, 12), slice(None, None, 2))
        want = local_array(path, spec)[region]
        with ingest.open(path, **_where(spec)) as cube:
            for dtype in (cube.dtype, cube.dtype.newbyteorder()):  # either byte order
                mm = np.memmap(tmp_path / f"{name}-{dtype.str[0]}.raw", dtype=dtype, mode="w+", shape=want.shape)
                assert cube.read(region, out=mm) is mm
                mm.flush()
                back = np.fromfile(tmp_path / f"{name}-{dtype.str[0]}.raw", dtype=dtype).reshape(want.shape)
                assert_bits(back, want, f"{name} {dtype}")
            with pytest.raises(ValueError, match=r"shape \(3, 10, 1\).*reads \(3, 10, \d+\)"):
                cube.read(region, out=np.empty((3, 10, 1), cube.dtype))
            with pytest.raises(ValueError, match="dtype <f8"):
                cube.read(region, out=np.empty(want.shape, "<f8"))
            with pytest.raises(TypeError, match="numpy array"):
                cube.read(region, out=[0.0])
            with pytest.raises(RegionError):  # read() keeps read_subcube's strict regions
                cube.read((slice(0, 1000),))


def test_plan_is_the_plan_command(cubes, capsys):
    path, spec = cubes["fits_f32"]
    settings_ = dict(strategy="small", chunk_bytes=4096, threads=2)
    with ingest.open(path, **settings_) as cube:
        got = cube.plan((slice(0, 5), slice(3, 9), 4))
        assert cube.stats.reads == 0  # planning reads no data
    cli_main(["plan", path, "--region", "0:5,3:9,4", "--strategy", "small", "--chunk-bytes", "4096",
              "--threads", "2", "--json"])
    want = json.loads(capsys.readouterr().out)
    assert got == want
    assert got["requests"] == 5 * 6 and got["bytes_needed"] == 5 * 6 * 4


def test_closed_cube_refuses_reads(cubes):
    path, _ = cubes["fits_f32"]
    with ingest.open(path) as cube:
        cube[0]
    assert cube.closed and cube.shape == (12, 23, 29)  # what it is stays known
    for attempt in (lambda: cube[0], lambda: cube[0:0], lambda: cube.read(), lambda: cube.plan()):
        with pytest.raises(ValueError, match="closed"):
            attempt()
