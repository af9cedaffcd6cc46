"""One way to make a boto3 S3 client, shared by presign, upload, publish and the S3 transport.

Endpoint, TLS trust, region, addressing style and proxies come from
ingest.transports.environment (boto3's own chain, read by botocore, plus curl's proxy rules), the
same resolution every other engine uses; credentials come from boto3's standard chain unless given.

Upload checksums (the policy every client made here follows; docs/stores.md has the table).
Since 1.36 botocore's default, `request_checksum_calculation = when_supported`, sends a streaming
upload over HTTPS as an `aws-chunked` body with a CRC32 trailer. AWS takes it; many S3 stores do
not (Ceph RGW before Reef answers 411 MissingContentLength, and MinIO, SeaweedFS, R2 and
appliances have failed the same way), and some that take a CRC32 header do not verify it (RGW
Pacific). So:
- flexible checksums (CRC32) only where the store is known to take them: AWS's own endpoints
  (no endpoint, or a host under amazonaws.com); elsewhere `when_required`, and every PutObject
  and UploadPart body carries a Content-MD5, the one checksum every S3 store verifies
  (BadDigest on a mismatch);
- the user's choice wins, read as boto3 reads it: an explicit setting (`request_checksum_calculation`,
  e.g. the run config's), then AWS_REQUEST_CHECKSUM_CALCULATION, then the profile's
  `request_checksum_calculation` in the shared config file;
- no upload depends on a trailer: with flexible checksums, the CRC32 of a body ingest can read
  twice (bytes, or a seekable file: every body ingest sends) is computed first and sent as the
  `x-amz-checksum-crc32` header, which every store that takes CRC32 at all accepts.
"""
from __future__ import annotations

import base64
import hashlib
import os
import threading
import zlib
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from ingest.errors import ConfigError
from ingest.transports.environment import Environment, resolve

CHECKSUM_CALCULATIONS = ("when_supported", "when_required")
_UPLOAD_OPERATIONS = ("PutObject", "UploadPart")
_AWS_DOMAINS = ("amazonaws.com", "amazonaws.com.cn")
_READ_BYTES = 8 * 1024 * 1024  # hashing a file body in pieces of this size


def s3_config(max_pool_connections: int = 10, **config_kw) -> Config:
    """botocore Config with SigV4 and path-style addressing unless config_kw's s3 names another
    (a profile's s3.addressing_style reaches it through s3_client); max_pool_connections default 10."""
    # SigV4: without it boto3 still presigns in the old SigV2 form, which versitygw (and
    # newer AWS regions) answer with 400. Path style by default: a loopback or on-site
    # endpoint has no wildcard DNS for bucket.host names.
    options = {"signature_version": "s3v4", "max_pool_connections": max_pool_connections, **config_kw}
    options["s3"] = {"addressing_style": "path", **(config_kw.get("s3") or {})}
    return Config(**options)


def s3_client(max_pool_connections: int = 10, *, config: Config | None = None,
              session: boto3.session.Session | None = None, environment: Environment | None = None, **kw):
    """boto3 S3 client (SigV4) configured from `environment` (default: resolved from kw's
    endpoint_url and verify); kw: client args (endpoint_url, verify, keys, region_name) or
    Config options (read_timeout, ...). Explicit kw win over the environment."""
    # One flat keyword list for callers: Config options (timeouts, retries) go to Config,
    # the rest (endpoint_url, keys, region_name, verify) to session.client.
    config_kw = {name: kw.pop(name) for name in list(kw) if name in Config.OPTION_DEFAULTS}
    if environment is None:
        environment = resolve(_options_from_client_kw(kw))
    endpoint = kw.get("endpoint_url") or environment.endpoint_url
    if endpoint:
        kw["endpoint_url"] = endpoint
    if "verify" not in kw and environment.botocore_verify(endpoint) is not None:
        kw["verify"] = environment.botocore_verify(endpoint)
    if environment.region and "region_name" not in kw:
        kw["region_name"] = environment.region
    if environment.addressing_style:
        config_kw["s3"] = {"addressing_style": environment.addressing_style, **(config_kw.get("s3") or {})}
    if "proxies" not in config_kw:
        # Explicit, even when empty: botocore would otherwise read the proxy variables itself,
        # by Python's rules, not the ones every other engine follows.
        config_kw["proxies"] = environment.botocore_proxies(endpoint or _aws_endpoint(environment.region))
    config_kw["request_checksum_calculation"] = checksum_calculation(
        endpoint, config_kw.get("request_checksum_calculation"), environment.profile)[0]
    merged = s3_config(max_pool_connections, **config_kw)
    if config is not None:
        merged = merged.merge(config)
    # A private Session: boto3's module-level default session is not thread-safe to create.
    if session is None:
        session = boto3.session.Session(profile_name=environment.profile if environment.profile_from_option else None)
    return apply_upload_checksums(session.client("s3", config=merged, **kw))


def checksum_calculation(endpoint_url: str | None, setting: str | None = None,
                         profile: str | None = None) -> tuple[str, str]:
    """(when_supported or when_required, where it came from) for a client of `endpoint_url`: the
    explicit `setting`, else AWS_REQUEST_CHECKSUM_CALCULATION, else the profile's
    request_checksum_calculation, else the policy (flexible checksums on AWS's own endpoints only)."""
    found, source = setting, "request_checksum_calculation setting"
    if not found and os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION"):
        found, source = os.environ["AWS_REQUEST_CHECKSUM_CALCULATION"], "AWS_REQUEST_CHECKSUM_CALCULATION"
    if not found:
        found = _profile_setting(profile or "default", "request_checksum_calculation")
        source = f"profile '{profile or 'default'}' request_checksum_calculation"
    if not found:
        if _is_aws(endpoint_url):
            return "when_supported", "policy: AWS's own endpoint verifies flexible checksums"
        return "when_required", "policy: a store not known to take flexible checksums gets Content-MD5"
    value = str(found).strip().lower()
    if value not in CHECKSUM_CALCULATIONS:
        raise ConfigError(f"request_checksum_calculation: {found!r} (from {source}) is not one of "
                          f"{', '.join(CHECKSUM_CALCULATIONS)}")
    return value, source


def _profile_setting(profile: str, name: str) -> str | None:
    """`name` in the profile's section of the shared config file (AWS_CONFIG_FILE, else
    ~/.aws/config), where botocore reads request_checksum_calculation; None when absent."""
    from botocore.configloader import load_config
    from botocore.exceptions import BotoCoreError

    path = os.path.expanduser(os.environ.get("AWS_CONFIG_FILE") or os.path.join("~", ".aws", "config"))
    try:
        profiles = load_config(path).get("profiles", {})
    except BotoCoreError:  # no file, or one botocore cannot parse (reported where the environment is resolved)
        return None
    return (profiles.get(profile) or {}).get(name)


def _is_aws(endpoint_url: str | None) -> bool:
    """AWS's own S3: no endpoint given (boto3 goes to AWS), or a host under amazonaws.com."""
    if not endpoint_url:
        return True
    host = (urlsplit(endpoint_url).hostname or "").lower()
    return any(host == domain or host.endswith("." + domain) for domain in _AWS_DOMAINS)


def apply_upload_checksums(client):
    """Make `client`'s uploads follow the policy (module docstring) whatever made it: Content-MD5
    on every PutObject and UploadPart body under when_required, the CRC32 as a header (never a
    trailer) under when_supported. Idempotent; returns the client."""
    def add_checksum(params, context=None, **_):
        # A presigned URL has no body to hash: a Content-MD5 signed into it would be the empty
        # body's, and the PUT that later carries the real bytes would fail its signature.
        if (context or {}).get("is_presign_request") or params.get("Body") is None:
            return
        _add_upload_checksum(params, client.meta.config.request_checksum_calculation)

    for operation in _UPLOAD_OPERATIONS:
        client.meta.events.register(f"before-parameter-build.s3.{operation}", add_checksum,
                                    unique_id=f"ingest-upload-checksum-{operation}")
    return client


def _add_upload_checksum(params: dict, calculation: str | None) -> None:
    """Put a checksum header into an upload's parameters when the caller gave none."""
    algorithm = str(params.get("ChecksumAlgorithm") or "").upper()
    given = any(name.startswith("Checksum") and name not in ("ChecksumAlgorithm", "ChecksumType") for name in params)
    # Content-MD5 even beside a flexible checksum the caller gave: a store not known to verify
    # that one (RGW Pacific stores a wrong CRC32 silently) still verifies the MD5.
    want_md5 = calculation != "when_supported" and "ContentMD5" not in params
    # The CRC32 is ours to add only where the caller gave no value and asked for no other algorithm.
    want_crc32 = (calculation == "when_supported" or algorithm == "CRC32") and not given and algorithm in ("", "CRC32")
    if not (want_md5 or want_crc32):
        return
    digests = _digests(params.get("Body"), md5=want_md5, crc32=want_crc32)
    if digests is None:
        return  # a body that cannot be read twice: botocore's own handling (ingest sends none)
    md5, crc32 = digests
    if want_md5:
        params["ContentMD5"] = base64.b64encode(md5.digest()).decode()
    if want_crc32:
        params["ChecksumCRC32"] = base64.b64encode(crc32.to_bytes(4, "big")).decode()


def _digests(body, *, md5: bool, crc32: bool):
    """(md5 object or None, crc32 int) of an upload body, reading a file body from where it
    stands and putting it back; None for a body that cannot be read twice."""
    md5_hash = hashlib.md5(usedforsecurity=False) if md5 else None
    crc = 0

    def update(piece) -> None:
        nonlocal crc
        if md5_hash is not None:
            md5_hash.update(piece)
        if crc32:
            crc = zlib.crc32(piece, crc)

    if isinstance(body, str):
        body = body.encode()
    if isinstance(body, (bytes, bytearray, memoryview)):
        update(body)
        return md5_hash, crc
    if not all(callable(getattr(body, name, None)) for name in ("read", "seek", "tell")):
        return None
    try:
        if callable(getattr(body, "seekable", None)) and not body.seekable():
            return None
        start = body.tell()
    except (OSError, ValueError):
        return None
    # s3transfer's file chunks count what is read as sent (progress callbacks): not this pass.
    pause, resume = getattr(body, "signal_not_transferring", None), getattr(body, "signal_transferring", None)
    if callable(pause):
        pause()
    try:
        for piece in iter(lambda: body.read(_READ_BYTES), b""):
            update(piece)
    finally:
        body.seek(start)
        if callable(resume):
            resume()
    return md5_hash, crc


def _options_from_client_kw(kw: dict) -> dict:
    """Environment options from boto3 client arguments (endpoint_url, verify)."""
    options = {"endpoint_url": kw.get("endpoint_url")}
    verify = kw.get("verify")
    if verify is False:
        options["verify_tls"] = False
    elif isinstance(verify, str):
        options["ca_bundle"] = verify
    return options


def _aws_endpoint(region: str | None) -> str:
    """Where a client without an endpoint connects (for its proxy decision)."""
    return f"https://s3.{region or 'us-east-1'}.amazonaws.com"


_CLIENTS: dict = {}
_CLIENTS_LOCK = threading.Lock()


def shared_s3_client(max_pool_connections: int = 10, *, environment: Environment | None = None, **kw):
    """A process-wide cached s3_client for the same options, AWS_* variables and environment.

    Making a boto3 client costs a tenth of a second or more of CPU, more than a small read; clients are
    thread-safe, so repeated reads in one process share one. The resolved environment and the
    AWS_* variables (credentials) are part of the key, so a changed endpoint, CA, proxy or key
    never reuses a stale client.
    """
    if environment is None:
        environment = resolve(_options_from_client_kw(kw))
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    key = (max_pool_connections, repr(sorted(kw.items())), env, environment)  # repr: values may be dicts
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = s3_client(max_pool_connections, environment=environment, **kw)
    return client
