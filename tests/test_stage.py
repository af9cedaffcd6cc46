"""The staging baseline: a staged file is byte-identical or absent, however it was downloaded;
and the O_DIRECT reader returns exactly what a buffered read does."""
import errno
import os
import shutil
import subprocess
import tempfile
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from ingest.staging import stage
from ingest.errors import ConfigError, IngestError, TransportError
from ingest.engine.executor import execute
from ingest.transports.presign import presign_url
from ingest.transports import MemoryTransport, open_transport
from ingest.transports.base import Transport
from ingest.transports.posix import DirectIOUnsupportedError, PosixTransport

OBJECT = os.urandom(5 * 1024 * 1024 + 321)  # odd size: the last chunk is short
KEY = "survey/cube.fits"
CHUNK_BYTES = 256 * 1024


@pytest.fixture
def sources(s3_server, s3_bucket, s3_env):
    """OBJECT uploaded once; its s3:// URI and a presigned URL for it."""
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key=KEY, Body=OBJECT)
    return {"s3": f"s3://{s3_bucket}/{KEY}", "presigned": presign_url(s3_bucket, KEY, 3600, client=client)}


class Counting(Transport):
    """Wraps a transport: counts data requests, and raises after `fail_after` of them."""

    name = "counting"

    def __init__(self, inner: Transport, fail_after: int | None = None):
        super().__init__(inner.source)
        self.inner, self.fail_after, self.reads = inner, fail_after, 0
        self._lock = threading.Lock()

    @property
    def display_name(self):
        return self.inner.display_name

    def _stat(self):
        return self.inner.info

    def read_into(self, buffer, offset):
        with self._lock:
            self.reads += 1
            if self.fail_after is not None and self.reads > self.fail_after:
                raise TransportError(f"{self.display_name}: injected failure at offset {offset}")
        return self.inner.read_into(buffer, offset)


# -- pure pieces ------------------------------------------------------------------------------
@pytest.mark.parametrize("offset, nbytes, chunk", [(0, 1, 1), (7, 1000, 64), (100, 4096, 4096), (3, 10, 100)])
def test_contiguous_plan_reads_the_range_in_chunks(offset, nbytes, chunk):
    plan = stage.contiguous_plan(offset, nbytes, chunk)
    assert plan.n_requests == -(-nbytes // chunk)
    assert [plan.request(i).offset for i in range(plan.n_requests)] == list(range(offset, offset + nbytes, chunk))
    out = np.zeros(nbytes, np.uint8)
    execute(plan, MemoryTransport(OBJECT), out, threads=3)
    assert out.tobytes() == OBJECT[offset : offset + nbytes]


def test_contiguous_plan_refuses_bad_sizes():
    with pytest.raises(ConfigError, match="chunk_bytes"):
        stage.contiguous_plan(0, 10, 0)
    with pytest.raises(ConfigError):
        stage.contiguous_plan(0, 0, 10)


@pytest.mark.parametrize("object_bytes", [1, 4095, 4096, 10_000_019, len(OBJECT)])
@pytest.mark.parametrize("chunk", [1000, 4096, 1 << 20])
def test_parts_cover_the_object_once_on_aligned_boundaries(object_bytes, chunk):
    for n_parts in range(1, 9):
        ranges = [stage.part_range(object_bytes, p, n_parts, chunk) for p in range(n_parts)]
        assert ranges[0][0] == 0 and ranges[-1][1] == object_bytes
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        for start, stop in ranges:
            assert start % chunk == 0 and (n_parts == 1 or start % stage.PAGE_BYTES == 0)


@pytest.mark.parametrize("source, name", [
    ("s3://bucket/survey/cube.fits", "cube.fits"),
    ("s3://bucket/odd?name.fits", "odd?name.fits"),  # '?' is part of an S3 key
    ("https://host:9000/bucket/survey/cube%20v2.fits?X-Amz-Signature=abc&X-Amz-Date=x", "cube v2.fits"),
    ("http://127.0.0.1:1/b/cube.fits?X-Amz-Signature=REDACTED", "cube.fits"),
    ("/data/cubes/cube.fits", "cube.fits"),
])
def test_staged_path_is_the_basename_without_query(source, name):
    assert stage.staged_path("/stage", source) == os.path.join("/stage", name)


def test_staged_path_refuses_a_source_without_a_name():
    with pytest.raises(ConfigError, match="file name"):
        stage.staged_path("/stage", "https://host/bucket/dir/")


# -- staging from the real S3 server ----------------------------------------------------------
@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_stage_object_is_byte_identical(sources, method, tmp_path):
    seen = []
    with open_transport(sources[method], method, threads=3) as t:
        final, stage_s, stats = stage.stage_object(t, str(tmp_path / "stage"), chunk_bytes=CHUNK_BYTES,
                                                   threads=3, progress=seen.append)
    assert final == str(tmp_path / "stage" / "cube.fits")
    with open(final, "rb") as f:
        assert f.read() == OBJECT
    assert os.listdir(tmp_path / "stage") == ["cube.fits"]  # no temporary left behind
    assert stats.requests == -(-len(OBJECT) // CHUNK_BYTES) and stats.bytes_wire == len(OBJECT)
    assert sum(seen) == len(OBJECT) and stage_s > 0


@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_three_parts_downloaded_by_three_ranks(sources, method, tmp_path):
    """What the driver does: rank 0 prepares, three "ranks" (threads, each with its own
    transport) download their parts concurrently, rank 0 finalizes."""
    n_parts = 3
    final = stage.staged_path(str(tmp_path), sources[method])
    stage.check_space(str(tmp_path), len(OBJECT))
    tmp = stage.prepare(str(tmp_path), final, len(OBJECT))
    assert os.path.getsize(tmp) == len(OBJECT) and not os.path.exists(final)
    results, errors = {}, []

    def rank(part):
        try:
            with open_transport(sources[method], method, threads=2) as t:
                results[part] = stage.download_part(t, tmp, part, n_parts, chunk_bytes=CHUNK_BYTES, threads=2,
                                                    object_bytes=len(OBJECT))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ranks = [threading.Thread(target=rank, args=(p,)) for p in range(n_parts)]
    for r in ranks:
        r.start()
    for r in ranks:
        r.join()
    assert not errors, errors
    stage.finalize(tmp, final)
    with open(final, "rb") as f:
        assert f.read() == OBJECT
    assert not os.path.exists(tmp)
    assert sum(s.bytes_needed for s in results.values()) == len(OBJECT)
    assert all(s.requests > 0 for s in results.values())


def test_failure_mid_download_leaves_no_file(sources, tmp_path):
    stage_dir = tmp_path / "stage"
    with open_transport(sources["s3"], "s3", threads=2) as inner:
        failing = Counting(inner, fail_after=4)
        with pytest.raises(TransportError, match="injected failure"):
            stage.stage_object(failing, str(stage_dir), chunk_bytes=CHUNK_BYTES, threads=2)
    assert failing.reads > 4  # it really failed part-way, not before starting
    assert os.listdir(stage_dir) == []  # neither cube.fits nor its temporary


def test_check_space_refuses_before_any_request(sources, tmp_path, monkeypatch):
    real_statvfs = os.statvfs

    def little_space(path):
        st = real_statvfs(path)
        return SimpleNamespace(f_bavail=10, f_frsize=4096, f_bfree=st.f_bfree, f_bsize=4096)

    monkeypatch.setattr(os, "statvfs", little_space)
    stage_dir = tmp_path / "stage"
    with open_transport(sources["presigned"], "presigned") as inner:
        counting = Counting(inner)
        with pytest.raises(IngestError) as info:
            stage.stage_object(counting, str(stage_dir), chunk_bytes=CHUNK_BYTES, threads=2)
    message = str(info.value)
    assert str(stage_dir) in message and "40 KiB" in message and str(len(OBJECT)) in message
    assert counting.reads == 0 and not stage_dir.exists()


def test_check_space_judges_a_missing_dir_by_its_parent(tmp_path, monkeypatch):
    stage.check_space(str(tmp_path / "new" / "stage"), 1)  # plenty of room: no error, nothing made
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(IngestError, match="not a directory"):
        stage.check_space(str(tmp_path / "file" / "stage"), 1)


def test_prepare_creates_the_dir_and_reserves_the_blocks(tmp_path):
    final = str(tmp_path / "new" / "cube.fits")
    tmp = stage.prepare(str(tmp_path / "new"), final, 10 << 20)
    assert os.path.dirname(tmp) == os.path.dirname(final) and os.path.getsize(tmp) == 10 << 20
    # ext4/xfs reserve with fallocate, so a full disk is ENOSPC now rather than SIGBUS later.
    assert os.stat(tmp).st_blocks * 512 >= 10 << 20
    stage.abort(tmp)


def test_abort_removes_the_temporary(tmp_path):
    tmp = stage.prepare(str(tmp_path), str(tmp_path / "cube.fits"), 12345)
    stage.abort(tmp)
    stage.abort(tmp)  # already gone: still fine
    assert os.listdir(tmp_path) == []


# -- O_DIRECT and the page cache --------------------------------------------------------------
@pytest.fixture(scope="module")
def disk_file():
    """OBJECT as a file on the real disk (/var/tmp: /tmp may be a tmpfs elsewhere)."""
    directory = tempfile.mkdtemp(prefix="ingest-odirect-", dir="/var/tmp")
    path = os.path.join(directory, "object.bin")
    with open(path, "wb") as f:
        f.write(OBJECT)
    yield path
    shutil.rmtree(directory)


RANGES = [(0, 1), (1, 4095), (4095, 2), (4097, 8191), (12345, 1 << 20), (len(OBJECT) - 1, 1),
          (len(OBJECT) - 5000, 5000), (0, len(OBJECT))]


@pytest.mark.parametrize("buffer_bytes", [4096, 64 * 1024, 16 << 20])
def test_direct_read_equals_buffered_read(disk_file, buffer_bytes):
    with open_transport(disk_file, "posix", direct=True, direct_buffer_bytes=buffer_bytes) as direct, \
            PosixTransport(disk_file) as buffered:
        assert direct.direct and direct.object_bytes == len(OBJECT)
        for offset, nbytes in RANGES:
            a, b = bytearray(nbytes), bytearray(nbytes)
            direct.read_into(memoryview(a), offset)
            buffered.read_into(memoryview(b), offset)
            assert a == b == OBJECT[offset : offset + nbytes], (offset, nbytes)


def test_direct_read_through_the_executor_with_threads(disk_file):
    plan = stage.contiguous_plan(3, len(OBJECT) - 10, 100_003)  # unaligned everything
    out = np.zeros(plan.needed_bytes, np.uint8)
    with PosixTransport(disk_file, direct=True) as t:
        execute(plan, t, out, threads=4)
    assert out.tobytes() == OBJECT[3 : len(OBJECT) - 7]


def test_direct_read_past_the_end_is_an_error(disk_file):
    with PosixTransport(disk_file, direct=True) as t, pytest.raises(TransportError, match="outside"):
        t.read_into(memoryview(bytearray(10)), len(OBJECT) - 5)


def test_direct_refused_by_the_filesystem():
    # procfs refuses O_DIRECT on every kernel; tmpfs did too before Linux 6.6, but not since.
    with pytest.raises(DirectIOUnsupportedError, match="refuses O_DIRECT"):
        PosixTransport("/proc/self/status", direct=True)


def test_direct_on_tmpfs_works_or_refuses_clearly():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = os.path.join("/dev/shm", f"ingest-odirect-{os.getpid()}")
    with open(path, "wb") as f:
        f.write(OBJECT[:10000])
    try:
        t = PosixTransport(path, direct=True)
    except DirectIOUnsupportedError:
        return  # a kernel before 6.6: refused, with the error under test above
    finally:
        os.unlink(path)
    buf = bytearray(9000)
    t.read_into(memoryview(buf), 1000)
    t.close()
    assert buf == OBJECT[1000:10000]


def test_direct_refused_at_read_time(disk_file, monkeypatch):
    """Some filesystems accept the O_DIRECT open and refuse the aligned read itself."""
    def einval(*_):
        raise OSError(errno.EINVAL, "Invalid argument")

    with PosixTransport(disk_file, direct=True) as t:
        monkeypatch.setattr(os, "preadv", einval)
        with pytest.raises(DirectIOUnsupportedError, match="refuses O_DIRECT"):
            t.read_into(memoryview(bytearray(10)), 0)


def test_drop_from_page_cache_evicts_the_staged_file(disk_file):
    fincore = shutil.which("fincore")  # util-linux: counts a file's resident pages
    if fincore is None:
        pytest.fail("fincore (util-linux) is needed to check the page cache")

    def resident_pages():
        out = subprocess.run([fincore, "-b", "-n", "-o", "PAGES", disk_file], capture_output=True, text=True, check=True)
        return int(out.stdout.split()[0])

    with PosixTransport(disk_file) as t:
        t.read_into(memoryview(bytearray(len(OBJECT))), 0)
    assert resident_pages() > 0
    stage.drop_from_page_cache(disk_file)
    assert resident_pages() == 0
