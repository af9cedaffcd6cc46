"""`ingest.open`'s cache: one session reads no byte twice.

The bookkeeping (ingest.core.rangecache) is property-tested against a brute-force model that
keeps a set of byte offsets; the cube's reads go through a loopback proxy in front of the real S3
server (versitygw) that logs the Range of every GET, so what is counted is what the store was
asked, and the data is compared with astropy's and h5py's reading of the local file.
"""
from __future__ import annotations

import threading
import warnings

import astropy.units as u
import h5py
import numpy as np
import pytest
from astropy.io import fits
from hypothesis import given, settings
from hypothesis import strategies as st

import ingest
from ingest.core.rangecache import RangeCache
from ingest.errors import ConfigError, RetryableError
from ingest.testbed.synth import write_cube
from ingest.testbed.synth_hdf5 import write_hdf5_cube
from ingest.transports.base import MemoryTransport
from ingest.transports.cached import CachedTransport
from ingest.transports.retry import RetryPolicy, read_with_retries
from tests.forwarding import ForwardingProxy

pytestmark = pytest.mark.timeout(300)

SHAPE = (24, 160, 200)  # float32, 3 MiB: z, y, x


# == the bookkeeping, against a set of bytes ==================================================
OBJECT = bytes(np.random.default_rng(7).integers(0, 256, 300, dtype=np.uint8))
ranges = st.tuples(st.integers(0, 300), st.integers(0, 300)).map(sorted).map(tuple)
ops = st.lists(st.tuples(st.sampled_from(["put", "get"]), ranges), max_size=40)


def _runs(offsets: set[int], start: int, stop: int) -> list[tuple[int, int]]:
    """Maximal runs of [start, stop) whose bytes are in `offsets` (brute force)."""
    out: list[list[int]] = []
    for i in range(start, stop):
        if i in offsets:
            if out and out[-1][1] == i:
                out[-1][1] = i + 1
            else:
                out.append([i, i + 1])
    return [(a, b) for a, b in out]


@settings(max_examples=300, deadline=None)
@given(ops=ops, budget=st.integers(0, 200), block=st.integers(1, 40))
def test_range_cache_matches_a_set_of_bytes(ops, budget, block):
    cache = RangeCache(budget, block_bytes=block)
    held: set[int] = set()  # the model: which bytes are held
    history: list[set[int]] = []  # per operation, the bytes it put or found held, newest last
    for kind, (a, b) in ops:
        if kind == "put":
            cache.put(a, OBJECT[a:b])
            touched = set(range(a, b))
        else:
            pieces = cache.pieces(a, b)
            # Consecutive, covering [a, b); held pieces exact; missing runs maximal and exactly
            # the bytes not held.
            bounds = [a] + [hi for _lo, hi, _data in pieces]
            assert [lo for lo, _hi, _data in pieces] == bounds[:-1] and bounds[-1] == b
            assert all(bytes(data) == OBJECT[lo:hi] for lo, hi, data in pieces if data is not None)
            missing = [(lo, hi) for lo, hi, data in pieces if data is None]
            assert missing == _runs(set(range(a, b)) - held, a, b)
            assert cache.missing(a, b) == missing
            touched = set(range(a, b)) & held
        now = {i for lo, hi in cache.spans() for i in range(lo, hi)}
        assert now <= held | (touched if kind == "put" else set())  # nothing held that was never put
        assert cache.held_bytes == len(now) <= budget
        history.append(touched)
        held = now
        # Least recently used first: the bytes of the latest operations whose ranges (plus a block
        # either side, where a touched entry may reach) fit the budget are all still held.
        room = budget
        for recent in reversed(history):
            room -= (max(recent) - min(recent) + 1 + 2 * (block - 1)) if recent else 0
            if room < 0:
                break
            assert recent <= held, "a recently used byte was dropped before older ones"


def test_range_cache_unbounded_holds_the_union_of_its_puts_once():
    cache = RangeCache(10**6, block_bytes=7)
    cache.put(10, OBJECT[10:50])
    cache.put(30, OBJECT[30:90])
    cache.put(0, OBJECT[0:5])
    assert cache.spans() == [(0, 5), (10, 90)] and cache.held_bytes == 85
    assert cache.missing(0, 100) == [(5, 10), (90, 100)]


def test_range_cache_drops_least_recent_first():
    cache = RangeCache(20, block_bytes=10)
    cache.put(0, OBJECT[0:10])
    cache.put(100, OBJECT[100:110])
    cache.pieces(0, 5)  # 0..10 is now the more recent
    cache.put(200, OBJECT[200:210])
    assert cache.spans() == [(0, 10), (200, 210)]


class _Flaky(MemoryTransport):
    """An object in memory that logs what it is asked and, when `break_next`, sends half of the
    next read of 100 bytes or more and then fails (a connection reset)."""

    def __init__(self, data):
        super().__init__(data)
        self.asked: list[tuple[int, int]] = []
        self.break_next = False

    def read_into(self, buffer, offset):
        n = len(buffer)
        self.asked.append((offset, offset + n))
        if self.break_next and n >= 100:
            self.break_next = False
            buffer[: n // 2] = self._data[offset : offset + n // 2]
            raise RetryableError("reset mid-body", kind="reset", received=n // 2)
        return super().read_into(buffer, offset)


def test_a_broken_run_resumes_after_what_arrived_and_what_was_held():
    data = bytes(range(256)) * 2
    inner = _Flaky(data)
    cached = CachedTransport(inner, 10**6)
    policy = RetryPolicy(backoff_s=0.0)
    read_with_retries(cached, memoryview(bytearray(200)), 100, policy, lambda *a: None)
    inner.break_next = True
    out = bytearray(350)
    read_with_retries(cached, memoryview(out), 50, policy, lambda *a: None)
    assert bytes(out) == data[50:400]
    # [50, 100) missing, [100, 300) held, [300, 400) broke after 50 bytes: resumed at 350.
    assert inner.asked == [(100, 300), (50, 100), (300, 400), (350, 400)]


# == a proxy that logs what the store is asked ==================================================
class RangeLog(ForwardingProxy):
    """A loopback HTTP proxy in front of one store that passes everything through and logs the
    (start, stop) of each ranged GET (`ranges`)."""

    def __init__(self, upstream: str):
        self.ranges: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        super().__init__(upstream, self._log)

    def _log(self, method: str, path: str, body: bytes, headers: dict):
        spec = next((v for k, v in headers.items() if k.lower() == "range"), None)
        if method == "GET" and spec and spec.startswith("bytes="):
            first, last = spec[len("bytes="):].split("-")
            with self._lock:
                self.ranges.append((int(first), int(last) + 1))
        return body, headers

    def asked_bytes(self) -> int:
        return sum(b - a for a, b in self.ranges)

    def twice_bytes(self) -> int:
        """Bytes asked for more than once (the asked minus their union)."""
        union, end = 0, 0
        for a, b in sorted(self.ranges):
            union += max(0, b - max(a, end))
            end = max(end, b)
        return self.asked_bytes() - union


@pytest.fixture(scope="module")
def cubes(tmp_path_factory, s3_server):
    """A FITS cube and a chunked HDF5 cube, local and in a bucket: {kind: (path, s3 URI, array)}."""
    root = tmp_path_factory.mktemp("cache")
    bucket = s3_server.make_bucket("cache-cubes")
    fits_path, h5_path = root / "cube.fits", root / "cube.h5"
    write_cube(fits_path, SHAPE, -32)
    write_hdf5_cube(h5_path, SHAPE, -32, chunks=(6, 40, 50), compression="gzip", shuffle=True)
    with warnings.catch_warnings(), fits.open(fits_path) as f:
        warnings.simplefilter("ignore")
        fits_data = np.array(f[0].data)
    with h5py.File(h5_path) as f:
        h5_data = f["/cube"][()]
    client = s3_server.client()
    out = {}
    for kind, path, data in (("fits", fits_path, fits_data), ("hdf5", h5_path, h5_data)):
        client.upload_file(str(path), bucket, path.name)
        out[kind] = (str(path), f"s3://{bucket}/{path.name}", data)
    return out


@pytest.fixture
def store(s3_server, s3_env):
    log = RangeLog(s3_server.endpoint_url)
    yield log
    log.stop()


def _open(store, uri, **options):
    """The cube through the logging proxy, the log emptied of what opening read (the header)."""
    cube = ingest.open(uri, endpoint_url=store.url, probe=False, **options)
    store.ranges.clear()
    return cube


# Ten boxes that overlap one another (each shares voxels with the one before), like a notebook's
# cut-outs around neighbouring sources, and one read of a whole slab across them.
BOXES = [(slice(2 + z, 14 + z), slice(30 + 7 * k, 80 + 7 * k), slice(40 + 7 * k, 110 + 7 * k))
         for k, z in enumerate([0, 3, 1, 4, 2, 5, 0, 6, 3, 1])]


@pytest.mark.parametrize("engine", ["native", "urllib3"])
@pytest.mark.parametrize("kind", ["fits", "hdf5"])
def test_ten_overlapping_reads_ask_each_stored_byte_once(cubes, store, kind, engine):
    _path, uri, whole = cubes[kind]
    with _open(store, uri, engine=engine) as cube:
        for box in BOXES:
            np.testing.assert_array_equal(cube.read(box), whole[box])
        np.testing.assert_array_equal(cube[4:12, 40:150], whole[4:12, 40:150])
        assert store.ranges and store.twice_bytes() == 0, f"{store.twice_bytes()} bytes asked again"
        stats = cube.stats
        assert stats.bytes_from_cache > 0 and stats.bytes_from_store == store.asked_bytes()
        assert stats.bytes_from_cache + stats.bytes_from_store == stats.bytes_wire
        # The store's requests: the plans', split only around held bytes (not into many small ones).
        assert len(store.ranges) <= 2 * stats.requests, (len(store.ranges), stats.requests)


def test_sky_cutouts_twice_read_the_store_once(cubes, store):
    _path, uri, whole = cubes["fits"]
    with _open(store, uri) as cube:
        centres = cube.wcs.celestial.pixel_to_world([80, 95], [70, 82])
        first = cube.cutout(centres[0], 30 * u.arcsec)
        asked = store.asked_bytes()
        second = cube.cutout(centres[1], 30 * u.arcsec)
        assert store.twice_bytes() == 0 and store.asked_bytes() - asked < asked  # only what the first lacked
        for cut in (first, second):
            np.testing.assert_array_equal(cut.data, whole[tuple(slice(a, b) for a, b in cut.box)])
        assert cube.stats.bytes_from_cache > 0


@pytest.mark.parametrize("off", [0, False, None])
def test_without_a_cache_the_second_read_reads_again(cubes, store, off):
    _path, uri, whole = cubes["fits"]
    with _open(store, uri, cache=off) as cube:
        for _ in range(2):
            np.testing.assert_array_equal(cube[3:9, 20:60], whole[3:9, 20:60])
        assert store.twice_bytes() == store.asked_bytes() // 2 > 0
        stats = cube.stats
        assert stats.bytes_from_cache == 0 and stats.bytes_from_store == stats.bytes_wire == store.asked_bytes()


def test_a_budget_smaller_than_the_data_evicts_and_stays_exact(cubes, store):
    _path, uri, whole = cubes["fits"]
    budget = 256 * 1024  # the slabs below are 2 MiB together
    with _open(store, uri, cache="256KiB") as cube:
        for _ in range(2):
            for z in range(0, 16, 2):
                np.testing.assert_array_equal(cube[z:z + 2], whole[z:z + 2])
                assert cube._reader.held_bytes <= budget
        # The slabs do not fit: the second pass found the first slab's bytes dropped, the last
        # slab's bytes still held.
        assert store.twice_bytes() > 0
        np.testing.assert_array_equal(cube[14:16, :40], whole[14:16, :40])
        assert cube.stats.bytes_from_cache >= whole[14:16, :40].nbytes
        stats = cube.stats
        assert stats.bytes_from_cache + stats.bytes_from_store == stats.bytes_wire == stats.bytes_needed


def test_stats_add_up_and_show_where_bytes_came_from(cubes, store):
    _path, uri, whole = cubes["fits"]
    with _open(store, uri) as cube:
        cube[2:10]  # whole planes: every byte asked is needed
        cube[6:14]
        stats = cube.stats
        plane = whole[0].nbytes
        assert stats.bytes_needed == stats.bytes_wire == 16 * plane
        assert (stats.bytes_from_cache, stats.bytes_from_store) == (4 * plane, 12 * plane) == (
            stats.bytes_needed - store.asked_bytes(), store.asked_bytes())
        assert f"bytes_from_cache={4 * plane}" in repr(stats)
        assert "500 KiB from cache" in str(stats) and "1.5 MiB from the store" in str(stats)


def test_cache_option_is_checked(cubes):
    path, _uri, _whole = cubes["fits"]
    with pytest.raises(ConfigError, match="cache"):
        ingest.open(path, cache="5M")
    with pytest.raises(TypeError, match="did you mean cache"):
        ingest.open(path, cach=0)
