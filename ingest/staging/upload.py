"""Upload a large local file to S3 with a part size that respects every S3 multipart limit.

Why this exists: a client with a tiny default part size (MinIO's ~8.8 kB) splits an 800 GB
cube into ~900,000 parts; the store refuses the manifest with "unexpected EOF" and purges
the parts after an hour of uploading. Here the part size is chosen (or checked) against the
limits before a single byte is sent.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from dataclasses import dataclass

from ingest.errors import ConfigError, IngestError, TransportError
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
    try:
        with bar:
            client.upload_file(path, bucket, key, Config=config, Callback=callback)
        head = client.head_object(Bucket=bucket, Key=key)
    except Exception as exc:  # S3UploadFailedError, ClientError, EndpointConnectionError, ...
        raise TransportError(f"{s3_uri}: upload of {path} failed: {exc}") from exc
    elapsed_s = time.perf_counter() - started
    if head.get("ContentLength") != object_bytes:
        raise TransportError(
            f"{s3_uri}: stored object is {head.get('ContentLength')} B but {path} is {object_bytes} B"
        )
    return UploadResult(bucket, key, object_bytes, part, n_parts, elapsed_s, head.get("ETag", "").strip('"'), checksum)
