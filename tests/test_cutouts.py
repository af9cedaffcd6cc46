"""`python -m ingest cutouts` end to end: a catalogue's cubelets out of a cube in a real S3 server,
every file bit-equal to astropy's section of its box, manifest and resume, bad rows skipped."""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

import ingest
from ingest.outputs.subcubes import fits_text
from tests.mpitools import check_root_ledger, child_env, cli, mpiexec, upload_float_cube

SHAPE = (24, 40, 36)  # numpy order: z, y, x


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    return upload_float_cube(s3_server, tmp_path_factory.mktemp("cutouts"), "cutouts", SHAPE)


def _bbox_catalogue(path, rows):
    """A CSV catalogue with SoFiA-2's bounding-box columns (inclusive pixels)."""
    lines = ["name,x_min,x_max,y_min,y_max,z_min,z_max"]
    lines += [",".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


ROWS = [
    ("SoFiA J100000-300000", 3, 8, 4, 9, 2, 6),
    ("SoFiA J100001-300001", 6, 12, 5, 11, 4, 9),  # overlaps the first
    ("edge source", 30, 40, 35, 45, 20, 30),  # partly off: clipped
    ("far away", 100, 110, 100, 110, 1, 2),  # wholly off: skipped
    ("SoFiA J100000-300000", 20, 22, 20, 22, 10, 12),  # a duplicate name
    ("bad/name?* M\u00e9n\u2013\u65e5", 0, 0, 0, 0, 0, 0),  # unsafe for a file, and beyond FITS's ASCII
]


def _astropy_box(path, box):
    with warnings.catch_warnings(), fits.open(path) as f:
        warnings.simplefilter("ignore")
        return np.array(f[0].section[tuple(slice(a, b) for a, b in box)])


def _bits(a: np.ndarray) -> np.ndarray:
    """The values' bits, big-endian whatever the array's byte order: equal bits, not just values."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder(">")).view(np.uint8)


def _check(out_dir, cube_path, margin=10):
    manifest = json.loads((out_dir / "manifest.json").read_text())
    done = [e for e in manifest["sources"] if e["status"] == "done"]
    skipped = [e for e in manifest["sources"] if e["status"] == "skipped"]
    assert len(done) == 5 and len(skipped) == 1 and "off the cube" in skipped[0]["reason"]
    assert len({e["file"] for e in done}) == 5  # the duplicate name gets a file of its own
    with fits.open(cube_path) as f:
        cube_wcs = WCS(f[0].header)
    rng = np.random.default_rng(1)
    for e in done:
        path = out_dir / e["file"]
        assert "/" not in e["file"] and "?" not in e["file"] and "*" not in e["file"]
        box = [tuple(p) for p in e["box"]]
        with fits.open(path) as f:
            data, header = np.array(f[0].data), f[0].header
        np.testing.assert_array_equal(_bits(data), _bits(_astropy_box(cube_path, box)))
        assert header["OBJECT"] == fits_text(e["name"]) and header["OBJECT"].isascii()
        cut_wcs = WCS(header)
        for _ in range(5):  # every pixel keeps its world coordinate
            pix = [rng.uniform(0, b - a - 1) for a, b in reversed(box)]
            world = cut_wcs.wcs_pix2world([pix], 0)
            back = cube_wcs.wcs_world2pix(world, 0)[0]
            assert np.allclose(back, [p + a for p, (a, _) in zip(pix, reversed(box))], atol=1e-6)
    return manifest


def test_bbox_cubelets_under_mpi_exact_manifest_and_resume(s3_server, cube, tmp_path):
    catalogue = _bbox_catalogue(tmp_path / "cat.csv", ROWS)
    out = tmp_path / "out"
    env = child_env(s3_server)
    args = ["cutouts", "--source", cube["s3"], "--catalogue", catalogue, "--output-dir", out,
            "--report", tmp_path / "r.json", "--no-probe"]
    proc, _ = mpiexec(3, args, env)
    assert proc.returncode == 0, proc.stderr
    manifest = _check(out, cube["path"])
    edge = next(e for e in manifest["sources"] if e["name"] == "edge source")
    assert edge["clipped"] == ["x", "y", "z"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["totals"]["done"] == 5 and report["totals"]["skipped"] == 1
    assert report["totals"]["requests"] > 0 and len(report["ranks"]) == 3
    # Each rank's bands within the budget, less what it held beyond the leanest rank (rank 0: the catalogue).
    budgets = [r["band_budget_bytes"] for r in report["ranks"]]
    assert all(256 << 18 <= b <= 256 << 20 for b in budgets) and max(budgets) == 256 << 20
    assert budgets[0] < 256 << 20  # astropy's table, WCS and frames, and the catalogue's leftovers
    root = check_root_ledger(report["root"], report["makespan_s"], gathers=1)  # the manifest is in report_s
    assert root["starting_s"] > 0.0  # astropy, loaded before the first step, apart from rank 0's own work
    # The model's makespan for the ranks' plans, with the term that binds it (as `run` reports it).
    prediction = report["settings"]["prediction"]
    assert prediction["makespan_s"] > 0 and prediction["binding"]
    # The report says how the ranks split the cube and how each read its stripe, and why.
    choice = report["plan"]["choice"]
    assert "ranks split along numpy axis" in choice and "rank 0: planes" in choice and "predicted" in choice
    assert sum(report["plan"]["modes"].values()) == report["plan"]["bands"] >= 1
    for record in report["ranks"]:
        if record["sources"]:
            assert record["bands"] and all(b["mode"] in ("stream", "spans") for b in record["bands"])
            assert 0 < record["memory_bound_bytes"] <= report["settings"]["memory_bound_bytes"]
    per_source = [e for e in manifest["sources"] if e["status"] == "done"]
    assert sum(e["wire_bytes"] for e in per_source) == pytest.approx(report["totals"]["bytes_wire"], abs=len(per_source))
    assert sum(e["requests"] for e in per_source) == pytest.approx(report["totals"]["requests"], abs=0.01 * len(per_source))
    assert "5 cut" in proc.stdout and "skipped 1" in proc.stdout

    # A re-run keeps every whole file; a damaged one is cut again.
    victim = out / next(e["file"] for e in manifest["sources"] if e["status"] == "done")
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    (out / ".half written.fits.tmp-99999").write_bytes(b"SIMPLE")  # what a killed run leaves
    proc = cli(args, env)
    assert proc.returncode == 0, proc.stderr
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["totals"]["kept"] == 4 and again["totals"]["done"] == 1
    _check(out, cube["path"])
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # journals and temps gone


def test_python_api_alone_and_pixel_offset_of_a_region(s3_server, s3_env, cube, tmp_path):
    # A catalogue of one region whose origin is pixel (2, 3, 4) of the cube: its pixel columns
    # are relative to it, and the cut-outs land where SoFiA-X would place them.
    catalogue = _bbox_catalogue(tmp_path / "region.csv", ROWS)
    report = ingest.cutouts(cube["s3"], str(catalogue), str(tmp_path / "api"), region_offset="2,3,4", probe=False)
    assert report["totals"]["done"] == 5
    manifest = _check(tmp_path / "api", cube["path"])
    edge = next(e for e in manifest["sources"] if e["name"] == "edge source")
    # x 30..40 + 2, y 35..45 + 3, z 20..30 + 4, each grown by SoFiA-2's margin of 10 and clipped.
    assert edge["box"] == [[14, 24], [28, 40], [22, 36]]


def test_a_small_budget_streams_the_stripe_in_many_bands_and_every_cutout_stays_exact(s3_server, s3_env, cube,
                                                                                      tmp_path):
    # Planes of 40 x 36 float32 are 5,760 bytes: a 20,000-byte budget reads three at a time, so the
    # cut-outs (up to 25 planes deep) reach over many bands, carried as planes or as partial arrays.
    catalogue = _bbox_catalogue(tmp_path / "cat.csv", ROWS)
    report = ingest.cutouts(cube["s3"], str(catalogue), str(tmp_path / "bands"), probe=False,
                            cutout_batch_bytes=20_000)
    assert report["totals"]["done"] == 5
    (record,) = report["ranks"]
    assert len(record["bands"]) > 5 and all(b["bytes_wire"] <= 20_000 for b in record["bands"])
    assert record["buffer_bytes_max"] < record["memory_bound_bytes"] == report["settings"]["memory_bound_bytes"]
    planes = [b["planes"] for b in record["bands"]]
    assert all(a[1] == b[0] for a, b in zip(planes, planes[1:]))  # each plane read once, in order
    _check(tmp_path / "bands", cube["path"])


def test_a_catalogue_without_usable_columns_is_an_error_before_any_data_moves(cube, counting_source, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,flux\nA,1.0\n")
    with counting_source(cube["path"]) as source:
        proc = cli(["cutouts", "--source", source.url, "--catalogue", bad, "--output-dir", tmp_path / "o"],
                   child_env())
    assert proc.returncode == 1
    assert "bad.csv" in proc.stderr and "flux" in proc.stderr
    source.assert_no_data_moved()
    assert not (tmp_path / "o").exists() or not any(n.endswith(".fits") for n in os.listdir(tmp_path / "o"))


def test_dest_puts_every_cutout_and_the_manifest_into_the_store_and_resumes_from_it(s3_server, cube, tmp_path):
    catalogue = _bbox_catalogue(tmp_path / "cat.csv", ROWS)
    bucket = cube["bucket"]
    env = child_env(s3_server)
    args = ["cutouts", "--source", cube["s3"], "--catalogue", catalogue, "--dest", f"s3://{bucket}/cubelets/",
            "--report", tmp_path / "r.json", "--no-probe"]
    proc, _ = mpiexec(2, args, env)
    assert proc.returncode == 0, proc.stderr
    client = s3_server.client()
    manifest = json.loads(client.get_object(Bucket=bucket, Key="cubelets/manifest.json")["Body"].read())
    local = tmp_path / "fetched"
    local.mkdir()
    for entry in manifest["sources"]:
        if entry["status"] == "done":
            assert entry["object"] == f"s3://{bucket}/cubelets/{entry['file']}" and entry["etag"]
            client.download_file(bucket, f"cubelets/{entry['file']}", str(local / entry["file"]))
    (local / "manifest.json").write_text(json.dumps(manifest))
    _check(local, cube["path"])
    proc = cli(args, env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["totals"]["kept"] == 5


def test_plan_prices_a_catalogues_cutouts_before_any_data_moves(s3_server, cube, counting_source, tmp_path):
    catalogue = _bbox_catalogue(tmp_path / "cat.csv", ROWS)
    with counting_source(cube["path"]) as source:
        proc = cli(["plan", source.url, "--catalogue", catalogue, "--ranks", "2", "--json"], child_env())
    assert proc.returncode == 0, proc.stderr
    source.assert_no_data_moved()
    planned = json.loads(proc.stdout)["catalogue"]
    assert (planned["sources"], planned["cut"], planned["skipped"]) == (6, 5, 1)
    assert planned["requests"] > 0 and planned["bytes_wire"] > 0 and planned["prediction"]["ranks"] == 2
    assert planned["prediction"]["makespan_s"] > 0 and planned["prediction"]["binding"]
    text = cli(["plan", cube["s3"], "--catalogue", catalogue], child_env(s3_server))
    assert "catalogue: 5 cut-outs (1 skipped) of 6 sources" in text.stdout


def test_a_name_beyond_fits_text_keeps_its_cutout():
    assert fits_text("M\u00e9n\u2013\u65e5 \u00c5ngstr\u00f6m\t") == "Men?? Angstrom?"
    assert fits_text("WALLABY J100342-270137") == "WALLABY J100342-270137"


def test_the_manifest_text_is_the_manifest_one_line_per_source():
    from ingest.outputs.cutouts import manifest_text

    entries = [{"name": f"M\u00e9n {i}", "row": i, "status": "done", "box": [[0, 2], [1, 3]], "crc32": i}
               for i in range(3)]
    manifest = {"schema": "ingest.cutouts/1", "cube": {"source": "s3://b/k", "bytes": 10}, "sources": entries}
    text = manifest_text(manifest)
    assert json.loads(text) == manifest and text.endswith("\n")
    assert [line.strip().rstrip(",") for line in text.splitlines() if '"row"' in line] == [json.dumps(e) for e in entries]
    assert json.loads(manifest_text({"sources": []})) == {"sources": []}


def test_an_hdf5_cubes_catalogue_gives_one_h5_file_per_source_each_its_box_of_the_dataset(tmp_path):
    """The cut-out ranks' HDF5 branch (driver.cutouts.rank): 2 ranks cut a SoFiA-2 catalogue out of
    an HDF5 cube; each source's .h5 holds the dataset's box by SoFiA-2's rule (the bounding box,
    inclusive, grown by the 10-pixel margin and clipped to the cube, worked out by hand below), at
    the dataset's path, with the box's start recorded."""
    import h5py

    data = np.random.default_rng(3).standard_normal(SHAPE).astype(">f4")
    source = tmp_path / "cube.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("/0/DATA", data=data)
    catalogue = _bbox_catalogue(tmp_path / "cat.csv", ROWS[:3])
    out = tmp_path / "out"
    proc, _ = mpiexec(2, ["cutouts", "--source", source, "--catalogue", catalogue, "--output-dir", out,
                          "--no-progress"], child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {"SoFiA J100000-300000": ((0, 17), (0, 20), (0, 19)),  # z 2-6, y 4-9, x 3-8, +-10
                "SoFiA J100001-300001": ((0, 20), (0, 22), (0, 23)),  # z 4-9, y 5-11, x 6-12
                "edge source": ((10, 24), (25, 40), (20, 36))}  # z 20-30, y 35-45, x 30-40: clipped
    manifest = json.loads((out / "manifest.json").read_text())
    assert {e["name"]: tuple(map(tuple, e["box"])) for e in manifest["sources"]} == expected
    assert sorted(p.name for p in out.iterdir()) == sorted([e["file"] for e in manifest["sources"]]
                                                          + ["manifest.json"])
    for entry in manifest["sources"]:
        box = expected[entry["name"]]
        assert entry["file"].endswith(".h5")
        with h5py.File(out / entry["file"], "r") as f:
            got = f["/0/DATA"]
            assert got.dtype == data.dtype
            np.testing.assert_array_equal(got[...], data[tuple(slice(a, b) for a, b in box)])
            assert list(got.attrs["ingest_region_start"]) == [a for a, _ in box]
