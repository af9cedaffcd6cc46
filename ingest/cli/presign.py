"""`python -m ingest presign s3://bucket/key`: print a presigned GET URL (the only place one is shown)."""
from __future__ import annotations

import sys

from ingest.transports.presign import (
    DEFAULT_EXPIRES_S,
    MAX_EXPIRES_S,
    parse_s3_uri,
    presign_url,
    url_expiry,
    validate_expires_s,
)


def add_parser(subparsers) -> None:
    """Register `presign s3://bucket/key [--expires-s N] [--endpoint-url URL]`."""
    p = subparsers.add_parser(
        "presign",
        help="print a SigV4 presigned GET URL for an object",
        description="Print a SigV4 presigned GET URL. Credentials and endpoint come from boto3's "
        "standard chain (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).",
    )
    p.add_argument("uri", metavar="s3://BUCKET/KEY")
    p.add_argument("--expires-s", type=int, default=DEFAULT_EXPIRES_S,
                   help=f"lifetime in seconds, 1..{MAX_EXPIRES_S} (default {DEFAULT_EXPIRES_S})")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (default: boto3's chain)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ingest.transports.s3client import s3_client

    bucket, key = parse_s3_uri(args.uri)
    validate_expires_s(args.expires_s)
    kw = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    url = presign_url(bucket, key, args.expires_s, client=s3_client(**kw))
    expiry = url_expiry(url)
    print(url)
    if expiry is not None:
        print(f"expires {expiry.isoformat()}", file=sys.stderr)
    return 0

