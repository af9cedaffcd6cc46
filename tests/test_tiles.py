"""The tile index (ingest.core.tiles), pure: tiles cover the cube exactly once, the index round-trips
through JSON, a malformed one is refused naming the field, keys resolve beside the index, a run's
settings are checked against it, and the format dispatch tells an index from FITS and HDF5."""
import json

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from ingest.core.decompose import grid_boxes
from ingest.core.tiles import (SCHEMA, Tile, TileIndexError, check_crc, check_key, check_run_config, data_crc32,
                               looks_like_json_object, make_index, parse_index, parse_index_bytes, tile_key,
                               tile_location)
from ingest.errors import ConfigError, FitsFormatError
from ingest.formats.reader import read_any_layout_timed, whole_cube_layout
from ingest.transports import MemoryTransport


@st.composite
def tilings(draw):
    """(shape, grid_fits, boxes): a random cube cut by a random grid, sometimes on chunk boundaries."""
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)))
    grid_fits = tuple(draw(st.integers(1, n)) for n in reversed(shape))
    chunks = draw(st.none() | st.tuples(*(st.integers(1, n) for n in shape)))
    boxes = grid_boxes(shape, grid_fits, chunk_shape=chunks, origin=(0,) * len(shape))
    return shape, grid_fits, boxes


def _index(shape, grid_fits, boxes, fmt="fits", sizes=None, crcs=None):
    sizes = sizes or [2880 * (i + 2) for i in range(len(boxes))]
    crcs = crcs or [(i * 2654435761) % (1 << 32) for i in range(len(boxes))]
    tiles = [Tile(tile_key(i, fmt), box, size, crc) for i, (box, size, crc) in enumerate(zip(boxes, sizes, crcs))]
    return make_index(source="s3://survey/cube.fits", fmt=fmt, shape=shape, dtype=">i2", grid_fits=grid_fits,
                      tiles=tiles, source_hdu=0 if fmt == "fits" else None, dataset="/cube" if fmt == "hdf5" else None)


@given(tilings(), st.lists(st.integers(1, 1 << 40), min_size=64, max_size=64),
       st.lists(st.integers(0, (1 << 32) - 1), min_size=64, max_size=64), st.sampled_from(["fits", "hdf5"]))
@settings(max_examples=150, deadline=None)
def test_tiles_cover_the_cube_exactly_once_and_the_index_round_trips(tiling, sizes, crcs, fmt):
    shape, grid_fits, boxes = tiling
    assume(len(boxes) <= 64)
    index = _index(shape, grid_fits, boxes, fmt, sizes[:len(boxes)], crcs[:len(boxes)])
    hits = np.zeros(shape, dtype=np.int32)
    for tile in index.tiles:
        hits[tuple(slice(a, b) for a, b in tile.box)] += 1
    assert (hits == 1).all()
    text = index.to_json()
    assert looks_like_json_object(text.encode()) and text.startswith('{\n "schema": "ingest.tiles/1"')
    assert parse_index(json.loads(text), "index.json") == index
    assert parse_index_bytes(text.encode(), "index.json") == index
    assert parse_index(index.as_dict(), "index.json") == index
    assert index.grid_fits == tuple(grid_fits) + (1,) * (len(shape) - len(grid_fits))
    assert [t.key for t in index.tiles] == [tile_key(i, fmt) for i in range(len(boxes))]


def _drop(field):
    return lambda d: d.pop(field)


def _tile(i, **changes):
    return lambda d: d["tiles"][i].update(changes)


# (field the error must name, mutation of a valid index's dict, tiles the mutation needs)
MALFORMED = [
    ("schema", lambda d: d.update(schema="ingest.tiles/9"), 1),
    ("schema", _drop("schema"), 1),
    ("source", _drop("source"), 1),
    ("format", lambda d: d.update(format="tiff"), 1),
    ("shape", lambda d: d.update(shape=[0] + d["shape"][1:]), 1),
    ("shape", lambda d: d.update(shape="12x20"), 1),
    ("dtype", lambda d: d.update(dtype="<U3"), 1),
    ("dtype", lambda d: d.update(dtype="i2"), 1),
    ("grid", lambda d: d.update(grid="0x1"), 1),
    ("grid", _drop("grid"), 1),
    ("tiles", lambda d: d.update(tiles=[]), 1),
    ("tiles", lambda d: d["tiles"].pop(), 2),
    ("tiles[0].key", _tile(0, key="../escape.fits"), 1),
    ("tiles[0].key", _tile(0, key="s3://other/tile.fits"), 1),
    ("tiles[1].key", lambda d: d["tiles"][1].update(key=d["tiles"][0]["key"]), 2),
    ("tiles[0].box", lambda d: d["tiles"][0]["box"][0].__setitem__(1, d["shape"][0] + 1), 1),
    ("tiles[0].box", _tile(0, box=[[0, 1]] * 9), 1),
    ("tiles[0].bytes", _tile(0, bytes=-1), 1),
    ("tiles[0].bytes", _tile(0, bytes=True), 1),
    ("tiles[0].crc32", _tile(0, crc32=1 << 32), 1),
    ("tiles[0].crc32", _tile(0, crc32="0x1234"), 1),
    ("tiles[0].box", lambda d: d["tiles"].reverse(), 2),
]


@given(tilings(), st.sampled_from(MALFORMED))
@settings(max_examples=200, deadline=None)
def test_a_malformed_index_is_refused_naming_the_object_and_the_field(tiling, case):
    shape, grid_fits, boxes = tiling
    field, mutate, needs = case
    assume(len(boxes) >= needs)
    raw = _index(shape, grid_fits, boxes).as_dict()
    mutate(raw)
    with pytest.raises(TileIndexError) as err:
        parse_index(raw, "s3://survey/tiles/index.json")
    message = str(err.value)
    assert message.startswith("s3://survey/tiles/index.json: ")
    assert f" {field}" in message or f" {field}:" in message, message


def test_not_json_and_not_an_object_are_refused_naming_the_object():
    with pytest.raises(TileIndexError, match=r"^idx\.json: starts like JSON but is not valid JSON"):
        parse_index_bytes(b'{"schema": "ingest.tiles/1", ', "idx.json")
    with pytest.raises(TileIndexError, match=r"^idx\.json: a tile index is a JSON object, got list"):
        parse_index([], "idx.json")


@given(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,12}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,8}){0,2}", fullmatch=True))
def test_a_tile_lives_beside_its_index(key):
    assert tile_location("s3://survey/tiles/run1/index.json", key) == f"s3://survey/tiles/run1/{key}"
    assert tile_location("s3://survey/index.json", key) == f"s3://survey/{key}"
    signed = "https://store.example:9000/survey/tiles/index.json?X-Amz-Signature=abc&X-Amz-Credential=k"
    assert tile_location(signed, key) == f"https://store.example:9000/survey/tiles/{key}"
    assert tile_location("/data/tiles/index.json", key) == "/data/tiles/" + key
    assert tile_location("index.json", key) == key


@pytest.mark.parametrize("key", ["../x.fits", "/abs.fits", "a/../b.fits", ".hidden", "a//b", "s3://b/k", "a?b",
                                 "a#b", "a\\b", "", "tile 1.fits"])
def test_keys_that_could_leave_the_prefix_are_refused(key):
    with pytest.raises(TileIndexError, match="tiles\\[2\\].key"):
        check_key(key, "index.json: tiles[2].key")
    with pytest.raises(TileIndexError):
        tile_location("s3://survey/tiles/index.json", key)


def test_run_settings_must_fit_the_tiles():
    index = _index((12, 20, 18), (2, 2, 1), grid_boxes((12, 20, 18), (2, 2, 1)))
    ok = dict(grid="auto", halo=0, region=None, region_shape=None, hdu=0, dataset=None)
    check_run_config(index, "idx.json", **ok)
    check_run_config(index, "idx.json", **{**ok, "grid": "2x2x1"})
    check_run_config(index, "idx.json", **{**ok, "grid": "2x2"})  # unmentioned axes are 1, as for --grid
    refusals = [("grid", {"grid": "1x1x2"}, r"grid: '1x1x2' does not match idx\.json, tiled as 2x2x1"),
                ("halo", {"halo": 2}, r"halo: 2 cannot apply"), ("region", {"region": "0:4,:,:"}, r"region: "),
                ("region_shape", {"region_shape": "9x10x12"}, r"region_shape: "),
                ("hdu", {"hdu": 1}, r"hdu: 1: the tiles of idx\.json hold their cube in HDU 0"),
                ("dataset", {"dataset": "/other"}, r"dataset: '/other'")]
    for _, change, pattern in refusals:
        with pytest.raises(ConfigError, match=pattern):
            check_run_config(index, "idx.json", **{**ok, **change})


def test_crc_is_of_the_stored_bytes_and_a_mismatch_names_the_tile():
    data = np.arange(24, dtype=">i2").reshape(2, 3, 4)
    assert data_crc32(data) == data_crc32(np.ascontiguousarray(data[:, :, :])) == data_crc32(data.copy(order="F"))
    assert data_crc32(data) != data_crc32(data.astype("<i2"))  # byte order is part of what is stored
    check_crc(data_crc32(data), "s3://b/t/tile_0001.fits", data, "s3://b/t/index.json")
    with pytest.raises(TileIndexError, match=r"^s3://b/t/tile_0001\.fits: CRC-32 of its data is 0x[0-9a-f]{8} "
                                             r"but s3://b/t/index\.json says 0x00000007"):
        check_crc(7, "s3://b/t/tile_0001.fits", data, "s3://b/t/index.json")


def _fits_bytes() -> bytes:
    import io

    from astropy.io import fits

    buf = io.BytesIO()
    fits.PrimaryHDU(np.zeros((2, 3, 4), dtype=">i2")).writeto(buf)
    return buf.getvalue()


def test_the_format_dispatch_tells_an_index_by_its_content_not_its_name():
    boxes = grid_boxes((40, 50, 60), (6, 5, 4))  # 120 tiles: an index longer than one FITS block
    text = _index((40, 50, 60), (6, 5, 4), boxes).to_json().encode()
    assert len(text) > 2880
    index, _ = read_any_layout_timed(MemoryTransport(text, "cube.fits"), tiles=True)
    assert index.kind == "tiles" and len(index.tiles) == 120
    with pytest.raises(FitsFormatError, match=r"cube\.fits: is a tile index \(ingest\.tiles/1: 120 tiles"):
        read_any_layout_timed(MemoryTransport(text, "cube.fits"))  # callers that read one cube refuse it
    bad = json.dumps({**json.loads(text), "schema": "other/1"}).encode()
    with pytest.raises(TileIndexError, match=r"^idx\.h5: schema: 'other/1' is not 'ingest\.tiles/1'"):
        read_any_layout_timed(MemoryTransport(bad, "idx.h5"), tiles=True)
    fits_head = _fits_bytes()
    assert not looks_like_json_object(fits_head) and not looks_like_json_object(b"\x89HDF\r\n\x1a\n")
    assert looks_like_json_object(b' \n\t{"schema": "' + SCHEMA.encode() + b'"}')
    layout, _ = read_any_layout_timed(MemoryTransport(fits_head, "index.json"), tiles=True)
    assert layout.kind == "fits" and layout.shape == (2, 3, 4)  # named index.json, but FITS by its bytes


def test_tile_zero_stands_for_the_cube(tmp_path):
    """The run's cut-outs of a tiled source get the same header as cut-outs of the source."""
    from ingest.formats.reader import read_any_layout
    from ingest.transports import open_transport
    from ingest.outputs.subcubes import subcube_header, write_subcube
    from ingest.testbed.synth import write_cube

    shape = (6, 10, 8)
    write_cube(tmp_path / "cube.fits", shape, 16, bzero=32768, bscale=1, extension=True)
    with open_transport(str(tmp_path / "cube.fits")) as t:
        source = read_any_layout(t, hdu=1)
    boxes = grid_boxes(shape, (2, 2, 1))
    raw = np.zeros(tuple(b - a for a, b in boxes[0]), dtype=source.raw_dtype)
    path = write_subcube(tmp_path, 0, boxes[0], raw, source)
    with open_transport(path) as t:
        first = read_any_layout(t)
    index = _index(shape, (2, 2, 1), boxes)
    whole = whole_cube_layout(first, index, "tiles/index.json")
    assert whole.shape == shape and whole.source == "tiles/index.json" and whole.out_dtype == source.out_dtype
    assert whole.object_bytes == index.stored_bytes
    for box in boxes:
        mine, theirs = subcube_header(whole, box), subcube_header(source, box)
        for key in ("NAXIS1", "NAXIS2", "NAXIS3", "CRPIX1", "CRPIX2", "CRPIX3", "CRVAL3", "CTYPE1", "BZERO"):
            assert mine[key] == theirs[key], key
    assert whole.header_text.count("NAXIS3  =                    6") == 1
