"""A re-run of `cutouts` into the same output keeps only what this run asked for: a file is kept
when it is whole and was made for the same request (size, band, position, cube, format); any
other is cut again and replaced. The oracle for a re-cut file is a fresh run into an empty
directory: the re-run's file must be byte for byte the fresh one, and differ from the first run's."""
from __future__ import annotations

import json
import os
import uuid

import pytest

import ingest
from ingest.testbed.synth import write_cube
from tests.mpitools import child_env, mpiexec

SHAPE = (32, 48, 40)  # z, y, x; 1 arcsec pixels about (150, -30), 18.5 kHz channels about 1.4 GHz
REST_HZ = 1.420405752e9


def _freq(channel):
    return 1.4e9 + (channel - 15.5) * 18.5e3


ROWS = [("A", 150.001, -30.002, _freq(15)), ("B", 149.999, -29.998, _freq(10)),
        ("C", 150.002, -29.999, _freq(20)), ("D", 149.998, -30.001, _freq(12))]


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("rerun") / "cube.fits"
    write_cube(path, SHAPE, -32, restfrq_hz=REST_HZ, beams=True)
    bucket = s3_server.make_bucket(f"rerun-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, "cube.fits")
    return f"s3://{bucket}/cube.fits"


def _catalogue(path, rows):
    path.write_text("name,ra,dec,freq\n" + "".join(f"{n},{r},{d},{f}\n" for n, r, d, f in rows))
    return str(path)


def _cut(cube, catalogue, out, size):
    return ingest.cutouts(cube, catalogue, str(out), size=size, columns="freq=[Hz]", probe=False)


def _files(out) -> dict[str, bytes]:
    """The cut-outs in `out` by name, with their bytes."""
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out)) if n.endswith(".fits")}


def _boxes(out) -> dict[str, list]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {e["name"]: e["box"] for e in manifest["sources"] if e["status"] == "done"}


def _rerun_recuts_all(cube, tmp_path, first, second):
    catalogue = _catalogue(tmp_path / "cat.csv", ROWS)
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _cut(cube, catalogue, out, first)
    before = _files(out)
    report = _cut(cube, catalogue, out, second)
    _cut(cube, catalogue, fresh, second)
    t = report["totals"]
    assert (t["done"], t["recut"], t["new"], t["kept"]) == (4, 4, 0, 0)
    after = _files(out)
    assert after == _files(fresh) and len(after) == 4  # the new size, byte for byte
    assert all(after[n] != before[n] for n in after)
    assert _boxes(out) == _boxes(fresh)
    return out


def test_a_rerun_with_another_radius_recuts_every_file_at_the_new_size(s3_server, s3_env, cube, tmp_path):
    out = _rerun_recuts_all(cube, tmp_path, "6arcsec 20km/s", "9arcsec 20km/s")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema"] == "ingest.cutouts/2" and manifest["request"]["size"] == "radius 0.15 arcmin +- 20 km/s"
    assert all(len(e["request"]) == 16 for e in manifest["sources"])


def test_a_rerun_with_another_band_recuts_every_file(s3_server, s3_env, cube, tmp_path):
    out = _rerun_recuts_all(cube, tmp_path, "6arcsec 20km/s", "6arcsec 40km/s")
    depths = [box[0][1] - box[0][0] for box in _boxes(out).values()]
    assert min(depths) > 10  # +- 40 km/s is about +- 10 channels of 18.5 kHz


def test_a_source_that_moved_is_cut_again_and_the_rest_kept(s3_server, s3_env, cube, tmp_path):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _cut(cube, _catalogue(tmp_path / "cat.csv", ROWS), out, "6arcsec 20km/s")
    before = _files(out)
    stamps = {n: os.stat(out / n).st_mtime_ns for n in before}
    moved = [("B", 149.999 + 4 / 3600, -29.998 + 3 / 3600, _freq(10)) if r[0] == "B" else r for r in ROWS]
    catalogue = _catalogue(tmp_path / "moved.csv", moved)
    report = _cut(cube, catalogue, out, "6arcsec 20km/s")
    t = report["totals"]
    assert (t["done"], t["recut"], t["new"], t["kept"]) == (1, 1, 0, 3)
    _cut(cube, catalogue, fresh, "6arcsec 20km/s")
    after = _files(out)
    assert after == _files(fresh)
    assert after["B.fits"] != before["B.fits"]
    assert all(os.stat(out / n).st_mtime_ns == stamps[n] for n in ("A.fits", "C.fits", "D.fits"))  # untouched


def test_an_identical_rerun_keeps_every_file_and_says_so(s3_server, s3_env, cube, tmp_path, capsys):
    catalogue = _catalogue(tmp_path / "cat.csv", ROWS)
    out = tmp_path / "out"
    _cut(cube, catalogue, out, "6arcsec 20km/s")
    before = _files(out)
    capsys.readouterr()
    report = _cut(cube, catalogue, out, "6arcsec 20km/s")
    t = report["totals"]
    assert (t["done"], t["recut"], t["new"], t["kept"], t["skipped"]) == (0, 0, 0, 4, 0)
    assert _files(out) == before
    assert "cutouts: 0 cut (0 re-cut: request changed, 0 new), 4 kept from an earlier run" in capsys.readouterr().out


def test_a_manifest_without_requests_is_not_trusted(s3_server, s3_env, cube, tmp_path):
    # What an older ingest wrote: schema ingest.cutouts/1, no request per source.
    catalogue = _catalogue(tmp_path / "cat.csv", ROWS)
    out = tmp_path / "out"
    _cut(cube, catalogue, out, "6arcsec 20km/s")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["schema"] = "ingest.cutouts/1"
    manifest.pop("request")
    for entry in manifest["sources"]:
        entry.pop("request", None)
    (out / "manifest.json").write_text(json.dumps(manifest))
    t = _cut(cube, catalogue, out, "6arcsec 20km/s")["totals"]
    assert (t["done"], t["recut"], t["kept"]) == (4, 4, 0)
    assert all(e["request"] for e in json.loads((out / "manifest.json").read_text())["sources"])


def test_a_file_whose_source_left_the_catalogue_stays_but_is_not_listed(s3_server, s3_env, cube, tmp_path):
    out = tmp_path / "out"
    _cut(cube, _catalogue(tmp_path / "cat.csv", ROWS), out, "6arcsec 20km/s")
    t = _cut(cube, _catalogue(tmp_path / "fewer.csv", ROWS[:3]), out, "6arcsec 20km/s")["totals"]
    assert (t["sources"], t["done"], t["kept"]) == (3, 0, 3)
    assert (out / "D.fits").exists()
    assert "D" not in _boxes(out)


def test_under_mpi_the_summary_counts_kept_recut_and_new(s3_server, cube, tmp_path):
    env = child_env(s3_server)
    out = tmp_path / "out"

    def run(catalogue, size):
        proc, _ = mpiexec(2, ["cutouts", "--source", cube, "--catalogue", catalogue, "--output-dir", out,
                              "--size", size, "--columns", "freq=[Hz]", "--report", tmp_path / "r.json",
                              "--no-probe"], env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout, json.loads((tmp_path / "r.json").read_text())["totals"]

    run(_catalogue(tmp_path / "three.csv", ROWS[:3]), "6arcsec 20km/s")
    # C moved (re-cut), D is new, A and B are as they were (kept).
    rows = ROWS[:2] + [("C", 150.002 + 5 / 3600, -29.999, _freq(20)), ROWS[3]]
    stdout, t = run(_catalogue(tmp_path / "four.csv", rows), "6arcsec 20km/s")
    assert (t["done"], t["recut"], t["new"], t["kept"], t["skipped"]) == (2, 1, 1, 2, 0)
    assert "cutouts: 2 cut (1 re-cut: request changed, 1 new), 2 kept from an earlier run, 0 skipped of 4" in stdout
    # Another size: every file re-cut.
    stdout, t = run(_catalogue(tmp_path / "four.csv", rows), "7arcsec 20km/s")
    assert (t["done"], t["recut"], t["new"], t["kept"]) == (4, 4, 0, 0)
    assert "cutouts: 4 cut (4 re-cut: request changed, 0 new), 0 kept" in stdout
