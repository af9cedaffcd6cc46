"""`python -m ingest presign s3://bucket/key`: print a presigned GET URL (the only place one is shown)."""
from __future__ import annotations

import sys

from ingest.config import add_setting_arguments, setting_values
from ingest.transports.presign import DEFAULT_EXPIRES_S, parse_s3_uri, presign_url, url_expiry, validate_expires_s
from ingest.transports.s3client import s3_client

# The URL's lifetime is the run setting presign_expires_s, spelled --expires-s here.
_SETTINGS = {"presign_expires_s": "--expires-s", "endpoint_url": None}


def add_parser(subparsers) -> None:
    """Register `presign s3://bucket/key [--expires-s N] [--endpoint-url URL]`."""
    p = subparsers.add_parser(
        "presign",
        help="print a SigV4 presigned GET URL for an object",
        description="Print a SigV4 presigned GET URL. Credentials and endpoint come from boto3's "
        "standard chain (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).",
    )
    p.add_argument("uri", metavar="s3://BUCKET/KEY")
    add_setting_arguments(p, _SETTINGS, "presign")
    p.set_defaults(func=_run)


def _run(args) -> int:
    bucket, key = parse_s3_uri(args.uri)
    given = setting_values(args, _SETTINGS)
    expires_s = given["presign_expires_s"] or DEFAULT_EXPIRES_S
    validate_expires_s(expires_s)
    kw = {"endpoint_url": given["endpoint_url"]} if given["endpoint_url"] else {}
    url = presign_url(bucket, key, expires_s, client=s3_client(**kw))
    expiry = url_expiry(url)
    print(url)
    if expiry is not None:
        print(f"expires {expiry.isoformat()}", file=sys.stderr)
    return 0

