"""The S3 calls of a multipart upload made from many processes: rank 0's `Upload` (create, list,
presign, complete, abort) and every rank's `PartUploader` (one part, checksummed, retried).

Checksums the store verifies, so a part corrupted between our memory and its disk is refused
(BadDigest) rather than stored: with the S3 API, CRC32 (`x-amz-checksum-crc32`, the upload
created with ChecksumAlgorithm CRC32; cheap, and the completed object carries the composite),
plus the Content-MD5 that every client made by ingest.transports.s3client adds to a part where
the store is not known to verify flexible checksums (Ceph RGW Pacific stores a wrong CRC32
silently and checks only Content-MD5); through a presigned URL, Content-MD5, the one checksum
header a store accepts unsigned (a presigned URL would have to sign `x-amz-checksum-*` in
advance, and rank 0 cannot know the bytes when it signs). versitygw verifies both, as AWS does.
Every checksum goes as a header: no part depends on an `aws-chunked` trailer.

Checked by ingest too (ingest.staging.integrity), because not every store verifies what it is
given: each part's ETag must be the MD5 of the bytes sent (else the part is retried), and after
completion a HEAD of the object must show the multipart ETag those MD5s make (and the composite
CRC32, where the store returns one); a mismatch deletes the object. `complete` returns the
integrity record that says which of these held, and the HEAD's ETag (RGW's completion has none).

Retrying is ours (ingest.transports.retry's policy), not botocore's: botocore would retry a
BadDigest four times without saying so, and every retry must count against the same bound. A
throttled part (503 SlowDown, 429, a refused connection) is not a failure: the rank's Limiter
(ingest.engine.throttle) lowers its parts in flight and the part waits a jittered backoff,
bounded by the policy's total_s, not its retries.

One module: Upload, PartUploader and PartFailures share the checksum helpers and the one error
classification (_classify, _call, _call_part) that decides what is retried, throttled or fatal;
split, the rule for a part and for the upload could drift apart.
"""
from __future__ import annotations

import base64
import hashlib
import io
import threading
import time
import zlib
from dataclasses import dataclass

from ingest.engine.throttle import Limiter, ThrottleStats
from ingest.errors import RetryableError, TransportError
from ingest.redact import redact_urls
from ingest.staging import integrity
from ingest.transports.retry import UPLOAD_TIMEOUT, RetryPolicy, chain_texts, retry_call

# Store answers worth another attempt: the server's trouble, or bytes damaged on the way.
_RETRYABLE_CODES = {"SlowDown", "RequestTimeout", "BadDigest", "InternalError", "ServiceUnavailable",
                    "RequestTimeTooSkewed", "XAmzContentSHA256Mismatch"}


@dataclass(frozen=True)
class PartRecord:
    """One stored part: number (1-based), size in bytes, ETag (quoted, as S3 gives it), CRC32 (base64)
    or None; md5: hex MD5 of the bytes ingest meant for it (None: not known); sent: the checksum the
    store was given to verify ("Content-MD5" or "CRC32"; None: found stored, checked on resume)."""

    number: int
    size_bytes: int
    etag: str
    crc32: str | None = None
    md5: str | None = None
    sent: str | None = None


def crc32_b64(buffer) -> str:
    """S3's spelling of a CRC-32: the big-endian 4 bytes, base64 (zlib releases the GIL)."""
    return base64.b64encode(zlib.crc32(buffer).to_bytes(4, "big")).decode()


def md5_b64(buffer) -> str:
    return base64.b64encode(hashlib.md5(buffer).digest()).decode()


def composite_crc32(crc32s: list[str]) -> str:
    """The checksum S3 gives a completed CRC32 upload: the CRC-32 of the parts' CRCs, '-N'."""
    joined = b"".join(base64.b64decode(c) for c in crc32s)
    return f"{crc32_b64(joined)}-{len(crc32s)}"


def part_matches(record: PartRecord, buffer) -> bool:
    """Is the stored part these bytes? Its CRC32 when the store lists one, else its ETag as the
    MD5 of the part (what S3 and versitygw give a part not encrypted with KMS)."""
    if record.size_bytes != len(buffer):
        return False
    if record.crc32:
        return record.crc32 == crc32_b64(buffer)
    return record.etag.strip('"') == hashlib.md5(buffer).hexdigest()


class _BufferFile(io.RawIOBase):
    """A seekable file over a memoryview: botocore takes bytes or a file, and bytes(part) would copy it."""

    def __init__(self, buffer):
        self._view = memoryview(buffer).cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, out) -> int:
        n = max(0, min(len(out), len(self._view) - self._pos))
        out[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n


def _classify(exc: Exception, what: str) -> Exception:
    """A botocore or urllib3 failure as RetryableError (worth another attempt) or TransportError."""
    from botocore.exceptions import ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = error.get("Code", "")
        text = f"{what}: {code or status}: {error.get('Message', '')}".rstrip(": ")
        if status >= 500 or code in _RETRYABLE_CODES:
            return RetryableError(text, kind=code or str(status))
        return TransportError(text)
    if isinstance(exc, HTTPClientError):
        return RetryableError(f"{what}: {type(exc).__name__}: {exc}", kind=type(exc).__name__)
    if isinstance(exc, BotoConnectionError):  # e.g. a refused connection: the socket's error is in kwargs
        cause = exc.kwargs.get("error")
        return RetryableError(f"{what}: {type(exc).__name__}: {exc}" + (f" ({cause})" if cause else ""),
                              kind="connect")
    import urllib3

    if isinstance(exc, urllib3.exceptions.HTTPError):
        return RetryableError(f"{what}: {type(exc).__name__}: {redact_urls(str(exc))}", kind=type(exc).__name__)
    return TransportError(f"{what}: {type(exc).__name__}: {exc}")


def _call(fn, what: str):
    try:
        return fn()
    except (RetryableError, TransportError):
        raise
    except Exception as exc:  # botocore/urllib3 errors, sorted by _classify
        raise _classify(exc, what) from exc


def _stalled(exc: RetryableError) -> str | None:
    """How a part's attempt ran out of time, or None: no answer after its body went (a read
    timeout), or the body itself not taken within the timeout (the socket's send timed out, which
    urllib3 reports as a ProtocolError and botocore as a ConnectionClosedError around it)."""
    if exc.kind == "ReadTimeoutError":
        return "the part's body was sent and no answer came within the read timeout"
    if exc.kind in ("ProtocolError", "ConnectionClosedError") and any("timed out" in t for t in chain_texts(exc)):
        return "the part's body could not be sent within the timeout"
    return None


def _call_part(fn, what: str):
    """_call for one part's upload: a part that runs out of time, sending or waiting for the answer,
    met the uplink's congestion (UPLOAD_TIMEOUT): its rank sends fewer at once."""
    try:
        return _call(fn, what)
    except RetryableError as exc:
        how = _stalled(exc)
        if how is None:
            raise
        raise RetryableError(f"{exc} ({how}: more parts in flight than the link carries in time; this rank sends "
                             f"fewer at once)", kind=UPLOAD_TIMEOUT) from exc


def upload_client(max_pool_connections: int, options: dict | None = None):
    """A boto3 client for the upload: botocore's own retries off (ours count). options: endpoint_url,
    verify_tls, ca_bundle, connect_timeout, read_timeout, request_checksum_calculation (None: boto3's
    chain and defaults; the checksum policy of ingest.transports.s3client, which every part follows)."""
    from ingest.transports.s3client import s3_client

    options = options or {}
    kw = {k: options[k] for k in ("endpoint_url", "connect_timeout", "read_timeout", "request_checksum_calculation")
          if options.get(k) is not None}
    if options.get("verify_tls") is False:
        kw["verify"] = False
    elif options.get("ca_bundle"):
        kw["verify"] = options["ca_bundle"]
    return s3_client(max_pool_connections=max_pool_connections, retries={"total_max_attempts": 1}, **kw)


class Upload:
    """Rank 0's handle on s3://bucket/key and its multipart upload: the calls that need credentials."""

    def __init__(self, client, bucket: str, key: str, policy: RetryPolicy):
        self.client, self.bucket, self.key, self.policy = client, bucket, key, policy
        self.upload_id: str | None = None
        self.checksum: str | None = None  # "CRC32", or None: Content-MD5 per part
        self.guard: str | None = None  # the If-None-Match probe's finding (probe_guard), None: not probed
        self._guard_probe: threading.Thread | None = None
        self.completed = False  # the store completed the upload: nothing left to abort

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def _retry(self, fn, what: str):
        return retry_call(lambda: _call(fn, f"{self.uri}: {what}"), self.policy, f"{self.uri}: {what}")

    def existing_bytes(self) -> int | None:
        """Size of the object at the key, or None when there is none."""
        from botocore.exceptions import ClientError

        def head():
            try:
                return self.client.head_object(Bucket=self.bucket, Key=self.key)["ContentLength"]
            except ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                    return None
                raise
        return self._retry(head, "HEAD")

    def unfinished(self) -> list[dict]:
        """Unfinished multipart uploads of exactly this key, newest first: [{'UploadId', 'Initiated', ...}]."""
        found = self._retry(lambda: self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=self.key),
                            "ListMultipartUploads")
        uploads = [u for u in found.get("Uploads", []) if u.get("Key") == self.key]
        return sorted(uploads, key=lambda u: u.get("Initiated"), reverse=True)

    def create(self, checksum: str | None) -> str:
        options = {"ChecksumAlgorithm": checksum} if checksum else {}
        reply = self._retry(lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key, **options),
                            "CreateMultipartUpload")
        self.upload_id, self.checksum = reply["UploadId"], checksum
        return self.upload_id

    def adopt(self, upload: dict) -> None:
        """Continue an unfinished upload (from `unfinished`)."""
        self.upload_id = upload["UploadId"]
        self.checksum = upload.get("ChecksumAlgorithm") or None

    def parts(self) -> dict[int, PartRecord]:
        """The parts already stored, by number (every page of ListParts)."""
        out, marker = {}, 0
        while True:
            page = self._retry(lambda m=marker: self.client.list_parts(
                Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumberMarker=m), "ListParts")
            for p in page.get("Parts", []):
                out[p["PartNumber"]] = PartRecord(p["PartNumber"], p["Size"], p["ETag"], p.get("ChecksumCRC32"))
            if not page.get("IsTruncated"):
                return out
            marker = page["NextPartNumberMarker"]

    def presign_part(self, number: int, expires_s: int) -> str:
        """A SigV4 URL that lets a rank without credentials PUT part `number` (a bearer credential)."""
        return _call(lambda: self.client.generate_presigned_url(
            "upload_part", Params={"Bucket": self.bucket, "Key": self.key, "UploadId": self.upload_id,
                                   "PartNumber": number}, ExpiresIn=expires_s), f"{self.uri}: presign part {number}")

    def probe_guard(self) -> None:
        """Start finding out whether this store honours If-None-Match on completion
        (integrity.probe_guard), for `complete`'s record. The probe works on a key of its own, so it
        runs on a thread while the parts go up: it is off the path to the first part's upload, and
        `complete` waits for it. Not a daemon: a process that ends early still deletes the probe key."""
        def probe():
            self.guard = integrity.probe_guard(self.client, self.bucket, self.key)

        self._guard_probe = threading.Thread(target=probe, name="ingest-guard-probe")
        self._guard_probe.start()

    def complete(self, records: list[PartRecord], refuse_existing: bool, object_bytes: int) -> dict:
        """Complete with the parts in order, then check the stored object (integrity.check_object:
        size, ETag from the parts' MD5s, composite CRC32). `refuse_existing` sends If-None-Match: *
        so a store that honours it refuses an object that appeared at the key meanwhile. Returns
        {'etag': the HEAD's (the stored object's), 'integrity': the record}."""
        if self._guard_probe is not None:
            self._guard_probe.join()
        ordered = sorted(records, key=lambda r: r.number)
        parts = [{"PartNumber": r.number, "ETag": r.etag, **({"ChecksumCRC32": r.crc32} if self.checksum else {})}
                 for r in ordered]
        call = {"Bucket": self.bucket, "Key": self.key, "UploadId": self.upload_id, "MultipartUpload": {"Parts": parts}}
        guard = self.guard or "unguarded: If-None-Match sent, never seen honoured here; HEAD before the upload only"
        try:
            reply = self._retry(lambda: self.client.complete_multipart_upload(
                **call, **({"IfNoneMatch": "*"} if refuse_existing else {})), "CompleteMultipartUpload")
        except TransportError as exc:
            if refuse_existing and "NotImplemented" in str(exc):  # a store without conditional writes
                reply = self._retry(lambda: self.client.complete_multipart_upload(**call), "CompleteMultipartUpload")
                guard = "unguarded: the store refused If-None-Match (NotImplemented); HEAD before the upload only"
            else:
                raise
        self.completed = True
        composite = None
        if self.checksum == "CRC32" and reply.get("ChecksumCRC32"):
            composite = (reply["ChecksumCRC32"], composite_crc32([r["ChecksumCRC32"] for r in parts]))
        md5s = [r.md5 for r in ordered] if all(r.md5 for r in ordered) else None
        head, checked = self._retry(lambda: integrity.check_object(self.client, self.bucket, self.key, md5s,
                                                                    object_bytes, composite=composite), "HEAD")
        record = {"parts": integrity.parts_record([r.sent for r in ordered]),
                  "part_etags": integrity.part_etags_record([r.etag for r in ordered], md5s) if md5s
                  else "not checked: the parts' MD5s are not known",
                  "object": checked,
                  "guard": guard if refuse_existing else integrity.GUARD_NONE_OVERWRITE}
        return {"etag": head.get("ETag", "").strip('"'), "integrity": record}

    def abort(self, upload_id: str | None = None) -> None:
        upload_id = upload_id or self.upload_id
        self._retry(lambda: self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=upload_id),
                    f"AbortMultipartUpload {upload_id}")


class PartUploader:
    """One rank's part uploads: through its own credentials (S3 API, CRC32) or through presigned
    URLs rank 0 handed it (Content-MD5). Thread-safe: upload slots call `put` concurrently, each
    part admitted by the rank's Limiter (ceiling `slots`), which a throttling store lowers."""

    def __init__(self, bucket: str, key: str, upload_id: str, checksum: str | None, policy: RetryPolicy, *,
                 presigned: bool, slots: int, options: dict, client=None):
        self.bucket, self.key, self.upload_id, self.checksum = bucket, key, upload_id, checksum
        self.policy, self.presigned = policy, presigned
        self.limiter = Limiter(max(1, slots))
        self._failures = PartFailures()
        self._client, self._options, self._slots = None, options, slots
        self._client_lock = threading.Lock()
        self.client_ready_at: float | None = None  # time.time() when a client made here was ready
        self.first_sent_at: float | None = None  # time.time() when the first part's request began
        if presigned:
            self._pool = _url_pool(slots, options)
        elif client is not None:  # rank 0 passes its Upload's client: making one costs 0.2-0.3 s of CPU
            from ingest.transports.s3client import apply_upload_checksums

            # A client made elsewhere still follows the one checksum policy (no aws-chunked trailer).
            self._client = apply_upload_checksums(client)

    def client(self):
        """The S3 client the parts go through: the one given, or one made by the first part that
        needs it (the others wait for it)."""
        with self._client_lock:
            if self._client is None:
                self._client = upload_client(self._slots + 1, self._options)
                self.client_ready_at = time.time()
            return self._client

    def put(self, number: int, buffer, url: str | None = None) -> PartRecord:
        """Upload part `number` (its bytes in `buffer`) with its checksum; retried per the policy."""
        what = f"s3://{self.bucket}/{self.key}: part {number}"
        # The MD5 is computed once, always: it is the Content-MD5 the store verifies (where it is
        # sent) and what ingest checks the part's ETag, then the object's, against.
        md5 = md5_b64(buffer)
        if self.presigned:
            self._note_first_sent()
            return retry_call(lambda: _call_part(lambda: self._put_url(number, buffer, url, md5, what), what),
                              self.policy, what, gate=self.limiter, on_failure=self._failures.counter(len(buffer)))
        crc = crc32_b64(buffer) if self.checksum == "CRC32" else None
        extra = {"ChecksumCRC32": crc} if crc else {}
        client = self.client()
        self._note_first_sent()
        # The client's policy (ingest.transports.s3client): Content-MD5 off AWS, beside the CRC32.
        if not crc or client.meta.config.request_checksum_calculation != "when_supported":
            extra["ContentMD5"] = md5
        sent = "Content-MD5" if "ContentMD5" in extra else "CRC32"

        def put():
            reply = client.upload_part(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
                                             PartNumber=number, Body=_BufferFile(buffer), **extra)
            integrity.check_part_etag(what, reply.get("ETag", ""), integrity.b64_to_hex(md5), reply)
            return PartRecord(number, len(buffer), reply["ETag"], crc, integrity.b64_to_hex(md5), sent)
        return retry_call(lambda: _call_part(put, what), self.policy, what, gate=self.limiter,
                          on_failure=self._failures.counter(len(buffer)))

    def _note_first_sent(self) -> None:
        with self._client_lock:
            if self.first_sent_at is None:
                self.first_sent_at = time.time()

    def throttle_stats(self) -> ThrottleStats:
        """Throttled parts and the parts in flight the store allowed this rank."""
        return self.limiter.stats()

    def failures(self) -> dict:
        """Part attempts that failed other than by a throttle (a timeout, a reset, a bad digest),
        the bytes they had carried, and their kinds: {"failed_attempts", "failed_bytes", "kinds"}."""
        return self._failures.as_dict()

    def _put_url(self, number: int, buffer, url: str, md5: str, what: str) -> PartRecord:
        reply = self._pool.request("PUT", url, body=memoryview(buffer).cast("B"),
                                   headers={"Content-MD5": md5, "Content-Length": str(len(buffer))})
        if reply.status != 200:
            text = reply.data[:300].decode("utf-8", "replace")
            code = text.split("<Code>", 1)[1].split("<", 1)[0] if "<Code>" in text else str(reply.status)
            message = f"{what}: HTTP {reply.status} {code}"
            if reply.status >= 500 or code in _RETRYABLE_CODES:
                raise RetryableError(message, kind=code)
            raise TransportError(message)
        etag = reply.headers.get("ETag", "")
        integrity.check_part_etag(what, etag, integrity.b64_to_hex(md5),
                                  {k.lower(): v for k, v in reply.headers.items()})
        return PartRecord(number, len(buffer), etag, None, integrity.b64_to_hex(md5), "Content-MD5")


class PartFailures:
    """Failed part attempts of one rank, counted from its upload slots (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.attempts = self.bytes = 0
        self.kinds: dict[str, int] = {}

    def counter(self, size_bytes: int):
        """The on_failure callback for one part of size_bytes."""
        def failed(exc) -> None:
            kind = getattr(exc, "kind", None) or type(exc).__name__
            with self._lock:
                self.attempts += 1
                self.bytes += size_bytes
                self.kinds[kind] = self.kinds.get(kind, 0) + 1
        return failed

    def as_dict(self) -> dict:
        with self._lock:
            return {"failed_attempts": self.attempts, "failed_bytes": self.bytes, "kinds": dict(self.kinds)}


def _url_pool(slots: int, options: dict):
    """urllib3 pool for presigned PUTs: TLS trust and proxy resolved as every engine resolves them."""
    import urllib3

    from ingest.transports.environment import resolve

    env = resolve({k: options[k] for k in ("endpoint_url", "verify_tls", "ca_bundle") if options.get(k) is not None})
    verify, ca_file = env.tls_for(env.endpoint_url)
    tls = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE", **({"ca_certs": ca_file} if ca_file else {})}
    timeout = urllib3.Timeout(connect=options.get("connect_timeout") or 10.0, read=options.get("read_timeout") or 60.0)
    pool = dict(num_pools=2, maxsize=max(1, slots), block=True, retries=False, timeout=timeout, **tls)
    proxy = env.proxy_for(env.endpoint_url) if env.endpoint_url else None
    return urllib3.ProxyManager(proxy, **pool) if proxy else urllib3.PoolManager(**pool)
