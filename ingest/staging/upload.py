"""Upload a large local file to S3 with a part size that respects every S3 multipart limit.

Why this exists: a client with a tiny default part size (MinIO's ~8.8 kB) splits an 800 GB
cube into ~900,000 parts; the store refuses the manifest with "unexpected EOF" and purges
the parts after an hour of uploading. Here the part size is chosen (or checked) against the
limits before a single byte is sent.

What is checked (ingest.staging.integrity; the result's `integrity` says which held): every part
carries the checksum of the policy in ingest.transports.s3client (Content-MD5, which every store
verifies, off AWS); each part's ETag is compared with the MD5 of the bytes sent, as the store
answers it (a store that took a CRC32 it does not verify still cannot store a damaged part
unnoticed); and the completed object's ETag (a HEAD) must be the one those MD5s make.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from ingest.errors import ConfigError, IngestError, TransportError
from ingest.staging import integrity
from ingest.transports.presign import parse_s3_uri

# S3's multipart limits and the part-size rule live in the pure core (ingest.core.parts), which
# the publish planner shares; re-exported here for this module's callers.
from ingest.core.parts import (DEFAULT_PART_BYTES, MAX_OBJECT_BYTES, MAX_PART_BYTES, MAX_PARTS, MIN_PART_BYTES,
                               choose_part_bytes)

DEFAULT_CONCURRENCY = 8

__all__ = ["DEFAULT_PART_BYTES", "MAX_OBJECT_BYTES", "MAX_PART_BYTES", "MAX_PARTS", "MIN_PART_BYTES",
           "DEFAULT_CONCURRENCY", "choose_part_bytes", "upload_file", "UploadResult"]


@dataclass(frozen=True)
class UploadResult:
    """What upload_file did: where, how big (bytes), how it was split, how long it took (s)."""

    bucket: str
    key: str
    object_bytes: int
    part_bytes: int
    n_parts: int
    elapsed_s: float
    etag: str
    checksum: str = ""  # what the store was given to verify: "Content-MD5" or "CRC32" (ingest.transports.s3client)
    integrity: dict = field(default_factory=dict)  # parts, part_etags, object, guard: what was checked, by whom


def _progress_bar(total_bytes: int, label: str, enabled: bool):
    """A thread-safe byte callback driving a tqdm bar on stderr (a no-op when disabled)."""
    from tqdm import tqdm

    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
               file=sys.stderr, disable=not enabled, leave=False)
    lock = threading.Lock()

    def update(n_bytes: int) -> None:
        # s3transfer calls back from its worker threads; tqdm's counter is not atomic.
        with lock:
            bar.update(n_bytes)

    return bar, update


def upload_file(path: str, s3_uri: str, part_bytes: int | None = None,
                concurrency: int = DEFAULT_CONCURRENCY, progress: bool = True, client=None,
                request_checksum_calculation: str | None = None) -> UploadResult:
    """Upload path to s3_uri in parts of part_bytes (default: choose_part_bytes) with concurrency threads (8).

    Every part (or the single PUT) carries a checksum the store verifies, as a header, per the
    policy of ingest.transports.s3client, which also governs a `client` given here;
    request_checksum_calculation (when_supported or when_required) overrides the policy for the
    client made here (default: the user's AWS setting, else the policy)."""
    from boto3.s3.transfer import TransferConfig

    bucket, key = parse_s3_uri(s3_uri)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency: expected a number of threads >= 1, got {concurrency!r}")
    if not os.path.isfile(path):
        raise IngestError(f"{path}: no such file (upload needs a regular local file)")
    object_bytes = os.path.getsize(path)
    # Everything is checked before the first request: a bad part size must not cost an hour.
    part = choose_part_bytes(object_bytes, part_bytes)
    n_parts = max(1, math.ceil(object_bytes / part))

    from ingest.transports.s3client import apply_upload_checksums, s3_client

    if client is None:
        extra = {"request_checksum_calculation": request_checksum_calculation} if request_checksum_calculation else {}
        client = s3_client(max_pool_connections=max(10, concurrency), **extra)
    else:
        apply_upload_checksums(client)
    checksum = "CRC32" if client.meta.config.request_checksum_calculation == "when_supported" else "Content-MD5"
    config = TransferConfig(
        multipart_threshold=part,  # a file of at most one part goes as a single PUT
        multipart_chunksize=part,
        max_concurrency=concurrency,
        use_threads=True,
        # "classic" = s3transfer, which honours the sizes above; the CRT client, when
        # installed, would pick its own part size.
        preferred_transfer_client="classic",
    )
    bar, callback = _progress_bar(object_bytes, key.rsplit("/", 1)[-1],
                                  enabled=progress and sys.stderr.isatty())
    started = time.perf_counter()
    watch = _PartWatch(client, bucket, key)
    try:
        with bar, watch:
            client.upload_file(path, bucket, key, Config=config, Callback=callback)
    except Exception as exc:  # S3UploadFailedError, ClientError, EndpointConnectionError, ...
        raise TransportError(f"{s3_uri}: upload of {path} failed{watch.refusals()}: {exc}") from exc
    try:
        head, checked = integrity.check_object(client, bucket, key, watch.part_md5s(n_parts), object_bytes,
                                               single_put=0 in watch.md5s)
    except TransportError:
        raise
    except Exception as exc:  # the HEAD's ClientError
        raise TransportError(f"{s3_uri}: uploaded, but the HEAD that checks it failed: {exc}") from exc
    elapsed_s = time.perf_counter() - started
    md5s = [watch.md5s[n] for n in sorted(watch.md5s)]
    record = {"parts": integrity.CONTENT_MD5 if checksum == "Content-MD5" else integrity.CRC32_ONLY,
              "part_etags": integrity.part_etags_record([watch.etags[n] for n in sorted(watch.md5s)], md5s)
              if md5s else "not checked: no part was seen", "object": checked, "guard": integrity.GUARD_NONE_UPLOAD}
    return UploadResult(bucket, key, object_bytes, part, n_parts, elapsed_s, head.get("ETag", "").strip('"'), checksum,
                        record)


class _PartWatch:
    """During one upload_file: through the client's events, each part's MD5 (the Content-MD5 the
    policy put in, or computed from the body), the store's refusals by part, and each stored
    part's ETag checked against its MD5 (integrity.check_part_etag; a mismatch fails the upload,
    which s3transfer then aborts). Part 0 is a single PutObject."""

    _OPERATIONS = ("UploadPart", "PutObject")

    def __init__(self, client, bucket: str, key: str):
        self.client, self.bucket, self.key = client, bucket, key
        self.uri = f"s3://{bucket}/{key}"
        self.md5s: dict[int, str] = {}  # part number -> hex MD5 of the bytes sent, once stored
        self.etags: dict[int, str] = {}
        self.refused: dict[int, str] = {}  # part number -> the store's error code
        self._tag = f"ingest-part-watch-{uuid.uuid4().hex}"

    def __enter__(self):
        events = self.client.meta.events
        for op in self._OPERATIONS:  # registered after the checksum policy's handler: it runs first
            events.register(f"before-parameter-build.s3.{op}", self._before, unique_id=f"{self._tag}-b-{op}")
            events.register(f"after-call.s3.{op}", self._after, unique_id=f"{self._tag}-a-{op}")
        return self

    def __exit__(self, *exc):
        events = self.client.meta.events
        for op in self._OPERATIONS:
            events.unregister(f"before-parameter-build.s3.{op}", unique_id=f"{self._tag}-b-{op}")
            events.unregister(f"after-call.s3.{op}", unique_id=f"{self._tag}-a-{op}")
        return False

    def _before(self, params, context=None, **_):
        if context is None or params.get("Bucket") != self.bucket or params.get("Key") != self.key:
            return
        md5 = integrity.b64_to_hex(params["ContentMD5"]) if params.get("ContentMD5") else _body_md5(params.get("Body"))
        if md5 is not None:
            context[self._tag] = (int(params.get("PartNumber") or 0), md5)  # this watch's: a client may be shared

    def _after(self, http_response, parsed, context=None, **_):
        number, md5 = (context or {}).get(self._tag, (None, None))
        if number is None:
            return
        if http_response.status_code >= 300:
            self.refused[number] = (parsed.get("Error") or {}).get("Code") or str(http_response.status_code)
            return
        what = f"{self.uri}: part {number}" if number else self.uri
        integrity.check_part_etag(what, parsed.get("ETag", ""), md5, parsed)
        self.md5s[number], self.etags[number] = md5, parsed.get("ETag", "")

    def part_md5s(self, n_parts: int) -> list[str] | None:
        """The MD5s the object's ETag is made of, in order; None when some part was not seen."""
        if 0 in self.md5s:
            return [self.md5s[0]]
        numbers = list(range(1, n_parts + 1))
        return [self.md5s[n] for n in numbers] if sorted(self.md5s) == numbers else None

    def refusals(self) -> str:
        """The parts the store refused, for the error message ('' when none was)."""
        shown = [f"part {n}: {code}" if n else code for n, code in sorted(self.refused.items())]
        return f" (the store refused {', '.join(shown)})" if shown else ""


def _body_md5(body) -> str | None:
    """Hex MD5 of an upload body that can be read twice (bytes, or a seekable file read from where
    it stands and put back: s3transfer's chunk, told not to count this pass as progress)."""
    import hashlib

    if isinstance(body, (bytes, bytearray, memoryview)):
        return integrity.md5_hex(body)
    if not all(callable(getattr(body, name, None)) for name in ("read", "seek", "tell")):
        return None
    digest, start = hashlib.md5(usedforsecurity=False), body.tell()
    pause, resume = getattr(body, "signal_not_transferring", None), getattr(body, "signal_transferring", None)
    if callable(pause):
        pause()
    try:
        for piece in iter(lambda: body.read(8 << 20), b""):
            digest.update(piece)
    finally:
        body.seek(start)
        if callable(resume):
            resume()
    return digest.hexdigest()
