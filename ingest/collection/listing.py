"""A collection's objects, each with its size and identity (ETag, or mtime), sorted by key.

- S3 glob or prefix: the S3 list API (ListObjectsV2, paginated) under the key's literal prefix,
  filtered by the pattern (ingest.collection.spec); size and ETag come with the listing, so
  nothing is asked per object. The client is the transports' (ingest.transports.s3client), with
  the endpoint, TLS and proxies every other S3 request here uses.
- Local glob or prefix: the file system (a glob; a prefix lists the directory tree), size and
  mtime from stat.
- @FILE: the file's lines; each object is asked for its size and identity (a HEAD for s3:// and
  http(s)://, stat for a local path), `threads` at a time.
"""
from __future__ import annotations

import glob
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ingest.collection.spec import CollectionSpec
from ingest.errors import ConfigError, IngestError, TransportError

DEFAULT_THREADS = 16  # header reads and HEADs in flight: latency-bound small requests


@dataclass(frozen=True)
class ObjectEntry:
    """One object of a collection: the source string that opens it (s3://bucket/key or an absolute
    path or URL, also its key in the index), its size and its identity."""

    source: str
    object_bytes: int
    etag: str | None = None
    last_modified: str | None = None  # S3's LastModified as text, or a local file's mtime in ns

    def same_object(self, object_bytes: int, etag: str | None, last_modified: str | None) -> bool:
        """Is this the object an earlier record describes? Same size and, where both have one,
        the same ETag; else the same mtime (a local file)."""
        if object_bytes != self.object_bytes:
            return False
        if self.etag and etag:
            return self.etag == etag
        return last_modified == self.last_modified


def list_objects(spec: CollectionSpec, *, threads: int = DEFAULT_THREADS, **options) -> list[ObjectEntry]:
    """Every object of `spec`, sorted by source string; `options`: the transports' keywords
    (endpoint_url, ca_bundle, ...). An empty collection is a ConfigError naming the spec."""
    if spec.store == "s3":
        entries = _list_s3(spec, **options)
    elif spec.store == "local":
        entries = _list_local(spec)
    else:
        entries = _list_file(spec, threads, **options)
    if not entries:
        raise ConfigError(f"source {spec.text!r}: the collection is empty: {_none_found(spec)}")
    return sorted(entries, key=lambda e: e.source)


def _none_found(spec: CollectionSpec) -> str:
    if spec.store == "s3":
        return (f"no key of bucket {spec.bucket} under {spec.literal_prefix!r} matches {spec.pattern!r} "
                f"(names starting with '.' are left out)")
    if spec.store == "local":
        return f"no file matches {spec.pattern!r} (names starting with '.' are left out)"
    return f"{spec.pattern} lists no object"


def _list_s3(spec: CollectionSpec, **options) -> list[ObjectEntry]:
    from ingest.transports.environment import effective_options
    from ingest.transports.s3client import shared_s3_client

    effective, _ = effective_options({k: v for k, v in options.items() if k in _ENVIRONMENT_OPTIONS})
    client = shared_s3_client(environment=effective["environment"])
    out = []
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=spec.bucket, Prefix=spec.literal_prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                if spec.matches(obj["Key"]):
                    out.append(ObjectEntry(spec.source_of(obj["Key"]), int(obj["Size"]), obj.get("ETag"),
                                           str(obj.get("LastModified"))))
    except Exception as exc:  # noqa: BLE001 - botocore's errors, named without importing botocore here
        error = (getattr(exc, "response", None) or {}).get("Error", {})
        what = f"{error.get('Code')}: {error.get('Message', '')}".strip() if error else f"{type(exc).__name__}: {exc}"
        raise TransportError(f"source {spec.text!r}: cannot list bucket {spec.bucket} under "
                             f"{spec.literal_prefix!r}: {what}") from None
    return out


# What the S3 client's connection needs of the transports' options (the rest are per-read settings).
_ENVIRONMENT_OPTIONS = ("endpoint_url", "ca_bundle", "verify_tls", "profile", "environment")


def _list_local(spec: CollectionSpec) -> list[ObjectEntry]:
    if spec.form == "prefix":
        root = spec.pattern
        if not os.path.isdir(root):
            raise ConfigError(f"source {spec.text!r}: {root} is not a directory")
        paths = []
        for here, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            paths += [os.path.join(here, f) for f in files if not f.startswith(".")]
    else:
        paths = glob.glob(spec.pattern)
    out = []
    for path in paths:
        path = os.path.abspath(path)
        if os.path.isfile(path) and spec.matches(path):
            out.append(stat_local(path))
    return out


def stat_local(path: str) -> ObjectEntry:
    st = os.stat(path)
    return ObjectEntry(path, st.st_size, None, str(st.st_mtime_ns))


def list_file_sources(path: str) -> list[str]:
    """The objects a list file names: one a line, blank lines and `#` comments skipped, a
    relative local path taken from the file's directory."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"source @{path}: cannot read the list of tiles: {exc.strerror or exc}") from None
    base = os.path.dirname(os.path.abspath(path))
    out = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "://" not in line:
            line = os.path.normpath(os.path.join(base, os.path.expanduser(line)))
        out.append(line)
    return list(dict.fromkeys(out))  # a line given twice is one tile


def _list_file(spec: CollectionSpec, threads: int, **options) -> list[ObjectEntry]:
    from ingest.transports import open_transport

    def stat(source: str) -> ObjectEntry:
        if "://" not in source:
            if not os.path.isfile(source):
                raise ConfigError(f"source @{spec.pattern}: lists {source}, which is not a file")
            return stat_local(source)
        try:
            with open_transport(source, **options) as transport:
                info = transport.info
        except IngestError as exc:
            raise TransportError(f"source @{spec.pattern}: lists {source}: {exc}") from None
        return ObjectEntry(source, info.object_bytes, info.etag, info.last_modified)

    sources = list_file_sources(spec.pattern)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(sources) or 1))) as pool:
        return list(pool.map(stat, sources))
