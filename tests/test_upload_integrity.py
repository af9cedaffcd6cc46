"""An upload's integrity claim, checked on both real stores (versitygw and Ceph RGW): a part damaged
on the way is refused by the store or caught by ingest, the job fails naming the object and the
part, and nothing is left at the key; the reports' `integrity` record and `etag` are what the
store holds. Parts are damaged by a forwarding proxy the test starts on loopback, which flips one
byte in the body of chosen UploadPart requests and passes everything else through untouched.
"""
from __future__ import annotations

import io
import json
import os
import threading
import uuid
import warnings
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from astropy.io import fits

from ingest.errors import TransportError
from ingest.staging import integrity, multipart
from ingest.staging.upload import upload_file
from ingest.testbed.synth import write_cube
from ingest.transports.retry import RetryPolicy
from tests.conftest import _delete_bucket
from tests.forwarding import ForwardingProxy
from tests.mpitools import child_env, cli

pytestmark = pytest.mark.timeout(240)

SHAPE = (24, 256, 320)  # float32, 7.5 MiB: two parts of 5 MiB


class FaultProxy(ForwardingProxy):
    """A loopback HTTP proxy in front of one store: UploadPart requests (PUT with partNumber) for
    part `part` get one byte of their body flipped, the first `times` of them (None: every one);
    `strip_md5` also drops their Content-MD5, as a store that ignores it would. `damaged` counts."""

    def __init__(self, upstream: str, part: int = 2, times: int | None = None, strip_md5: bool = False):
        self.part, self.times, self.strip_md5 = part, times, strip_md5
        self.damaged = 0
        self._lock = threading.Lock()
        super().__init__(upstream, self._maybe_damage)

    def _maybe_damage(self, method: str, path: str, body: bytes, headers: dict):
        query = parse_qs(urlsplit(path).query)
        if method != "PUT" or query.get("partNumber") != [str(self.part)] or not body:
            return body, headers
        with self._lock:
            if self.times is not None and self.damaged >= self.times:
                return body, headers
            self.damaged += 1
        damaged = bytearray(body)
        damaged[len(damaged) // 2] ^= 0xFF
        if self.strip_md5:
            headers = {k: v for k, v in headers.items() if k.lower() != "content-md5"}
        return bytes(damaged), headers


@pytest.fixture(params=["versitygw", "ceph"])
def store(request, tmp_path):
    """One store (its HTTP endpoint), a fresh bucket, and a cube in a `run --output-dir` directory
    (one cut-out: the whole cube) for publish to read."""
    server = request.getfixturevalue("s3_server" if request.param == "versitygw" else "ceph_rgw")
    bucket = server.make_bucket(f"integrity-{uuid.uuid4().hex[:12]}")
    cutouts = tmp_path / "cutouts"
    cutouts.mkdir()
    z, y, x = SHAPE
    cube = cutouts / f"rank0000_x0-{x}_y0-{y}_z0-{z}.fits"
    write_cube(cube, SHAPE, -32)
    proxies = []

    def proxy(**kw) -> FaultProxy:
        proxies.append(FaultProxy(server.endpoint_url, **kw))
        return proxies[-1]

    yield {"name": request.param, "server": server, "bucket": bucket, "client": server.client(),
           "cutouts": str(cutouts), "cube": cube, "proxy": proxy}
    for p in proxies:
        p.stop()
    _delete_bucket(server.client(), bucket)


def _env(store, endpoint: str) -> dict:
    return child_env(store["server"], AWS_ENDPOINT_URL=endpoint, AWS_CONFIG_FILE="/nonexistent",
                     AWS_SHARED_CREDENTIALS_FILE="/nonexistent")


def _publish(store, key: str, endpoint: str, *extra):
    return cli(["publish", "--source", store["cutouts"], "--header-from", store["cube"], "--dest",
                f"s3://{store['bucket']}/{key}", "--part-bytes", "5MiB", "--no-progress", *extra],
               _env(store, endpoint), timeout_s=120)


def _keys_and_uploads(store) -> tuple[list[str], list[str]]:
    client, bucket = store["client"], store["bucket"]
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    uploads = [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    return keys, uploads


# ------------------------------------------------------------------ a part damaged on the way

@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_publish_part_damaged_on_every_attempt_fails_naming_it_and_leaves_nothing(store, method):
    proxy = store["proxy"](part=2)
    proc = _publish(store, "out/damaged.fits", proxy.url, "--upload-method", method, "--retries", "1",
                    "--retry-backoff-s", "0.01")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proxy.damaged == 2  # the first attempt and the one retry
    # Refused by the store: Content-MD5 (and, over HTTP with the S3 API, the signed payload hash).
    assert f"part 2 (bytes 5242880..{os.path.getsize(store['cube'])}) of s3://{store['bucket']}/out/damaged.fits" \
        in proc.stderr, proc.stderr[-2000:]
    assert "BadDigest" in proc.stderr or "XAmzContentSHA256Mismatch" in proc.stderr, proc.stderr[-2000:]
    assert "the upload was aborted" in proc.stderr
    assert _keys_and_uploads(store) == ([], [])  # no object, no unfinished upload, no probe object


def test_damage_the_store_cannot_see_is_caught_by_ingest(store):
    """The proxy drops the part's Content-MD5 as it flips a byte (a presigned URL does not sign it),
    so the store has nothing to check and stores the damaged part; ingest compares the part's ETag
    with the MD5 of what it sent and fails it."""
    proxy = store["proxy"](part=2, strip_md5=True)
    proc = _publish(store, "out/unseen.fits", proxy.url, "--upload-method", "presigned", "--retries", "0")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proxy.damaged == 1
    assert f"s3://{store['bucket']}/out/unseen.fits: part 2: the store's ETag" in proc.stderr
    assert "the MD5 of the bytes sent: the part was damaged on the way" in proc.stderr
    assert _keys_and_uploads(store) == ([], [])


@pytest.mark.parametrize("method", ["s3", "presigned"])
def test_part_damaged_once_is_retried_and_the_report_says_what_was_checked(store, method, tmp_path):
    proxy = store["proxy"](part=2, times=1)
    report = tmp_path / "publish.json"
    key = "out/cube.fits"
    proc = _publish(store, key, proxy.url, "--upload-method", method, "--retry-backoff-s", "0.01", "--report", report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proxy.damaged == 1
    client, bucket = store["client"], store["bucket"]
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    with warnings.catch_warnings(), fits.open(io.BytesIO(body)) as got, fits.open(store["cube"]) as want:
        warnings.simplefilter("ignore")
        assert np.array_equal(got[0].data, want[0].data)
    facts = json.loads(report.read_text())
    head_etag = client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    assert facts["etag"] == head_etag and head_etag.endswith("-2")  # the stored object's, also on RGW
    record = facts["integrity"]
    assert "checksum" not in facts
    assert record["parts"] == "Content-MD5 (store-verified)"
    assert record["part_etags"] == "all 2 matched the MD5 of the bytes sent (ingest-checked)"
    assert record["object"].startswith("ETag matched the MD5 of the parts sent (ingest-checked)")
    # Only versitygw returns the composite CRC32 of an S3-API upload (created with CRC32).
    assert ("composite CRC32 matched" in record["object"]) == (store["name"] == "versitygw" and method == "s3")
    if store["name"] == "versitygw":
        assert record["guard"].startswith("If-None-Match honoured (probe")
    else:  # RGW Pacific completes over an existing object despite If-None-Match: *
        assert record["guard"].startswith("unguarded: the store ignored If-None-Match on completion (probe)")
    assert _keys_and_uploads(store) == ([key], [])  # the probe's object is gone

    again = _publish(store, key, store["server"].endpoint_url, "--overwrite", "--report", report)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(report.read_text())["integrity"]["guard"].startswith("none: overwrite")


# ------------------------------------------------------------------ the object check itself

def test_object_whose_etag_is_not_the_parts_sent_is_deleted_and_named(store):
    """Completion with a record that claims other bytes for part 1: the store's ETag of what it
    holds disagrees with the MD5s ingest says it sent, and the object must not stay."""
    bucket, key = store["bucket"], "out/mismatch.bin"
    client = store["client"]
    upload = multipart.Upload(client, bucket, key, RetryPolicy(retries=0))
    upload.create(None)
    uploader = multipart.PartUploader(bucket, key, upload.upload_id, None, upload.policy, presigned=False, slots=1,
                                      options={}, client=client)
    parts = [os.urandom(5 << 20), os.urandom(1000)]
    records = [uploader.put(n, p) for n, p in enumerate(parts, 1)]
    assert [r.md5 for r in records] == [integrity.md5_hex(p) for p in parts]
    claimed = [replace(records[0], md5=integrity.md5_hex(b"other bytes")), records[1]]
    with pytest.raises(TransportError, match=rf"s3://{bucket}/{key}: the stored object is not what was uploaded: "
                                             r"its ETag is \w+-2, the parts ingest sent make \w+-2; it was deleted"):
        upload.complete(claimed, refuse_existing=False, object_bytes=sum(map(len, parts)))
    assert _keys_and_uploads(store) == ([], [])


# ------------------------------------------------------------------ ingest upload

def test_upload_part_damaged_on_every_attempt_fails_naming_it(store):
    proxy = store["proxy"](part=2)
    uri = f"s3://{store['bucket']}/up/cube.fits"
    proc = cli(["upload", store["cube"], uri, "--part-bytes", "5MiB", "--no-progress"], _env(store, proxy.url))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proxy.damaged >= 1
    assert f"{uri}: upload of {store['cube']} failed (the store refused part 2: " in proc.stderr, proc.stderr[-2000:]
    assert _keys_and_uploads(store) == ([], [])  # s3transfer aborted the upload


def test_upload_reports_what_was_checked_and_the_stored_etag(store, tmp_path):
    client, bucket = store["client"], store["bucket"]
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(1000))
    for path, key, n_parts in ((store["cube"], "up/multi.fits", 2), (small, "up/single.bin", 1)):
        result = upload_file(str(path), f"s3://{bucket}/{key}", part_bytes=5 << 20, progress=False, client=client)
        assert result.n_parts == n_parts
        assert result.etag == client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
        assert result.integrity == {
            "parts": "Content-MD5 (store-verified)",
            "part_etags": f"all {n_parts} matched the MD5 of the bytes sent (ingest-checked)",
            "object": "ETag matched the MD5 of the parts sent (ingest-checked)",
            "guard": "none: upload replaces any object at the key"}, key


def test_upload_with_crc32_alone_is_still_checked_by_ingest(store):
    """Flexible checksums asked for off AWS: the parts carry a CRC32 only, which RGW stores unchecked;
    the record says so, and ingest's own checks (each part's ETag, the object's) still ran."""
    client = store["server"].client(request_checksum_calculation="when_supported")
    uri = f"s3://{store['bucket']}/up/crc32.fits"
    result = upload_file(str(store["cube"]), uri, part_bytes=5 << 20, progress=False, client=client)
    assert result.checksum == "CRC32"
    assert result.integrity["parts"] == integrity.CRC32_ONLY
    assert result.integrity["part_etags"] == "all 2 matched the MD5 of the bytes sent (ingest-checked)"
    assert result.integrity["object"] == "ETag matched the MD5 of the parts sent (ingest-checked)"
