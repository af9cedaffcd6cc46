"""`python -m ingest.study.libraries` (seed 001 Table 7.2) against the real S3 server: every
library downloads the same bytes (CRC-32), in ceil(bytes/chunk) Range GETs, fresh or cached;
a server that ignores Range is refused; the range splitting and CRC combining are pure and
checked by properties."""
import json
import math
import os
import subprocess
import sys
import uuid
import zlib

import pytest
from hypothesis import given, strategies as st

from ingest.transports.presign import presign_url
from ingest.study.libraries import chunk_ranges, crc32_combine, drop_page_cache, server_is_local
from ingest.study.config import LIBRARIES
from tests.badhttp import BadHttpServer
from tests.mpitools import ROOT, child_env

OBJECT_BYTES = 3 << 20
MiB = 1 << 20
ODD_CHUNK_BYTES = MiB - 4099  # does not divide the object: the last request is short
DATA_OFFSET = 2880  # a FITS primary header, as the study passes --offset


@pytest.fixture(scope="module")
def stored(s3_server):
    """A 3 MiB object of random bytes on the server: (bucket, key, its bytes, a presigned URL)."""
    data = os.urandom(OBJECT_BYTES)
    bucket = s3_server.make_bucket(f"libraries-{uuid.uuid4().hex[:12]}")
    s3_server.client().put_object(Bucket=bucket, Key="cube.bin", Body=data)
    return bucket, "cube.bin", data, presign_url(bucket, "cube.bin", client=s3_server.client())


def _libraries(args, env, tmp_path):
    """Run the tool; returns (CompletedProcess, the JSON record or None)."""
    out = tmp_path / f"{uuid.uuid4().hex[:8]}.json"
    proc = subprocess.run([sys.executable, "-m", "ingest.study.libraries", *map(str, args), "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("chunk_bytes, offset, buffer", [(MiB, 0, "whole"), (ODD_CHUNK_BYTES, DATA_OFFSET, "chunk")])
def test_every_library_downloads_the_same_bytes(stored, s3_server, tmp_path, library, chunk_bytes, offset, buffer):
    _, _, data, url = stored
    nbytes = OBJECT_BYTES - offset
    proc, rec = _libraries(["--source", url, "--library", library, "--chunk-bytes", chunk_bytes, "--bytes", nbytes,
                            "--offset", offset, "--threads", 2, "--cache", "cached", "--buffer", buffer],
                           child_env(s3_server), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert rec["crc32"] == zlib.crc32(data[offset:])
    assert rec["requests"] == math.ceil(nbytes / chunk_bytes)
    assert (rec["library"], rec["chunk_bytes"], rec["bytes"], rec["offset"]) == (library, chunk_bytes, nbytes, offset)
    assert rec["cache"] == "cached" and rec["cache_reason"]
    # chunk: ingest's threads checksum their chunks out of order, combined in file order after
    assert rec["buffer"] == buffer and rec["crc_in_elapsed"] == (buffer == "chunk" and library == "ingest")
    assert rec["threads"] == (2 if library == "ingest" else 1)
    assert rec["version"] and rec["elapsed_s"] > 0
    assert rec["throughput_bytes_per_s"] == pytest.approx(nbytes / rec["elapsed_s"])
    assert "X-Amz-Signature" not in proc.stdout + json.dumps(rec), "the presigned URL is a credential"
    assert library in proc.stdout and f"{rec['crc32']:08x}" in proc.stdout


@pytest.mark.parametrize("library", LIBRARIES)
def test_fresh_drops_the_page_cache_or_says_why_not(stored, s3_server, tmp_path, library):
    _, _, data, url = stored
    proc, rec = _libraries(["--source", url, "--library", library, "--chunk-bytes", "1MiB",
                            "--bytes", OBJECT_BYTES, "--cache", "fresh"], child_env(s3_server), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert rec["crc32"] == zlib.crc32(data) and rec["requests"] == 3
    assert rec["buffer"] == "whole", "3 MiB fits: auto keeps the CRC out of the clock"
    # The server is on loopback, so only the permission to write drop_caches decides.
    if os.access("/proc/sys/vm/drop_caches", os.W_OK):
        assert rec["cache"] == "fresh" and "drop_caches" in rec["cache_reason"]
    else:
        assert rec["cache"] == "fresh-unavailable" and "cannot write /proc/sys/vm/drop_caches" in rec["cache_reason"]


def test_an_s3_source_is_presigned_from_the_environment(stored, s3_server, tmp_path):
    bucket, key, data, _ = stored
    proc, rec = _libraries(["--source", f"s3://{bucket}/{key}", "--library", "urllib3", "--chunk-bytes", "1MiB",
                            "--bytes", "2MiB", "--offset", "1MiB"], child_env(s3_server), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert rec["crc32"] == zlib.crc32(data[MiB:]) and rec["requests"] == 2
    assert rec["source"].endswith(f"/{bucket}/{key}?<redacted>")


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_server_that_ignores_range_is_refused(tmp_path, library):
    with BadHttpServer(os.urandom(MiB)) as server:
        server.mode = "ignore_range"  # answers every GET with 200 and the whole object
        proc, rec = _libraries(["--source", server.url, "--library", library, "--chunk-bytes", "256KiB",
                                "--bytes", MiB], child_env(), tmp_path)
    assert proc.returncode == 1 and rec is None
    assert proc.stderr.startswith(f"libraries: {library}: ")
    assert "200" in proc.stderr and "secret" not in proc.stderr
    # Nothing is retried or read on: one request, or one per ingest thread already in flight.
    assert server.requests <= (4 if library == "ingest" else 1)


def test_a_range_past_the_object_fails_naming_the_library(stored, s3_server, tmp_path):
    _, _, _, url = stored
    proc, rec = _libraries(["--source", url, "--library", "requests", "--chunk-bytes", "1MiB",
                            "--bytes", OBJECT_BYTES, "--offset", 1], child_env(s3_server), tmp_path)
    assert proc.returncode == 1 and rec is None
    assert proc.stderr.startswith("libraries: requests: ") and "X-Amz-Signature" not in proc.stderr


def test_a_missing_library_names_the_pip_command(tmp_path):
    shadow = tmp_path / "shadow" / "requests"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named requests (hidden by the test)')\n")
    env = child_env(PYTHONPATH=f"{shadow.parent}{os.pathsep}{ROOT}")
    proc, rec = _libraries(["--source", "http://127.0.0.1:9/b/k", "--library", "requests", "--chunk-bytes", "1MiB",
                            "--bytes", MiB], env, tmp_path)
    assert proc.returncode == 1 and rec is None
    assert "libraries: requests: not installed" in proc.stderr and "pip install requests" in proc.stderr


def test_fresh_is_unavailable_for_a_remote_server_or_an_unwritable_control_file(tmp_path):
    assert server_is_local("127.0.0.1")[0] and server_is_local("localhost")[0]
    assert not server_is_local("192.0.2.7")[0]  # TEST-NET-1: never this machine
    cache, reason = drop_page_cache("https://192.0.2.7/bucket/key?X-Amz-Signature=x")
    assert cache == "fresh-unavailable" and "remote" in reason and "192.0.2.7" in reason
    cache, reason = drop_page_cache("http://127.0.0.1:9/b/k", drop_caches_path=str(tmp_path / "no" / "drop_caches"))
    assert cache == "fresh-unavailable" and "cannot write" in reason


@given(st.integers(0, 1 << 40), st.integers(1, 1 << 31), st.data())
def test_chunk_ranges_tile_the_range_in_chunk_bytes(offset, chunk_bytes, data):
    nbytes = data.draw(st.integers(1, chunk_bytes * 200))  # up to 200 chunks, divisible or not
    ranges = chunk_ranges(offset, nbytes, chunk_bytes)
    assert len(ranges) == math.ceil(nbytes / chunk_bytes)
    assert ranges[0][0] == offset and ranges[-1][1] == offset + nbytes
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "consecutive, no gap or overlap"
    assert all(stop - start == chunk_bytes for start, stop in ranges[:-1])
    assert 0 < ranges[-1][1] - ranges[-1][0] <= chunk_bytes


@given(st.binary(max_size=4096), st.binary(max_size=4096))
def test_crc32_combine_matches_zlib_on_the_concatenation(a, b):
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
