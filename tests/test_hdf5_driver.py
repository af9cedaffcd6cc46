"""HDF5 sources everywhere the FITS path goes: `info`, `plan`, `run` and `stage` under mpiexec,
`prestage` layouts, against the local S3 server; every output compared with h5py's own read."""
import json
import os

import h5py
import numpy as np
import pytest

from ingest.testbed.synth_hdf5 import write_hdf5_cube
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (24, 40, 36)  # numpy order (z, y, x)


@pytest.fixture(scope="module")
def h5cubes(s3_server, tmp_path_factory):
    """A chunked (gzip + shuffle, chunks not dividing the shape) and a contiguous cube, uploaded."""
    root = tmp_path_factory.mktemp("h5driver")
    bucket = s3_server.make_bucket("h5-driver")
    out = {}
    for name, chunks, compression in (("chunked", (8, 16, 16), "gzip"), ("contiguous", None, "none")):
        path = root / f"{name}.h5"
        write_hdf5_cube(path, SHAPE, chunks=chunks, compression=compression,
                        shuffle=compression != "none")
        s3_server.client().upload_file(str(path), bucket, f"h5/{name}.h5")
        with h5py.File(path, "r") as f:
            (dataset,) = [k for k in f if isinstance(f[k], h5py.Dataset)]
            data = f[dataset][...]
        out[name] = {"path": str(path), "s3": f"s3://{bucket}/h5/{name}.h5", "data": data, "dataset": "/" + dataset}
    return out


def _boxes(report) -> list:
    return [tuple(tuple(b) for b in r["box"]) for r in report["regions"]]


def test_info_lists_the_datasets_and_plan_cuts_on_chunk_boundaries(h5cubes):
    env = child_env()
    proc = cli(["info", h5cubes["chunked"]["path"], "--json"], env)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["format"] == "hdf5" and facts["storage"] == "chunked" and facts["chunk_shape"] == [8, 16, 16]
    assert [f["name"] for f in facts["datasets"][0]["filters"]] == ["shuffle", "deflate"]
    assert facts["open_requests"] >= 1 and facts["open_bytes"] > 0
    proc = cli(["plan", h5cubes["chunked"]["path"], "--ranks", "3", "--grid", "1x3x1", "--requests", "0"], env)
    assert proc.returncode == 0, proc.stderr
    assert "chunks needed" in proc.stdout and "wire / needed chunks" in proc.stdout
    # y (40 px) in chunks of 16 is 3 chunks: 3 regions of one chunk row each, no chunk read twice.
    assert "0, 35, 0, 15, 0, 23" in proc.stdout and "0, 35, 16, 31, 0, 23" in proc.stdout
    assert "0, 35, 32, 39, 0, 23" in proc.stdout


@pytest.mark.parametrize("name,method", [("chunked", "s3"), ("contiguous", "presigned")])
def test_run_on_four_ranks_writes_regions_equal_to_h5py(h5cubes, s3_server, tmp_path, name, method):
    cube = h5cubes[name]
    report_path, out_dir = tmp_path / "r.json", tmp_path / "out"
    proc, _ = mpiexec(4, ["run", "--source", cube["s3"], "--method", method, "--output-dir", out_dir,
                          "--report", report_path, "--no-progress", "--threads", "2"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert report["cube"]["format"] == "hdf5" and report["cube"]["dataset"] == cube["dataset"]
    assert report["cube"]["storage"] == name
    got = np.zeros_like(cube["data"])
    seen = np.zeros(cube["data"].shape, bool)
    files = sorted(os.listdir(out_dir))
    assert len(files) == 4 and all(f.endswith(".h5") for f in files)
    for fname in files:
        with h5py.File(out_dir / fname, "r") as f:
            dset = f[cube["dataset"]]
            start = tuple(int(a) for a in dset.attrs["ingest_region_start"])
            box = tuple(slice(a, a + n) for a, n in zip(start, dset.shape))
            assert dset.dtype == cube["data"].dtype
            got[box] = dset[...]
            seen[box] = True
    assert seen.all()
    assert np.array_equal(got, cube["data"])


def test_stage_compare_reads_the_staged_hdf5_copy(h5cubes, s3_server, tmp_path):
    proc, _ = mpiexec(2, ["run", "--source", h5cubes["chunked"]["s3"], "--compare", "staging", "--stage-dir",
                          tmp_path / "staged", "--report", tmp_path / "r.json", "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["baseline"]["stage_s"] > 0 and report["baseline"]["read_makespan_s"] > 0
    with open(tmp_path / "staged" / "chunked.h5", "rb") as staged, open(h5cubes["chunked"]["path"], "rb") as src:
        assert staged.read() == src.read()


def _prestage(args, env, n=4):
    proc, _ = mpiexec(n, ["prestage", "--threads", "2", "--no-progress", *args], env)
    return proc


def test_prestage_subcubes_and_their_virtual_dataset_equal_h5py(h5cubes, s3_server, tmp_path):
    cube = h5cubes["chunked"]
    out_dir = tmp_path / "stage"
    args = ["--source", cube["s3"], "--method", "presigned", "--output-dir", out_dir, "--layout", "subcubes",
            "--region-shape", "20x16x10", "--min-overlap", "4,3", "--report", tmp_path / "r.json"]
    proc = _prestage(args, child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert len(manifest["regions"]) > 4  # more regions than ranks
    for region in manifest["regions"]:
        box = tuple(slice(a, b) for a, b in region["box"])
        with h5py.File(region["files"]["data"], "r") as f:
            dset = f[cube["dataset"]]
            assert dset.dtype == cube["data"].dtype
            assert list(dset.attrs["ingest_region_start"]) == [a for a, _ in region["box"]]
            assert np.array_equal(dset[...], cube["data"][box])
    # The virtual dataset stitches the (overlapping) regions into the whole cube, from another directory too.
    moved = tmp_path / "moved"
    os.rename(out_dir, moved)
    with h5py.File(moved / "chunked_virtual.h5", "r") as f:
        assert np.array_equal(f[cube["dataset"]][...], cube["data"])
    # A corrupted region file is found by its CRC and read again alone.
    os.rename(moved, out_dir)
    victim = manifest["regions"][2]["files"]["data"]
    with h5py.File(victim, "r") as f:
        data_offset = f[cube["dataset"]].id.get_offset()
    with open(victim, "r+b") as fh:
        fh.seek(data_offset + 7)
        byte = fh.read(1)
        fh.seek(data_offset + 7)
        fh.write(bytes([byte[0] ^ 0xFF]))
    proc = _prestage(args, child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    counts = json.loads((tmp_path / "r.json").read_text())["region_counts"]
    assert counts == {"redone": 1, "skipped": len(manifest["regions"]) - 1}, counts
    with h5py.File(victim, "r") as f:
        box = tuple(slice(a, b) for a, b in manifest["regions"][2]["box"])
        assert np.array_equal(f[cube["dataset"]][...], cube["data"][box])


def test_prestage_frame_of_a_contiguous_dataset_reads_like_the_source(h5cubes, s3_server, tmp_path):
    cube = h5cubes["contiguous"]
    out_dir = tmp_path / "stage"
    proc = _prestage(["--source", cube["s3"], "--method", "s3", "--output-dir", out_dir, "--region", "0:12,:,:",
                      "--grid", "1x2x2"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    frame = out_dir / "contiguous.h5"
    assert frame.stat().st_size == os.path.getsize(cube["path"])
    with h5py.File(frame, "r") as f:
        assert np.array_equal(f[cube["dataset"]][0:12], cube["data"][0:12])
        assert not f[cube["dataset"]][12:].any()  # outside the job: holes


def test_prestage_refusals_for_hdf5_leave_nothing(h5cubes, s3_server, tmp_path):
    env = child_env(s3_server)
    out_dir = tmp_path / "stage"
    proc = _prestage(["--source", h5cubes["chunked"]["s3"], "--output-dir", out_dir], env, n=2)
    assert proc.returncode != 0 and "frame needs a contiguous dataset" in proc.stderr and "chunked" in proc.stderr
    template = tmp_path / "sofia.par"
    template.write_text("input.data = x.fits\noutput.directory = out\n")
    proc = _prestage(["--source", h5cubes["contiguous"]["s3"], "--output-dir", out_dir, "--sofia-template", template],
                     env, n=2)
    assert proc.returncode != 0 and "SoFiA-2 reads FITS" in proc.stderr
    proc = _prestage(["--source", h5cubes["contiguous"]["s3"], "--output-dir", out_dir, "--dataset", "/nope"], env,
                     n=2)
    assert proc.returncode != 0 and "'/nope' is not in the file" in proc.stderr and "/cube" in proc.stderr
    assert not out_dir.exists() or not any(out_dir.iterdir())
