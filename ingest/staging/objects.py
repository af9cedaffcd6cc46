"""Small objects a job writes into a store beside its data: cut-outs and their manifest.

Every upload goes through `upload_file`, so it follows the one checksum policy of
ingest.transports.s3client (Content-MD5, which every store verifies, unless the store is known to
take flexible checksums). A single PUT's ETag is its body's MD5 on the stores ingest meets, so a
stored cut-out is kept on a re-run only when its size and ETag are the ones recorded.
"""
from __future__ import annotations

import json

from ingest.errors import ConfigError, TransportError
from ingest.transports.presign import parse_s3_uri


def prefix_of(dest: str) -> tuple[str, str]:
    """(bucket, key prefix ending in '/') of s3://bucket/prefix/ (a missing last '/' is added)."""
    if isinstance(dest, str) and dest.startswith("s3://") and "/" not in dest[len("s3://"):].rstrip("/"):
        return parse_s3_uri(dest.rstrip("/") + "/x")[0], ""  # the bucket's top level
    bucket, key = parse_s3_uri(dest)
    return bucket, key if key.endswith("/") else key + "/"


class PrefixStore:
    """The objects under one prefix, with one client (made where every client is made)."""

    def __init__(self, dest: str, client=None):
        self.bucket, self.prefix = prefix_of(dest)
        if client is None:
            from ingest.transports.s3client import s3_client

            client = s3_client()
        self.client = client

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{name}"

    def put_file(self, path: str, name: str) -> dict:
        """Upload a local file as PREFIX/name; what the manifest records of it."""
        from ingest.staging.upload import upload_file

        result = upload_file(path, self.uri(name), progress=False, client=self.client)
        return {"object": self.uri(name), "etag": result.etag, "checksum": result.checksum}

    def put_json(self, name: str, document: dict) -> str:
        """Upload a JSON document as PREFIX/name (through put_file: the same checksum policy)."""
        import os
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ingest-json-") as scratch:
            path = os.path.join(scratch, name)
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(document, fh, indent=1)
            self.put_file(path, name)
        return self.uri(name)

    def get_json(self, name: str) -> dict | None:
        """PREFIX/name as JSON, or None when there is no such object."""
        from botocore.exceptions import ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise TransportError(f"{self.uri(name)}: {exc}") from None
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ConfigError(f"{self.uri(name)}: not JSON ({exc}); remove it to start over") from None

    def stored(self, name: str) -> tuple[int, str] | None:
        """(size in bytes, ETag) of PREFIX/name, or None when it is not there."""
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise TransportError(f"{self.uri(name)}: {exc}") from None
        return int(head["ContentLength"]), head.get("ETag", "").strip('"')
