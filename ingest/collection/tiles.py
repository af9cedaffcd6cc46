"""A collection's tiles: each object's header read (concurrently) into a `Tile` record.

A Tile keeps what choosing among tiles needs without reading the object again: its identity
(source, size, ETag or mtime), kind, shape, the header whose WCS maps its pixels to the sky
(ingest.sky.header.wcs_header: a FITS HDU's cards, or an HDF5 dataset's FITS-keyed attributes)
and its footprint (ingest.collection.place.tile_footprint: where it is, as `info` shows it, and
the cone the tile rule's first sift uses). The layout read with it is kept in
memory (`layout`), not in the index: a tile the index restores is opened again by whoever reads
its data, which reads its header then anyway.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ingest.collection.listing import DEFAULT_THREADS, ObjectEntry, stat_local
from ingest.errors import IngestError
from ingest.formats.reader import read_any_layout
from ingest.transports.retry import RetryPolicy


@dataclass(frozen=True)
class Tile:
    """One tile of a collection (module docstring)."""

    source: str  # s3://bucket/key, an absolute path or a URL: the tile's key in the index
    object_bytes: int
    etag: str | None
    last_modified: str | None
    kind: str  # "fits" or "hdf5"
    shape: tuple[int, ...]  # numpy order
    header_text: str  # the WCS header's cards
    footprint: dict  # tile_footprint: centre, corners, spectral range, beam, and the cone holding every pixel centre
    layout: object = field(default=None, compare=False, repr=False)  # as read now; None when from the index

    def header(self):
        """The tile's WCS header (an astropy Header, a fresh copy each call)."""
        import warnings

        from astropy.io import fits

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fits.Header.fromstring(self.header_text)

    def identity(self) -> dict:
        """What a manifest records of the tile a cut-out came from; a change in any of it is a
        changed request (its object key, size, and ETag or mtime)."""
        return {"name": self.source, "object_bytes": self.object_bytes, "etag": self.etag,
                "last_modified": self.last_modified}

    def entry(self) -> ObjectEntry:
        return ObjectEntry(self.source, self.object_bytes, self.etag, self.last_modified)

    def as_json(self) -> dict:
        return {"object_bytes": self.object_bytes, "etag": self.etag, "last_modified": self.last_modified,
                "kind": self.kind, "shape": list(self.shape), "header": self.header_text, "footprint": self.footprint}

    @classmethod
    def from_json(cls, source: str, doc: dict) -> Tile:
        return cls(source, int(doc["object_bytes"]), doc.get("etag"), doc.get("last_modified"), str(doc["kind"]),
                   tuple(int(n) for n in doc["shape"]), str(doc["header"]), dict(doc["footprint"]))


def read_tile(entry: ObjectEntry, *, hdu: int = 0, dataset: str | None = None,
              retry: RetryPolicy = RetryPolicy(), **options) -> Tile:
    """Read one object's header (ingest.formats.reader.read_any_layout) into a Tile; its identity is
    what the read saw (an object replaced since the listing is recorded as it is now)."""
    from ingest.collection.place import tile_footprint
    from ingest.sky.header import wcs_header
    from ingest.transports import open_transport

    with open_transport(entry.source, **options) as transport:
        layout = read_any_layout(transport, hdu=hdu, dataset=dataset, retry=retry)
        info = transport.info
    header = wcs_header(layout)
    seen = entry
    if not entry.same_object(info.object_bytes, info.etag, entry.last_modified):  # replaced since the listing
        seen = stat_local(entry.source) if "://" not in entry.source else \
            ObjectEntry(entry.source, info.object_bytes, info.etag, info.last_modified)
    return Tile(entry.source, seen.object_bytes, seen.etag, seen.last_modified, layout.kind, tuple(layout.shape),
                header.tostring(), tile_footprint(header, layout.shape, getattr(layout, "beams", None)), layout)


def read_tiles(entries: list[ObjectEntry], *, hdu: int = 0, dataset: str | None = None,
               retry: RetryPolicy = RetryPolicy(), threads: int = DEFAULT_THREADS,
               **options) -> tuple[list[Tile], list[tuple[str, str]]]:
    """Every entry's Tile, `threads` header reads at a time, in the entries' order; and the
    (source, reason) of each object that is not a readable cube (not FITS or HDF5, no such HDU,
    a failed read), left out of the collection rather than failing it."""
    def one(entry: ObjectEntry):
        try:
            return read_tile(entry, hdu=hdu, dataset=dataset, retry=retry, **options)
        except IngestError as exc:
            return str(exc)

    if not entries:
        return [], []
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(entries)))) as pool:
        results = list(pool.map(one, entries))
    tiles = [r for r in results if isinstance(r, Tile)]
    refused = [(e.source, r) for e, r in zip(entries, results) if isinstance(r, str)]
    return tiles, refused
