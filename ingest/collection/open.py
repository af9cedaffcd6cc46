"""`open_collection`: a collection's source string to its tiles, through the index.

The steps, in order: parse the spec (ingest.collection.spec), list the objects with their sizes
and identities (listing), take each unchanged tile's record from the index, read the headers of
the others `threads` at a time (tiles), and save the index. What it returns says how many
headers were read now, so a second job over an unchanged collection can be seen to read none.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.collection.index import index_path, load_index, owned, save_index
from ingest.collection.listing import DEFAULT_THREADS, list_objects
from ingest.collection.spec import CollectionSpec, parse_collection
from ingest.collection.tiles import Tile, read_tiles
from ingest.errors import ConfigError
from ingest.transports.retry import RetryPolicy

MAX_REFUSALS_SHOWN = 5


@dataclass(frozen=True)
class Collection:
    """A collection's readable tiles in key order, the objects left out with their reasons, and
    what the index did (where it is, how many headers were read now, a note when it was not used)."""

    spec: CollectionSpec
    tiles: tuple[Tile, ...]
    refused: tuple[tuple[str, str], ...]  # (source, reason): objects that are not readable cubes
    index_path: str | None
    headers_read: int  # tiles whose header was read now; the others came from the index
    index_note: str | None = None  # why the index was not read or not written, when it was not

    def describe(self) -> str:
        """One line for people: the spec, its tiles, what came from the index."""
        reused = len(self.tiles) - min(self.headers_read, len(self.tiles))
        left = f", {len(self.refused)} objects not cubes" if self.refused else ""
        return (f"{self.spec.text}: {len(self.tiles)} tiles{left}; {self.headers_read} headers read, "
                f"{reused} from the index {self.index_path or '(none kept)'}")


def open_collection(source: str, *, hdu: int = 0, dataset: str | None = None, index: str | None = None,
                    threads: int = DEFAULT_THREADS, retry: RetryPolicy = RetryPolicy(), **options) -> Collection:
    """The Collection `source` names (a glob, a prefix ending in '/', or @FILE). `hdu`/`dataset`:
    which HDU or HDF5 dataset of every tile is the cube; `index`: the index file's path, or "off"
    (default: ingest.collection.index.index_path); `threads`: listing HEADs and header reads in
    flight (default 16); `options`: the transports' keywords (endpoint_url, ca_bundle, ...).
    A ConfigError when no object of it is a readable cube."""
    spec = parse_collection(source)
    entries = list_objects(spec, threads=threads, **options)
    read_with = {"hdu": int(hdu), "dataset": dataset}
    path = index_path(spec, index, options.get("endpoint_url"))
    known, note = load_index(path, read_with)
    reused, to_read = {}, []
    for entry in entries:
        record = known.get(entry.source)
        if record is not None and entry.same_object(record.object_bytes, record.etag, record.last_modified):
            reused[entry.source] = record
        else:
            to_read.append(entry)
    fresh, refused = read_tiles(to_read, hdu=hdu, dataset=dataset, retry=retry, threads=threads, **options)
    by_source = {**reused, **{tile.source: tile for tile in fresh}}
    tiles = tuple(by_source[e.source] for e in entries if e.source in by_source)
    if not tiles:
        shown = "; ".join(f"{s}: {r}" for s, r in refused[:MAX_REFUSALS_SHOWN])
        raise ConfigError(f"source {source!r}: none of its {len(entries)} objects is a readable cube ({shown})")
    gone = {s for s in known if owned(spec, s)} - set(reused)  # changed, removed, or now refused
    if to_read or gone:
        note = save_index(path, spec, read_with, tiles) or note
    return Collection(spec, tiles, tuple(refused), path, len(to_read), note)
