"""`python -m ingest upload FILE s3://bucket/key`: one local file to the store by multipart upload."""
from __future__ import annotations

from ingest.config import add_setting_arguments, setting_values
from ingest.staging.upload import DEFAULT_CONCURRENCY, upload_file
from ingest.transports.s3client import s3_client
from ingest.units import format_bytes, parse_bytes

_SETTINGS = dict.fromkeys(("endpoint_url", "progress", "request_checksum_calculation"))


def add_parser(subparsers) -> None:
    """Register `upload LOCAL_PATH s3://bucket/key [--part-bytes N] [--concurrency N] [--no-progress]`."""
    p = subparsers.add_parser(
        "upload",
        help="upload a local file with a part size that fits S3 multipart limits",
        description="Upload a file to S3 (multipart when larger than one part). The part size is "
        "checked against the S3 limits (5 MiB..5 GiB per part, 10,000 parts, 5 TiB) before "
        "anything is sent. Credentials and endpoint come from boto3's standard chain.",
    )
    p.add_argument("path", metavar="LOCAL_PATH")
    p.add_argument("uri", metavar="s3://BUCKET/KEY")
    p.add_argument("--part-bytes", default=None,
                   help="part size, e.g. 64MiB or 1GiB (default: 64 MiB, raised to fit 10,000 parts)")
    p.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                   help=f"parts in flight at once (default {DEFAULT_CONCURRENCY})")
    add_setting_arguments(p, _SETTINGS, "upload")
    p.set_defaults(func=_run)


def _run(args) -> int:
    given = setting_values(args, _SETTINGS)
    part_bytes = None if args.part_bytes is None else parse_bytes(args.part_bytes, "part_bytes")
    client = None
    checksum = given["request_checksum_calculation"]
    if given["endpoint_url"]:
        extra = {"request_checksum_calculation": checksum} if checksum else {}
        client = s3_client(max_pool_connections=max(10, args.concurrency), endpoint_url=given["endpoint_url"],
                           **extra)
    result = upload_file(args.path, args.uri, part_bytes=part_bytes, concurrency=args.concurrency,
                         progress=given["progress"] is not False, client=client,
                         request_checksum_calculation=checksum)
    rate = result.object_bytes / result.elapsed_s if result.elapsed_s > 0 else 0.0
    print(
        f"uploaded {args.path} -> s3://{result.bucket}/{result.key}: {format_bytes(result.object_bytes)} "
        f"in {result.n_parts} part(s) of {format_bytes(result.part_bytes)}, "
        f"{result.elapsed_s:.2f} s ({format_bytes(rate)}/s), ETag {result.etag}"
    )
    for name, finding in result.integrity.items():  # what was checked, and by whom (ingest.staging.integrity)
        print(f"  {name}: {finding}")
    return 0
