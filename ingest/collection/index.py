"""A collection's index: its tiles' records in a JSON file, reused while their objects are unchanged.

Where: the path the caller gives (`index=PATH`; `index="off"` keeps none); else, for a local glob
or prefix, `.ingest-index.json` in the collection's directory (the deepest one without a
wildcard), shared by everyone who reads those tiles; else (an S3 collection, or @FILE) a file
per collection under $XDG_CACHE_HOME/ingest/collections/ (~/.cache without it), named by a
digest of the source string and the S3 endpoint.

What: `{"schema", "read_with": {"hdu", "dataset"}, "tiles": {source: Tile.as_json()}}`. A record
is reused when its object's size and ETag (or, for a local file, mtime) are those the listing
reports now (ObjectEntry.same_object) and it was read with the same HDU or dataset; any other
tile's header is read again. Saving keeps the records of other collections sharing the file
(objects this collection's pattern does not match) and drops those of objects it matches that
are gone. The file is replaced whole (ingest.atomic); one that cannot be read is ignored and
one that cannot be written is reported, never an error: the index saves reads, it decides nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets

from ingest.atomic import atomic_write
from ingest.collection.spec import CollectionSpec
from ingest.collection.tiles import Tile

SCHEMA = "ingest.collection-index/1"
INDEX_NAME = ".ingest-index.json"


def index_path(spec: CollectionSpec, index: str | None = None, endpoint_url: str | None = None) -> str | None:
    """Where `spec`'s index lives (module docstring); None when `index` is "off"."""
    if index == "off":
        return None
    if index:
        return os.path.abspath(os.path.expanduser(index))
    if spec.store == "local":
        return os.path.join(spec.base_dir, INDEX_NAME)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(f"{spec.text}\n{endpoint_url or ''}".encode()).hexdigest()[:16]
    return os.path.join(base, "ingest", "collections", f"{digest}.json")


def load_index(path: str | None, read_with: dict) -> tuple[dict[str, Tile], str | None]:
    """(source -> Tile of every record read with `read_with`, a note when the file was not usable)."""
    if path is None or not os.path.exists(path):
        return {}, None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("schema") != SCHEMA:
            return {}, f"index {path}: schema {doc.get('schema')!r} is not {SCHEMA}; every header is read again"
        if doc.get("read_with") != read_with:
            return {}, f"index {path}: read with {doc.get('read_with')}, not {read_with}; every header is read again"
        return {source: Tile.from_json(source, record) for source, record in doc["tiles"].items()}, None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return {}, f"index {path}: cannot be read ({type(exc).__name__}: {exc}); every header is read again"


def save_index(path: str | None, spec: CollectionSpec, read_with: dict, tiles) -> str | None:
    """Write `tiles` to the index at `path`, keeping other collections' records (module docstring);
    None, or why the index could not be written."""
    if path is None:
        return None
    kept = {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("schema") == SCHEMA and doc.get("read_with") == read_with:
            kept = {source: record for source, record in doc["tiles"].items() if not owned(spec, source)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # absent or unreadable: rewritten whole
    kept.update({tile.source: tile.as_json() for tile in tiles})
    doc = {"schema": SCHEMA, "read_with": read_with, "tiles": dict(sorted(kept.items()))}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with atomic_write(path, tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
    except OSError as exc:
        return f"index {path}: cannot be written ({exc.strerror or exc}); the next job reads every header again"
    return None


def owned(spec: CollectionSpec, source: str) -> bool:
    """Is `source` one of the objects `spec` names (so that its absence now means it is gone)?"""
    if spec.store == "s3":
        prefix = f"s3://{spec.bucket}/"
        return source.startswith(prefix) and spec.matches(source[len(prefix):])
    if spec.store == "local":
        return "://" not in source and spec.matches(source)
    return True  # a list file's own cache holds its objects only
