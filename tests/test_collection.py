"""A collection of tile cubes as a source (ingest.collection): its forms, its index, and the rule
that picks a tile, checked against an independent astropy computation over a survey test bed."""
from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest
from astropy import units as u
from astropy.coordinates import SkyCoord
from astropy.io import fits
from astropy.wcs import WCS
from hypothesis import given, settings
from hypothesis import strategies as st

import ingest.collection.tiles as tiles_module
from ingest.collection.open import open_collection
from ingest.collection.place import place_requests
from ingest.collection.rule import Placement, pick_tile
from ingest.collection.spec import is_collection, parse_collection
from ingest.errors import ConfigError
from ingest.sky.catalogue import read_catalogue
from ingest.sky.sources import cutout_requests, parse_size
from ingest.testbed.survey import tile_data, write_survey

REST_HZ = 1.420405752e9


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    return write_survey(str(tmp_path_factory.mktemp("survey")))


@pytest.fixture
def header_reads(monkeypatch):
    """Every tile header read by the collection, counted where it happens (the format reader)."""
    seen = []
    real = tiles_module.read_any_layout

    def counting(transport, **kw):
        seen.append(transport.display_name)
        return real(transport, **kw)

    monkeypatch.setattr(tiles_module, "read_any_layout", counting)
    return seen


def _local_copy(survey, directory) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    paths = []
    for tile in survey.tiles:
        paths.append(os.path.join(directory, os.path.basename(tile.path)))
        shutil.copy(tile.path, paths[-1])
    return paths


# ------------------------------------------------------------------ the forms

@pytest.mark.parametrize("source, expected", [
    ("s3://survey/field/*.fits", True), ("s3://survey/field/", True), ("s3://survey/field/t[0-9].fits", True),
    ("@tiles.txt", True), ("/scratch/tiles/*.fits", True), ("/scratch/tiles/", True), ("tile_??.fits", True),
    ("s3://survey/field/cube.fits", False), ("/scratch/cube.fits", False),
    ("https://store/b/cube.fits?X-Amz-Signature=abc", False), ("", False)])
def test_a_source_is_a_collection_by_its_wildcard_trailing_slash_or_at(source, expected):
    assert is_collection(source) is expected


def test_globs_match_within_a_segment_and_never_a_hidden_name():
    spec = parse_collection("s3://survey/field/*.fits")
    assert spec.literal_prefix == "field/" and spec.form == "glob"
    assert spec.matches("field/t1.fits") and not spec.matches("field/sub/t1.fits")
    assert not spec.matches("field/.ingest-index.json") and not spec.matches("field/t1.fits.tmp")
    prefix = parse_collection("s3://survey/field/")
    assert prefix.form == "prefix" and prefix.matches("field/sub/t1.fits") and not prefix.matches("field/.x/t.fits")
    with pytest.raises(ConfigError, match="bucket must be named in full"):
        parse_collection("s3://surv*/field/t.fits")
    with pytest.raises(ConfigError, match="opens a class"):
        parse_collection("/scratch/t[0-9.fits")


def test_local_glob_prefix_and_list_file_resolve_to_the_same_tiles(survey, tmp_path, header_reads):
    paths = _local_copy(survey, str(tmp_path / "field"))
    (tmp_path / "field" / "README.txt").write_text("not a cube\n")
    (tmp_path / "field" / ".hidden.fits").write_bytes(b"")
    listing = tmp_path / "tiles.txt"
    listing.write_text("# the field's tiles\n\n" + "\n".join(os.path.join("field", os.path.basename(p))
                                                            for p in reversed(paths)) + "\n")
    by_glob = open_collection(str(tmp_path / "field" / "tile_*.fits"), index="off")
    by_prefix = open_collection(str(tmp_path / "field") + "/", index="off")
    by_list = open_collection(f"@{listing}", index="off")
    want = sorted(paths)
    for found in (by_glob, by_prefix, by_list):
        assert [t.source for t in found.tiles] == want  # key order, whatever the listing's order
    assert [s for s, _ in by_prefix.refused] == [str(tmp_path / "field" / "README.txt")]
    assert by_glob.refused == () and by_list.refused == ()
    tile = by_glob.tiles[1]
    assert tile.shape == survey.tiles[1].shape and tile.kind == "fits" and tile.layout.beams is not None
    assert fits.Header.fromstring(tile.header_text)["CRVAL1"] == pytest.approx(survey.tiles[1].ra_deg)
    with pytest.raises(ConfigError, match="collection is empty"):
        open_collection(str(tmp_path / "field" / "nothing_*.fits"), index="off")


def test_an_s3_glob_and_prefix_list_the_bucket(survey, s3_server, s3_env, s3_bucket, header_reads):
    client = s3_server.client()
    for tile in survey.tiles:
        client.upload_file(tile.path, s3_bucket, f"field/{os.path.basename(tile.path)}")
    client.upload_file(survey.tiles[0].path, s3_bucket, "field/tile_sub/tile_r0_c0.fits")
    client.upload_file(survey.tiles[0].path, s3_bucket, "other/tile_r0_c0.fits")
    names = [f"s3://{s3_bucket}/field/{os.path.basename(t.path)}" for t in survey.tiles]
    found = open_collection(f"s3://{s3_bucket}/field/tile_*.fits", index="off")
    assert [t.source for t in found.tiles] == sorted(names)
    assert all(t.etag and t.object_bytes == os.path.getsize(s.path) for t, s in zip(found.tiles, survey.tiles))
    under = open_collection(f"s3://{s3_bucket}/field/", index="off")
    assert [t.source for t in under.tiles] == sorted(names + [f"s3://{s3_bucket}/field/tile_sub/tile_r0_c0.fits"])


# ------------------------------------------------------------------ the index

def test_the_index_is_reused_and_a_changed_tile_is_read_again(survey, s3_server, s3_env, s3_bucket, tmp_path,
                                                             header_reads):
    client = s3_server.client()
    for tile in survey.tiles:
        client.upload_file(tile.path, s3_bucket, f"field/{os.path.basename(tile.path)}")
    index = str(tmp_path / "index.json")
    spec = f"s3://{s3_bucket}/field/*.fits"
    first = open_collection(spec, index=index)
    assert first.headers_read == len(header_reads) == len(survey.tiles)
    header_reads.clear()
    second = open_collection(spec, index=index)
    assert header_reads == [] and second.headers_read == 0
    assert second.tiles == first.tiles  # the same records, footprints and headers, from the file
    # One tile replaced by other bytes of the same size: a new ETag, so it alone is read again.
    changed = f"field/{os.path.basename(survey.tiles[2].path)}"
    client.upload_file(survey.tiles[3].path, s3_bucket, changed)
    third = open_collection(spec, index=index)
    assert header_reads == [f"s3://{s3_bucket}/{changed}"] and third.headers_read == 1
    assert third.tiles[2].etag != first.tiles[2].etag
    assert third.tiles[2].footprint == first.tiles[3].footprint
    on_disk = json.load(open(index))["tiles"][f"s3://{s3_bucket}/{changed}"]
    assert on_disk["etag"] == third.tiles[2].etag


def test_a_local_index_sits_beside_the_tiles_and_follows_size_and_mtime(survey, tmp_path, header_reads):
    paths = _local_copy(survey, str(tmp_path / "field"))
    spec = str(tmp_path / "field" / "*.fits")
    first = open_collection(spec)
    assert first.index_path == str(tmp_path / "field" / ".ingest-index.json") and os.path.exists(first.index_path)
    header_reads.clear()
    assert open_collection(spec).headers_read == 0 and header_reads == []
    st = os.stat(paths[0])
    os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: same size, new mtime
    with open(paths[1], "ab") as f:
        f.write(b"\0" * 2880)  # grown by a block
    os.remove(paths[5])
    again = open_collection(spec)
    assert sorted(header_reads) == sorted(paths[:2]) and again.headers_read == 2
    assert [t.source for t in again.tiles] == sorted(paths[:5])
    assert sorted(json.load(open(again.index_path))["tiles"]) == sorted(paths[:5])  # the removed tile's record dropped


# ------------------------------------------------------------------ the rule

def _oracle_tile(path: str, ra: float, dec: float, radius_deg: float, lo_hz: float, hi_hz: float):
    """Independently of ingest: the box of every pixel of the tile whose centre is within the circle
    and every channel whose centre is in the band, with astropy alone; the axes the region continues
    past the tile on; and the least distance to the sky plane's edges. None when off the tile."""
    with fits.open(path) as hdus:
        header = hdus[0].header
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wcs = WCS(header)
    nz, ny, nx = header["NAXIS3"], header["NAXIS2"], header["NAXIS1"]
    y, x = np.mgrid[-1:ny + 1, -1:nx + 1]  # the plane and the one-pixel ring round it
    sky = wcs.celestial.pixel_to_world(x, y)
    inside = sky.separation(SkyCoord(ra * u.deg, dec * u.deg, frame="icrs")).deg <= radius_deg
    freq = wcs.spectral.pixel_to_world(np.arange(-1, nz + 1)).to_value(u.Hz)
    in_band = (freq >= lo_hz) & (freq <= hi_hz)
    core = inside[1:-1, 1:-1]
    if not core.any() or not in_band[1:-1].any():
        return None
    ys, xs = np.nonzero(core)
    zs = np.nonzero(in_band[1:-1])[0]
    box = ((zs.min(), zs.max() + 1), (ys.min(), ys.max() + 1), (xs.min(), xs.max() + 1))
    clipped = inside[:, [0, -1]].any() or inside[[0, -1], :].any() or in_band[[0, -1]].any()
    edge = min(xs.min(), nx - 1 - xs.max(), ys.min(), ny - 1 - ys.max())
    voxels = int(np.prod([b - a for a, b in box]))
    return box, bool(clipped), int(edge), voxels


def _oracle_pick(answers):
    """The rule, written out: whole tiles by greatest edge distance, else the largest part; the
    first tile in order wins a tie (a later tile must do strictly better to replace it)."""
    best = None
    for t, answer in enumerate(answers):
        if answer is None:
            continue
        _, clipped, edge, voxels = answer
        score = (0, voxels) if clipped else (1, edge)
        if best is None or score > best[1]:
            best = (t, score)
    return None if best is None else best[0]


def test_the_rule_picks_the_tile_astropy_says_for_every_source_of_the_survey(survey):
    collection = open_collection(os.path.join(os.path.dirname(survey.catalogue_path), "*.fits"), index="off")
    assert [t.source for t in collection.tiles] == [t.path for t in survey.tiles]
    requests = cutout_requests(read_catalogue(survey.catalogue_path, frame="icrs"), parse_size(survey.size),
                               rest_hz=REST_HZ)
    choices = place_requests(collection.tiles, [r.pos for r in requests], [r.band for r in requests])
    kinds = {s.name: s.kind for s in survey.sources}
    seen = {"whole in several, not the first": 0, "clipped": 0, "clipped in several, not the first": 0, "off": 0}
    for request, choice in zip(requests, choices):
        band = request.band
        assert band.kind == "frequency"
        lo_hz, hi_hz = (np.array([band.lo, band.hi]) * u.Unit(band.unit)).to_value(u.Hz)
        answers = [_oracle_tile(t.path, request.pos.lon_deg, request.pos.lat_deg, request.pos.radius_deg,
                                lo_hz, hi_hz) for t in survey.tiles]
        want = _oracle_pick(answers)
        assert choice.tile == want, (request.name, [a and a[1:] for a in answers])
        if want is None:
            assert kinds[request.name].startswith("off") and "off every tile" in choice.reason
            seen["off"] += 1
            continue
        box, clipped, edge, voxels = answers[want]
        assert choice.placement.box == tuple((int(a), int(b)) for a, b in box), request.name
        assert choice.clipped == clipped and choice.placement.edge_px == edge, request.name
        whole = [t for t, a in enumerate(answers) if a is not None and not a[1]]
        seen["whole in several, not the first"] += len(whole) > 1 and want != whole[0]
        seen["clipped"] += clipped
        parts = [t for t, a in enumerate(answers) if a is not None]
        seen["clipped in several, not the first"] += clipped and len(parts) > 1 and want != parts[0]
    assert all(n > 0 for n in seen.values()), seen  # the test bed exercises every branch of the rule
    assert sum(kinds[r.name] == "band-edge" and c.tile == 1 for r, c in zip(requests, choices)) == 1


def test_the_picked_box_reads_bit_for_bit_what_astropy_reads_of_that_tile(survey):
    from ingest.api.read import read_subcube

    collection = open_collection(os.path.join(os.path.dirname(survey.catalogue_path), "*.fits"), index="off")
    requests = cutout_requests(read_catalogue(survey.catalogue_path, frame="icrs"), parse_size(survey.size),
                               rest_hz=REST_HZ)
    choices = place_requests(collection.tiles, [r.pos for r in requests], [r.band for r in requests])
    for choice in choices:
        if choice.tile is None:
            continue
        region = tuple(slice(a, b) for a, b in choice.placement.box)
        got = read_subcube(collection.tiles[choice.tile].source, region)
        assert np.array_equal(got, tile_data(survey.tiles[choice.tile])[region])


def test_a_source_off_every_tile_says_why(survey):
    collection = open_collection(os.path.join(os.path.dirname(survey.catalogue_path), "*.fits"), index="off")
    far, near, band = place_requests(collection.tiles, ["CIRCLE 150.0 -28.0 0.02", "CIRCLE 150.163 -30.0 0.01", None],
                                     [None, None, "BAND 0.2 0.21"])
    assert far.tile is None and "no tile's footprint reaches it" in far.reason and "tile_r1_c" in far.reason
    assert near.tile is None and "wholly off the cube" in near.reason
    assert band.tile is None and "no channel of its spectral axis" in band.reason


# ------------------------------------------------------------------ the pure rule, against a brute force

_placements = st.lists(st.one_of(st.none(), st.builds(
    lambda clipped, edge, voxels: Placement(((0, 1),), ("x",) if clipped else (), edge, voxels),
    st.booleans(), st.integers(0, 5), st.integers(1, 6))), max_size=8)


@settings(max_examples=300, deadline=None)
@given(_placements)
def test_pick_tile_is_the_brute_force_rule(placements):
    answers = [None if p is None else (None, not p.whole, p.edge_px, p.voxels) for p in placements]
    assert pick_tile(placements) == _oracle_pick(answers)
