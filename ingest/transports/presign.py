"""Presigned URLs: make them (SigV4) and read their expiry (SigV4 and SigV2); ingest.redact hides them.

A presigned URL is a bearer credential until it expires: never print or log one unredacted
outside of `presign` itself, whose whole job is to hand it to the user.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qsl, urlsplit

from ingest.errors import ConfigError, TransportError
from ingest.redact import redact_url

MAX_EXPIRES_S = 604800  # SigV4 refuses X-Amz-Expires above 7 days
DEFAULT_EXPIRES_S = 3600

_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split "s3://bucket/key" into (bucket, key); the key keeps any '?', '#' or '/' in it."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ConfigError(f"S3 URI {uri!r}: expected the form s3://bucket/key")
    # Not urlsplit: S3 keys may contain '?' and '#', which are not query or fragment here.
    bucket, sep, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ConfigError(f"S3 URI {uri!r}: no bucket name after s3://")
    if not _BUCKET.match(bucket):
        raise ConfigError(
            f"S3 URI {uri!r}: bucket {bucket!r} is not a valid bucket name "
            "(3+ characters: letters, digits, '.', '-', '_')"
        )
    if not sep or not key:
        raise ConfigError(f"S3 URI {uri!r}: no object key after the bucket (s3://{bucket}/KEY)")
    return bucket, key


def validate_expires_s(expires_s) -> int:
    """Check a presigned-URL lifetime in seconds: an integer from 1 to 604800 (7 days)."""
    if isinstance(expires_s, bool) or not isinstance(expires_s, int):
        raise ConfigError(f"expires_s: expected whole seconds (1..{MAX_EXPIRES_S}), got {expires_s!r}")
    if not 1 <= expires_s <= MAX_EXPIRES_S:
        raise ConfigError(
            f"expires_s: {expires_s} s is outside 1..{MAX_EXPIRES_S} s (SigV4 allows at most 7 days)"
        )
    return expires_s


def presign_url(bucket: str, key: str, expires_s: int = DEFAULT_EXPIRES_S, client=None) -> str:
    """SigV4 presigned GET URL for s3://bucket/key, valid expires_s seconds (default 3600)."""
    validate_expires_s(expires_s)
    if client is None:
        from ingest.transports.s3client import s3_client

        client = s3_client()
    try:
        url = client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s
        )
    except Exception as exc:  # botocore raises NoCredentialsError, ParamValidationError, ...
        raise TransportError(f"s3://{bucket}/{key}: cannot presign: {exc}") from exc
    # A client made without signature_version="s3v4" silently signs SigV2, which versitygw
    # and newer AWS regions refuse with 400 long after the URL was handed out: fail now.
    if "X-Amz-Signature=" not in url:
        raise ConfigError(
            f"s3://{bucket}/{key}: the S3 client signed a SigV2 URL; make it with "
            "ingest.transports.s3client.s3_client() or Config(signature_version='s3v4')"
        )
    return url


def url_expiry(url: str) -> datetime | None:
    """When a presigned URL expires (UTC), from SigV4 X-Amz-Date+X-Amz-Expires or SigV2 Expires."""
    params = {name.lower(): value for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    where = redact_url(url)
    if "x-amz-date" in params or "x-amz-expires" in params:
        try:
            signed_at = datetime.strptime(params["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        except (KeyError, ValueError):
            raise ConfigError(
                f"{where}: SigV4 query parameter X-Amz-Date is missing or not YYYYMMDDTHHMMSSZ"
            ) from None
        try:
            lifetime_s = int(params["x-amz-expires"])
        except (KeyError, ValueError):
            raise ConfigError(f"{where}: SigV4 query parameter X-Amz-Expires is missing or not whole seconds") from None
        return signed_at + timedelta(seconds=lifetime_s)
    if "expires" in params:
        try:
            return datetime.fromtimestamp(int(params["expires"]), tz=timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise ConfigError(f"{where}: SigV2 query parameter Expires is not a Unix time in seconds") from None
    return None


def url_object(url: str) -> tuple[str, str, str] | None:
    """(endpoint_url, bucket, key) of a path-style S3 URL, or None when it is not one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    bucket, _, key = parts.path.lstrip("/").partition("/")
    if not (parts.scheme and parts.netloc and _BUCKET.match(bucket or "") and key):
        return None
    from urllib.parse import unquote

    return f"{parts.scheme}://{parts.netloc}", bucket, unquote(key)


def url_signer(bucket: str, key: str, expires_s: int, endpoint_url: str | None = None):
    """A callable that signs a fresh URL for the object with this process's credentials, or None
    when there are none (boto3's chain finds no keys). Signing is local: no request is made."""
    import boto3

    if boto3.session.Session().get_credentials() is None:
        return None
    from ingest.transports.s3client import shared_s3_client

    client = shared_s3_client(**({"endpoint_url": endpoint_url} if endpoint_url else {}))
    return lambda: presign_url(bucket, key, expires_s=expires_s, client=client)
