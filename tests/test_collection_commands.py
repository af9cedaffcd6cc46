"""The commands over a collection of tile cubes (ingest.driver.cutouts.tiles, run --pos, ingest.open):
every cut-out checked bit for bit against the tile astropy's own computation of the tile rule
picks (tests.test_collection's oracle), over the survey test bed in a real S3 store."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from astropy import units as u
from astropy.io import fits

from ingest.sky.catalogue import read_catalogue
from ingest.sky.sources import cutout_requests, parse_size
from ingest.testbed.survey import tile_data, write_survey
from tests.mpitools import child_env, cli, mpiexec
from tests.test_collection import REST_HZ, _oracle_pick, _oracle_tile


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    return write_survey(str(tmp_path_factory.mktemp("survey")))


@pytest.fixture
def field(survey, s3_server, s3_bucket):
    """The survey's tiles under s3://BUCKET/field/; the glob naming them."""
    client = s3_server.client()
    for tile in survey.tiles:
        client.upload_file(tile.path, s3_bucket, f"field/{os.path.basename(tile.path)}")
    return f"s3://{s3_bucket}/field/*.fits"


def _key(glob: str, tile) -> str:
    return glob.replace("*.fits", os.path.basename(tile.path))


def _expected(survey) -> dict:
    """Per catalogue row name: (tile index, box) the rule picks by astropy alone, or None when off every tile."""
    requests = cutout_requests(read_catalogue(survey.catalogue_path, frame="icrs"), parse_size(survey.size),
                               rest_hz=REST_HZ)
    out = {}
    for r in requests:
        lo_hz, hi_hz = (np.array([r.band.lo, r.band.hi]) * u.Unit(r.band.unit)).to_value(u.Hz)
        answers = [_oracle_tile(t.path, r.pos.lon_deg, r.pos.lat_deg, r.pos.radius_deg, lo_hz, hi_hz)
                   for t in survey.tiles]
        t = _oracle_pick(answers)
        out[r.name] = None if t is None else (t, tuple((int(a), int(b)) for a, b in answers[t][0]))
    return out


def _check_cutout(path, survey, t, box) -> None:
    """The file's data is the tile's voxels in the box, bit for bit; its BEAMS rows the tile's channels'."""
    region = tuple(slice(a, b) for a, b in box)
    with fits.open(path) as cut, fits.open(survey.tiles[t].path) as tile:
        assert cut[0].data.tobytes() == np.ascontiguousarray(tile_data(survey.tiles[t])[region]).astype(">f4").tobytes()
        rows, want = cut["BEAMS"].data, tile["BEAMS"].data[box[0][0]:box[0][1]]
        for name in ("BMAJ", "BMIN", "BPA", "POL"):
            assert np.array_equal(rows[name], want[name]), name
        assert list(rows["CHAN"]) == list(range(box[0][1] - box[0][0]))


def test_cutouts_over_an_s3_glob_on_four_ranks_cut_each_source_from_the_rules_tile(survey, field, s3_server,
                                                                                   tmp_path):
    out, report_path = tmp_path / "out", tmp_path / "r.json"
    env = child_env(s3_server)
    args = ["cutouts", "--source", field, "--catalogue", survey.catalogue_path, "--size", survey.size,
            "--output-dir", out, "--report", report_path, "--no-probe"]
    proc, _ = mpiexec(4, args, env, timeout_s=240)
    assert proc.returncode == 0, proc.stderr
    expected = _expected(survey)
    etags = {_key(field, t): s3_server.client().head_object(Bucket=field.split("/")[2], Key="field/" + os.path.basename(
        t.path))["ETag"].strip('"') for t in survey.tiles}
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(e["name"] for e in manifest["sources"]) == sorted(expected)
    n_done = 0
    for entry in manifest["sources"]:
        want = expected[entry["name"]]
        if want is None:
            assert entry["status"] == "skipped" and "off every tile of the collection" in entry["reason"]
            continue
        t, box = want
        assert entry["status"] == "done" and tuple(map(tuple, entry["box"])) == box, entry
        name = _key(field, survey.tiles[t])
        assert entry["tile"]["name"] == name and entry["tile"]["etag"].strip('"') == etags[name], entry
        _check_cutout(out / entry["file"], survey, t, box)
        n_done += 1
    report = json.loads(report_path.read_text())
    assert report["totals"]["done"] == n_done > 10 and report["totals"]["skipped"] == len(expected) - n_done
    # The ranks share the work of all tiles: every rank cuts, and together they cut each source once.
    ranks = report["ranks"]
    assert len(ranks) == 4 and all(r["sources"] > 0 for r in ranks) and sum(r["sources"] for r in ranks) == n_done
    assert sum(len(r["tiles"]) for r in ranks) < 4 * len(survey.tiles)  # no rank opens every tile

    # A re-run keeps every file.
    mtimes = {n: os.stat(out / n).st_mtime_ns for n in os.listdir(out) if n.endswith(".fits")}
    proc = cli(args, env, timeout_s=120)
    assert proc.returncode == 0, proc.stderr
    again = json.loads(report_path.read_text())
    assert again["totals"]["kept"] == n_done and again["totals"]["done"] == 0
    assert {n: os.stat(out / n).st_mtime_ns for n in mtimes} == mtimes

    # One tile replaced (a card added: new bytes, new ETag): its sources alone are cut again.
    t = 1
    replaced = tmp_path / "replaced.fits"
    with fits.open(survey.tiles[t].path) as hdus:
        hdus[0].header["ORIGIN"] = "reprocessed"
        hdus.writeto(replaced)
    s3_server.client().upload_file(str(replaced), field.split("/")[2], "field/" + os.path.basename(survey.tiles[t].path))
    proc = cli(args, env, timeout_s=120)
    assert proc.returncode == 0, proc.stderr
    third = json.loads(report_path.read_text())
    on_t = sorted(n for n, w in expected.items() if w is not None and w[0] == t)
    assert on_t and third["totals"]["recut"] == third["totals"]["done"] == len(on_t)
    assert third["totals"]["kept"] == n_done - len(on_t)
    manifest = json.loads((out / "manifest.json").read_text())
    recut = sorted(e["name"] for e in manifest["sources"] if e["status"] == "done" and e["tile"]["etag"] != etags.get(
        e["tile"]["name"]) and e["tile"]["etag"].strip('"') != etags[e["tile"]["name"]])
    assert recut == on_t
    for name in mtimes:
        changed = os.stat(out / name).st_mtime_ns != mtimes[name]
        assert changed == (name[:-len(".fits")] in on_t), name


def _requests(survey):
    return cutout_requests(read_catalogue(survey.catalogue_path, frame="icrs"), parse_size(survey.size),
                           rest_hz=REST_HZ)


def test_run_pos_band_over_a_collection_reads_the_rules_tile_and_says_which(survey, field, s3_server, tmp_path):
    expected = _expected(survey)
    # A source whole in two tiles whose rule picks the second: the first tile would be a wrong answer.
    r = next(r for r in _requests(survey) if r.name.startswith("overlap2") and expected[r.name][0] == 1)
    t, box = expected[r.name]
    out = tmp_path / "out"
    args = ["run", "--source", field, "--pos", r.pos.describe(), "--band", r.band.describe(), "--output-dir", out,
            "--report", tmp_path / "r.json", "--no-probe"]
    proc, _ = mpiexec(2, args, child_env(s3_server), timeout_s=240)
    assert proc.returncode == 0, proc.stderr
    name = _key(field, survey.tiles[t])
    assert f"tile {name} (whole" in proc.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cube"]["source"] == name, report["cube"]
    files = [n for n in os.listdir(out) if n.endswith(".fits")]
    assert len(files) == 1
    _check_cutout(out / files[0], survey, t, box)
    # Off every tile: an error with the rule's reason, nothing written.
    off = next(r for r in _requests(survey) if expected[r.name] is None)
    proc = cli(["run", "--source", field, "--pos", off.pos.describe(), "--band", off.band.describe(), "--output-dir",
                tmp_path / "off", "--no-probe"], child_env(s3_server))
    assert proc.returncode != 0 and "off every tile of the collection" in proc.stderr


def test_open_of_a_glob_cuts_each_source_from_the_rules_tile(survey, field, s3_env, tmp_path):
    import ingest
    from astropy.coordinates import SkyCoord

    from ingest.errors import RegionError

    expected = _expected(survey)
    with ingest.open(field) as tiles:
        assert [t.source for t in tiles.tiles] == [_key(field, t) for t in survey.tiles]
        for r in _requests(survey):
            center = SkyCoord(r.pos.lon_deg, r.pos.lat_deg, unit="deg")
            spectral = tuple(v * u.Unit(r.band.unit) for v in (r.band.lo, r.band.hi))
            if expected[r.name] is None:
                with pytest.raises(RegionError, match="off every tile of the collection"):
                    tiles.cutout(center, r.pos.radius_deg * u.deg, spectral)
                continue
            t, box = expected[r.name]
            cut = tiles.cutout(center, r.pos.radius_deg * u.deg, spectral)
            assert cut.box == box, r.name
            path = tmp_path / f"{r.name}.fits"
            cut.writeto(str(path))
            _check_cutout(path, survey, t, box)


def test_info_and_plan_of_a_collection_count_sources_per_tile_in_overlaps_and_off(survey, tmp_path):
    glob = os.path.join(os.path.dirname(survey.catalogue_path), "*.fits")
    env = child_env()
    proc = cli(["info", glob, "--json"], env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert [(t["name"], tuple(t["shape"])) for t in info["tiles"]] == [(t.path, t.shape) for t in survey.tiles]
    for row, tile in zip(info["tiles"], survey.tiles):
        assert row["centre_icrs_deg"] == pytest.approx([tile.ra_deg, tile.dec_deg], abs=1e-9)
    proc = cli(["plan", glob, "--catalogue", survey.catalogue_path, "--size", survey.size, "--ranks", "4", "--json"],
               env)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    # Astropy's answers per tile: the picked tile's count, the sources two tiles or more hold, those off all.
    requests = _requests(survey)
    answers = {}
    for r in requests:
        lo_hz, hi_hz = (np.array([r.band.lo, r.band.hi]) * u.Unit(r.band.unit)).to_value(u.Hz)
        answers[r.name] = [_oracle_tile(t.path, r.pos.lon_deg, r.pos.lat_deg, r.pos.radius_deg, lo_hz, hi_hz)
                           for t in survey.tiles]
    picks = [_oracle_pick(a) for a in answers.values()]
    assert [row["sources"] for row in plan["tiles"]] == [picks.count(t) for t in range(len(survey.tiles))]
    c = plan["catalogue"]
    assert c["in_overlaps"] == sum(sum(x is not None for x in a) >= 2 for a in answers.values()) > 0
    assert c["off_every_tile"] == picks.count(None) > 0 and c["cut"] == len(picks) - picks.count(None)
    assert c["prediction"]["makespan_s"] > 0 and c["prediction"]["ranks"] == 4 and c["requests"] > 0
    text = cli(["plan", glob, "--catalogue", survey.catalogue_path, "--size", survey.size], env).stdout
    assert "predicted makespan" in text and f"{picks.count(None)} off every tile" in text


def test_a_rank_cuts_all_its_tiles_into_one_sink_and_publish_thread(survey, tmp_path, monkeypatch):
    """A rank's runs of one tile each share one RankOutput: one sink (journal, publish thread), not
    one per tile; every source of every run published by its end, each from the rule's tile."""
    from mpi4py import MPI

    from ingest.config import RunConfig
    from ingest.driver.cutouts import rank as cutout_rank
    from ingest.driver.cutouts import tiles as cutout_tiles
    from ingest.driver.mpi import topology

    glob = os.path.join(os.path.dirname(survey.tiles[0].path), "*.fits")
    cfg = RunConfig(source=glob, catalogue=survey.catalogue_path, size=survey.size, output_dir=str(tmp_path / "out"),
                    probe=False, strategy="large")
    handout = cutout_tiles.prepare_tiles(cfg, topology(MPI.COMM_SELF))
    runs = handout.per_rank[0]
    assert len(runs) > 1  # the survey's sources lie on several tiles
    sinks_made, real = [], cutout_rank.sinks.RankSink
    monkeypatch.setattr(cutout_rank.sinks, "RankSink", lambda *a: sinks_made.append(a) or real(*a))
    entries, record = cutout_tiles.cut_tiles(MPI.COMM_SELF, cfg, handout.shared, runs)
    assert len(sinks_made) == 1
    assert sorted(e["name"] for e in entries) == sorted(s.name for _, sources in runs for s in sources)
    assert record["sources"] == len(entries) and len(record["tiles"]) == len(runs)
    expected = _expected(survey)
    for e in entries:
        t, box = expected[e["name"]]
        assert e["tile"]["name"] == _key(glob, survey.tiles[t])
        _check_cutout(os.path.join(cfg.output_dir, e["file"]), survey, t, box)
