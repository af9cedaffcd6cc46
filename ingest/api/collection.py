"""`ingest.open` over a collection of tile cubes: a `CubeCollection`, whose `cutout` cuts from the tile
the rule picks.

    with ingest.open("s3://survey/field/*.fits") as field:
        cut = field.cutout(SkyCoord(150.1, -30.2, unit="deg"), 1 * u.arcmin, (1.4170 * u.GHz, 1.4185 * u.GHz))
        cut.writeto("source.fits")          # that tile's file for the box: header, data, BEAMS rows

The tile is the one ingest.collection.rule picks (whole and farthest from its edges, else its
largest part; ties to the first key), answered through each tile's own WCS; the cut-out is that
tile's `RemoteCube.cutout`, the same bytes `run --pos --band` over the collection writes. Tiles
are opened when first cut from and kept open until close().
"""
from __future__ import annotations

import threading

from ingest.errors import RegionError

# ingest.open's keywords that also reach the collection's listing and header reads
_LISTING_OPTIONS = ("endpoint_url", "verify_tls", "ca_bundle", "connect_timeout_s", "read_timeout_s")


class CubeCollection:
    """A collection's tiles (`tiles`: ingest.collection.tiles.Tile records in key order) and cut-outs
    from the tile the rule picks (`cutout`, `tile_for`)."""

    def __init__(self, collection, open_tile, tile_options: dict):
        self.collection = collection
        self._open_tile, self._options = open_tile, tile_options
        self._cubes: dict[int, object] = {}
        self._lock = threading.Lock()

    @property
    def tiles(self) -> tuple:
        return self.collection.tiles

    def __len__(self) -> int:
        return len(self.collection.tiles)

    def __repr__(self) -> str:
        return f"CubeCollection({self.collection.describe()})"

    def tile_for(self, center=None, radius=None, spectral=None, *, pos=None, channels=None, convention="radio",
                 rest=None, frame="icrs"):
        """The rule's Choice (ingest.collection.rule) for one region, given as `cutout` takes it:
        its tile index in `tiles` and box there, or its reason when it is off every tile."""
        from ingest.api.sky import one_position
        from ingest.collection.place import place_requests
        from ingest.sky.bands import parse_band
        from ingest.sky.regions import ChannelRange, parse_pos
        from ingest.sky.world import sky_circle, spectral_range

        sky = one_position(center, radius, pos)
        if isinstance(sky, tuple):
            sky = sky_circle(*sky)
        elif isinstance(sky, str):
            sky = parse_pos(sky, frame=frame)
        band = spectral
        if isinstance(band, tuple):
            band = spectral_range(*band, convention=convention, rest=rest)
        elif isinstance(band, str):
            band = parse_band(band, convention=convention, rest=rest)
        elif band is None and channels is not None:
            band = ChannelRange(*channels) if isinstance(channels, tuple) else channels
        return place_requests(self.collection.tiles, [sky], [band])[0]

    def cutout(self, center=None, radius=None, spectral=None, *, pos=None, channels=None, convention="radio",
               rest=None, frame="icrs"):
        """`RemoteCube.cutout` (same arguments) of the tile the rule picks for the region: an
        ingest.api.sky.Cutout with that tile's WCS, box, beams and file. A region off every tile is
        a RegionError with the rule's reason."""
        options = dict(pos=pos, channels=channels, convention=convention, rest=rest, frame=frame)
        choice = self.tile_for(center, radius, spectral, **options)
        if choice.tile is None:
            raise RegionError(f"cutout: {choice.reason}")
        return self.cube(choice.tile).cutout(center, radius, spectral, **options)

    def cube(self, index: int):
        """Tile `index` as a RemoteCube (ingest.open with this collection's options), opened once."""
        with self._lock:
            if index not in self._cubes:
                self._cubes[index] = self._open_tile(self.collection.tiles[index].source, **self._options)
            return self._cubes[index]

    def close(self) -> None:
        with self._lock:
            cubes, self._cubes = list(self._cubes.values()), {}
        for cube in cubes:
            cube.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_cube_collection(source: str, open_tile, *, hdu: int = 0, dataset: str | None = None, **options):
    """The CubeCollection `source` names (a glob, a prefix ending in '/', or @FILE): its tiles
    listed and their headers read now (through the collection's index), each tile opened by
    `open_tile(tile_source, hdu=, dataset=, **options)` when first cut from."""
    from ingest.collection.open import open_collection

    listing = {k: options[k] for k in _LISTING_OPTIONS if options.get(k) is not None}
    retry = options.get("retry")
    collection = open_collection(source, hdu=hdu, dataset=dataset, **({"retry": retry} if retry else {}), **listing)
    return CubeCollection(collection, open_tile, {"hdu": hdu, "dataset": dataset, **options})
