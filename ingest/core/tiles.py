"""Tiled sources (pure): a cube stored as one object per box of a grid, and the index that lists them.

`python -m ingest tile` writes each box of a grid as its own standalone FITS or HDF5 object
(`tile_NNNN.fits|.h5`) next to an `index.json` (schema "ingest.tiles/1"), written last so an
index exists only when every tile does. `run --source .../index.json` reads the tiles through
it. This module is the part without I/O: boxes -> index, index validation, where a tile lives
relative to its index, and which run settings a tiled source accepts.

Index (JSON; numpy axis order except `grid`):
    {"schema": "ingest.tiles/1", "source": <redacted>, "format": "fits" | "hdf5",
     "source_hdu": N | null, "dataset": "/path" | null, "shape": [...], "dtype": ">i2",
     "grid": "2x2x1",  # FITS order, as --grid
     "tiles": [{"key": "tile_0000.fits", "box": [[0, 12], [0, 20], [0, 36]],
                "bytes": 20160, "crc32": 123456789}, ...]}
`key` is relative to the index's location; `crc32` is the CRC-32 of the tile's data bytes as
stored (the stored dtype and byte order, C order), so any reader can check what it read.
Tiles are listed in grid order (C order over the grid, as `decompose.grid_boxes` numbers boxes)
and cover the cube exactly once: validation refuses anything else, naming the field.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from ingest.core.decompose import format_grid, parse_grid
from ingest.errors import ConfigError, IngestError

SCHEMA = "ingest.tiles/1"
INDEX_NAME = "index.json"
MAX_INDEX_BYTES = 64 << 20  # an index lists boxes; anything larger is not one
FORMATS = {"fits": ".fits", "hdf5": ".h5"}
# Keys are plain relative paths: URL-safe without quoting, no '.' or '..' segments, no scheme.
_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")


class TileIndexError(IngestError):
    """A tile index that is malformed, or a tile that does not match its index."""


@dataclass(frozen=True)
class Tile:
    """One box of the cube stored as its own object."""

    key: str  # relative to the index's location
    box: tuple[tuple[int, int], ...]  # numpy order, half-open
    size_bytes: int  # the object's size
    crc32: int  # of its data bytes as stored


@dataclass(frozen=True)
class TileIndex:
    """A validated index: what the tiles hold and where each one is."""

    source: str  # the cube they were cut from (redacted), for provenance and messages
    format: str  # "fits" | "hdf5": the tiles' format, the source's
    shape: tuple[int, ...]  # numpy order
    dtype: str  # stored dtype, e.g. ">i2"
    grid_fits: tuple[int, ...]  # parts per axis, FITS order
    tiles: tuple[Tile, ...]
    source_hdu: int | None = None  # FITS: the source HDU (every tile holds its cube in HDU 0)
    dataset: str | None = None  # HDF5: the dataset path, the same in the source and every tile
    kind = "tiles"  # class attribute: what the format dispatch found (beside "fits", "hdf5")

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def stored_bytes(self) -> int:
        return sum(t.size_bytes for t in self.tiles)

    def as_dict(self) -> dict:
        """The JSON form (schema first, so a reader can tell an index by its first bytes)."""
        return {
            "schema": SCHEMA, "source": self.source, "format": self.format, "source_hdu": self.source_hdu,
            "dataset": self.dataset, "shape": list(self.shape), "dtype": self.dtype,
            "grid": format_grid(self.grid_fits),
            "tiles": [{"key": t.key, "box": [list(b) for b in t.box], "bytes": t.size_bytes, "crc32": t.crc32}
                      for t in self.tiles],
        }

    def to_json(self) -> str:
        """The index as written: one line per field and per tile (diffable, still small)."""
        fields = self.as_dict()
        tiles = fields.pop("tiles")
        head = json.dumps(fields, indent=1)[:-2]  # without the closing "\n}"
        return head + ',\n "tiles": [\n' + ",\n".join("  " + json.dumps(t) for t in tiles) + "\n ]\n}\n"


def tile_key(number: int, fmt: str) -> str:
    """The key `tile` gives box `number` (grid order): tile_0000.fits, tile_0001.h5, ..."""
    return f"tile_{number:04d}{FORMATS[fmt]}"


def make_index(*, source: str, fmt: str, shape, dtype, grid_fits, tiles, source_hdu=None, dataset=None) -> TileIndex:
    """A TileIndex from what `tile` wrote, validated exactly as a reader would validate it."""
    index = TileIndex(source, fmt, tuple(shape), np.dtype(dtype).str, tuple(grid_fits), tuple(tiles),
                      source_hdu, dataset)
    return parse_index(index.as_dict(), "new tile index")


def looks_like_json_object(head: bytes) -> bool:
    """Do an object's first bytes start a JSON object (a tile index, never FITS or HDF5)?"""
    return head.lstrip(b" \t\r\n").startswith(b"{")


def parse_index_bytes(raw: bytes, where: str) -> TileIndex:
    """Decode and validate an index object's bytes; errors name `where` (the object)."""
    if len(raw) > MAX_INDEX_BYTES:
        raise TileIndexError(f"{where}: {len(raw):,} bytes of JSON is too large for a tile index "
                             f"(limit {MAX_INDEX_BYTES:,}); not an {SCHEMA} index")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TileIndexError(f"{where}: starts like JSON but is not valid JSON ({exc}); "
                             f"not a FITS file, an HDF5 file or an {SCHEMA} index") from None
    return parse_index(obj, where)


def _field(obj: dict, name: str, where: str, kinds, what: str, optional: bool = False):
    if name not in obj:
        if optional:
            return None
        raise TileIndexError(f"{where}: {name}: missing; an {SCHEMA} index needs it ({what})")
    value = obj[name]
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TileIndexError(f"{where}: {name}: expected {what}, got {value!r}")
    return value


def _ints(value, name: str, where: str, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TileIndexError(f"{where}: {name}: expected {what}, got {value!r}")
    return tuple(value)


def parse_index(obj, where: str) -> TileIndex:
    """Validate a decoded index and return it; a malformed one is refused naming `where` and the field."""
    if not isinstance(obj, dict):
        raise TileIndexError(f"{where}: a tile index is a JSON object, got {type(obj).__name__}")
    schema = obj.get("schema")
    if schema != SCHEMA:
        raise TileIndexError(f"{where}: schema: {schema!r} is not {SCHEMA!r}; not a tile index this "
                             f"version of ingest reads")
    source = _field(obj, "source", where, str, "the source's name")
    fmt = _field(obj, "format", where, str, f"one of {', '.join(FORMATS)}")
    if fmt not in FORMATS:
        raise TileIndexError(f"{where}: format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    source_hdu = _field(obj, "source_hdu", where, int, "an HDU number >= 0 or null", optional=True)
    if source_hdu is not None and source_hdu < 0:
        raise TileIndexError(f"{where}: source_hdu: expected an HDU number >= 0, got {source_hdu}")
    dataset = _field(obj, "dataset", where, str, "an HDF5 path like /cube, or null", optional=True)
    if fmt == "hdf5" and (dataset is None or not dataset.startswith("/")):
        raise TileIndexError(f"{where}: dataset: an hdf5 index needs the dataset's absolute path, got {dataset!r}")
    shape = _ints(_field(obj, "shape", where, list, "pixels per axis, numpy order"), "shape", where,
                  "pixels per axis, numpy order")
    if not shape or any(n < 1 for n in shape):
        raise TileIndexError(f"{where}: shape: expected at least one axis, each >= 1 pixel, got {list(shape)}")
    dtype_text = _field(obj, "dtype", where, str, "a numpy dtype string like >i2")
    try:
        dtype = np.dtype(dtype_text)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "iuf" or dtype.str != dtype_text:
        raise TileIndexError(f"{where}: dtype: expected a numeric numpy dtype string like >i2, got {dtype_text!r}")
    grid_text = _field(obj, "grid", where, str, "parts per axis in FITS order, like 2x2x1")
    try:
        grid_fits = parse_grid(grid_text, len(shape))
    except ConfigError as exc:
        raise TileIndexError(f"{where}: {exc}") from None  # the message starts with "grid:"
    tiles = _parse_tiles(_field(obj, "tiles", where, list, "a list of tiles"), shape, where)
    _check_cover(tiles, shape, grid_fits, where)
    return TileIndex(source, fmt, shape, dtype_text, grid_fits, tiles, source_hdu, dataset)


def _parse_tiles(items: list, shape: tuple[int, ...], where: str) -> tuple[Tile, ...]:
    tiles, keys = [], {}
    for i, item in enumerate(items):
        name = f"tiles[{i}]"
        if not isinstance(item, dict):
            raise TileIndexError(f"{where}: {name}: expected an object with key, box, bytes, crc32, got {item!r}")
        if "key" not in item:
            raise TileIndexError(f"{where}: {name}.key: missing; every tile needs its object's key")
        key = check_key(item["key"], f"{where}: {name}.key")
        if key in keys:
            raise TileIndexError(f"{where}: {name}.key: {key!r} is also tiles[{keys[key]}]'s key")
        keys[key] = i
        box = item.get("box")
        if (not isinstance(box, list) or len(box) != len(shape)
                or not all(isinstance(p, list) and len(p) == 2 for p in box)):
            raise TileIndexError(f"{where}: {name}.box: expected {len(shape)} [start, stop] pairs, got {box!r}")
        pairs = tuple(_ints(p, f"{name}.box", where, "integer [start, stop] pairs") for p in box)
        for axis, ((a, b), n) in enumerate(zip(pairs, shape)):
            if not 0 <= a < b <= n:
                raise TileIndexError(f"{where}: {name}.box: axis {axis} [{a}, {b}) is empty or outside 0..{n}")
        size = item.get("bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise TileIndexError(f"{where}: {name}.bytes: expected the object's size in bytes (>= 1), got {size!r}")
        crc = item.get("crc32")
        if isinstance(crc, bool) or not isinstance(crc, int) or not 0 <= crc < 1 << 32:
            raise TileIndexError(f"{where}: {name}.crc32: expected a CRC-32 (0..2**32-1), got {crc!r}")
        tiles.append(Tile(key, pairs, size, crc))
    if not tiles:
        raise TileIndexError(f"{where}: tiles: empty; an index lists at least one tile")
    return tuple(tiles)


def _check_cover(tiles: tuple[Tile, ...], shape, grid_fits, where: str) -> None:
    """The tiles are the boxes of `grid_fits` in grid order: each axis's cuts partition it into
    the grid's parts, and the tiles are their product in C order, so every voxel is in one tile."""
    grid = tuple(reversed(grid_fits))
    cuts = []
    for axis, (n, parts) in enumerate(zip(shape, grid)):
        spans = sorted({t.box[axis] for t in tiles})
        stops = [0] + [b for _, b in spans]
        if len(spans) != parts or [a for a, _ in spans] != stops[:-1] or stops[-1] != n:
            raise TileIndexError(f"{where}: tiles: along axis {axis} the boxes span {[list(s) for s in spans]}, "
                                 f"not {parts} part(s) that partition 0..{n} (grid {format_grid(grid_fits)})")
        cuts.append(spans)
    expected = list(itertools.product(*cuts))
    if len(tiles) != len(expected):
        raise TileIndexError(f"{where}: tiles: {len(tiles)} tile(s), but grid {format_grid(grid_fits)} has "
                             f"{len(expected)} boxes; each box needs exactly one tile")
    for i, (tile, box) in enumerate(zip(tiles, expected)):
        if tile.box != box:
            raise TileIndexError(f"{where}: tiles[{i}].box: {[list(b) for b in tile.box]} is not box {i} of grid "
                                 f"{format_grid(grid_fits)}, {[list(b) for b in box]} (tiles go in grid order, "
                                 f"each box once)")


def check_key(key: str, what: str) -> str:
    """A tile key is a plain relative path; anything that could leave the index's prefix is refused."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise TileIndexError(f"{what}: {key!r} is not a relative key of letters, digits, '.', '_', '-' and '/' "
                             f"(no leading '/' or '.', no '..', no scheme)")
    return key


def tile_location(index_location: str, key: str) -> str:
    """Where tile `key` lives: beside the index at `index_location` (s3://, http(s):// or a path).
    A URL's query (a presigned signature) belongs to the index alone and is dropped."""
    check_key(key, "tile key")
    if index_location.startswith("s3://"):
        return index_location.rpartition("/")[0] + "/" + key
    if index_location.lower().startswith(("http://", "https://")):
        parts = urlsplit(index_location)
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rpartition("/")[0] + "/" + key, "", ""))
    return os.path.join(os.path.dirname(index_location), *key.split("/"))


def check_run_config(index: TileIndex, where: str, *, grid: str, halo: int, region, region_shape,
                     hdu: int, dataset) -> None:
    """Refuse run settings that a tiled source cannot honour: its regions ARE its tiles."""
    grid_text = grid.strip().lower() if isinstance(grid, str) else grid
    if grid_text != "auto" and parse_grid(grid_text, len(index.shape)) != index.grid_fits:
        raise ConfigError(f"grid: {grid!r} does not match {where}, tiled as {format_grid(index.grid_fits)}; "
                          f"a tiled source's regions are its tiles: give --grid auto or "
                          f"{format_grid(index.grid_fits)}, or tile the cube again")
    for name, value, ok in (("halo", halo, halo == 0), ("region", region, not region),
                            ("region_shape", region_shape, region_shape is None)):
        if not ok:
            raise ConfigError(f"{name}: {value!r} cannot apply to {where}: a tiled source's regions are its "
                              f"{len(index.tiles)} tiles, read whole")
    if hdu != 0:
        raise ConfigError(f"hdu: {hdu}: the tiles of {where} hold their cube in HDU 0 (tiled from HDU "
                          f"{index.source_hdu} of {index.source}); leave --hdu out")
    if dataset is not None and dataset != index.dataset:
        raise ConfigError(f"dataset: {dataset!r}: the tiles of {where} hold {index.dataset!r}")


def expected_tile(box, name: str, shape, dtype, index_dtype: str) -> None:
    """A tile's own header must describe its box of the cube in the index's dtype."""
    extents = tuple(b - a for a, b in box)
    if tuple(shape) != extents or np.dtype(dtype).str != index_dtype:
        raise TileIndexError(f"{name}: holds {tuple(shape)} {np.dtype(dtype).str} but its index says box "
                             f"{[list(b) for b in box]}, i.e. {extents} {index_dtype}; the tile or the "
                             f"index is stale")


def check_crc(expected_crc32: int, name: str, data: np.ndarray, index_name: str) -> None:
    """The data read from a tile must have the CRC-32 its index recorded."""
    got = data_crc32(data)
    if got != expected_crc32:
        raise TileIndexError(f"{name}: CRC-32 of its data is {got:#010x} but {index_name} says "
                             f"{expected_crc32:#010x}; the tile or the index is corrupt or stale")


def data_crc32(data: np.ndarray) -> int:
    """CRC-32 of an array's bytes as stored (C order), without a copy when it is contiguous."""
    import zlib

    return zlib.crc32(np.ascontiguousarray(data).reshape(-1).view(np.uint8)) & 0xFFFFFFFF


def tile_estimate_s(tile: Tile, cost, threads: int, chunk_bytes: int) -> float:
    """The cost model's time to read a tile whole: its header, then its data in chunk_bytes requests."""
    requests = 1 + max(1, math.ceil(tile.size_bytes / chunk_bytes))
    return cost.predict_s(requests, tile.size_bytes, threads)
