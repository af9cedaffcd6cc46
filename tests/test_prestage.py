"""`mpiexec -n 4 python -m ingest prestage` end to end against the local S3 server: frame files the
pipeline reads unchanged, companions, resume that verifies CRCs, and bad input refused before
any data moves."""
import json
import os

import numpy as np
import pytest
from astropy.io import fits

from ingest.testbed.synth import write_cube
from tests.mpitools import child_env, cli, mpiexec

SHAPE = (30, 40, 36)  # numpy order (z, y, x)
REGIONS = ["--region-shape", "20x16x12", "--min-overlap", "4,3"]  # s2p_setup's rule: 2 x 3 x 3 = 18 regions


@pytest.fixture(scope="module")
def cubes(s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("prestage")
    bucket = s3_server.make_bucket("prestage-cubes")
    out = {}
    for name, bitpix in (("cube", -32), ("weights", 16)):
        path = root / f"{name}.fits"
        write_cube(path, SHAPE, bitpix)
        s3_server.client().upload_file(str(path), bucket, f"survey/{name}.fits")
        out[name] = {"path": str(path), "s3": f"s3://{bucket}/survey/{name}.fits", "data": fits.getdata(path)}
    small = root / "small.fits"
    write_cube(small, (30, 40, 35), 16)
    out["small"] = str(small)
    return out


def _prestage(args, env, n=4):
    proc, wall_s = mpiexec(n, ["prestage", "--threads", "2", "--chunk-bytes", "8KiB", "--no-progress", *args], env)
    return proc, wall_s


@pytest.mark.parametrize("method", ["presigned", "s3"])
def test_frame_with_companion_equals_the_original_and_is_sparse(cubes, s3_server, tmp_path, method):
    out_dir, report_path = tmp_path / "stage", tmp_path / "r.json"
    # The job covers 12 of 30 channels: the frame's other planes are holes.
    proc, _ = _prestage(["--source", cubes["cube"]["s3"], "--method", method, "--output-dir", out_dir,
                         "--region-shape", "20x16x6", "--min-overlap", "4,2", "--region", "0:12,:,:",
                         "--companion", f"weights={cubes['weights']['s3']}", "--report", report_path],
                        child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert report["mode"] == "prestage" and report["region_counts"] == {"read": len(report["regions"])}
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert all(r["status"] == "done" and set(r["checksum"]) == {"data", "weights"} for r in manifest["regions"])
    for name in ("cube", "weights"):
        staged = out_dir / f"{name}.fits"
        with open(staged, "rb") as fh, open(cubes[name]["path"], "rb") as src:
            assert fh.read(2880) == src.read(2880)  # the header, verbatim
        got = fits.getdata(staged)
        want = cubes[name]["data"]
        assert got.shape == want.shape
        # Every region reads exactly as the original; outside the job region the frame is a hole (zeros).
        for region in manifest["regions"]:
            sl = tuple(slice(a, b) for a, b in region["box"])
            assert np.array_equal(got[sl], want[sl])
        assert not np.any(got[12:])
        # Disk use follows the regions' bytes (12 of 30 planes, plus a page at each end), not the cube's.
        allocated = os.stat(staged).st_blocks * 512
        assert allocated <= 2880 + want[:12].nbytes + 4 * 4096 < os.path.getsize(staged)
    assert not [n for n in os.listdir(out_dir) if n.endswith(".part")]


def test_resume_skips_verified_regions_and_redoes_a_corrupt_one(cubes, tmp_path):
    out_dir, env = tmp_path / "stage", child_env()
    args = ["--source", cubes["cube"]["path"], "--output-dir", out_dir, *REGIONS]
    proc, _ = _prestage([*args, "--report", tmp_path / "r1.json"], env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out_dir / "manifest.json").read_text())
    # Flip one byte inside the first region that no other region overlaps.
    boxes = [r["box"] for r in manifest["regions"]]
    z, y, x = boxes[0][0][0], boxes[0][1][0], boxes[0][2][0]
    offset = 2880 + ((z * SHAPE[1] + y) * SHAPE[2] + x) * 4
    with open(out_dir / "cube.fits", "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x10]))
    proc, _ = _prestage([*args, "--report", tmp_path / "r2.json"], env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r2.json").read_text())
    redone = [r["index"] for r in report["regions"] if r["status"] == "redone"]
    assert redone == [i for i, b in enumerate(boxes) if b[0][0] <= z < b[0][1] and b[1][0] <= y < b[1][1]
                      and b[2][0] <= x < b[2][1]]
    assert report["region_counts"]["skipped"] == len(boxes) - len(redone)
    assert np.array_equal(fits.getdata(out_dir / "cube.fits"), cubes["cube"]["data"])
    # Another split of the same directory is refused, naming the difference; --fresh starts over.
    proc, _ = _prestage(["--source", cubes["cube"]["path"], "--output-dir", out_dir, "--grid", "2x2x1"], env)
    assert proc.returncode != 0 and "written for another pre-stage: the split was" in proc.stderr
    proc, _ = _prestage(["--source", cubes["cube"]["path"], "--output-dir", out_dir, "--grid", "2x2x1", "--fresh"],
                        env)
    assert proc.returncode == 0, proc.stderr
    assert np.array_equal(fits.getdata(out_dir / "cube.fits"), cubes["cube"]["data"])


@pytest.mark.parametrize("layout", ["subcubes", "frame-per-rank"])
def test_other_layouts_hold_every_region(cubes, tmp_path, layout):
    out_dir = tmp_path / "stage"
    proc, _ = _prestage(["--source", cubes["cube"]["path"], "--output-dir", out_dir, *REGIONS, "--layout", layout],
                        child_env(), n=3)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out_dir / "manifest.json").read_text())
    want = cubes["cube"]["data"]
    for region in manifest["regions"]:
        sl = tuple(slice(a, b) for a, b in region["box"])
        got = fits.getdata(region["files"]["data"])
        assert np.array_equal(got if layout == "subcubes" else got[sl], want[sl])
    if layout == "subcubes":  # a cut-out's WCS starts at its region
        region = manifest["regions"][-1]
        header = fits.getheader(region["files"]["data"])
        assert header["CRPIX1"] == fits.getheader(cubes["cube"]["path"])["CRPIX1"] - region["box"][2][0]


def test_bad_input_is_refused_before_any_data_moves(cubes, tmp_path):
    env = child_env()
    cases = [
        (["--companion", f"weights={cubes['small']}"], "companions: weights"),
        (["--region-shape", "50x16x12"], "region_shape"),
    ]
    for extra, message in cases:
        out_dir = tmp_path / f"out{len(extra)}{abs(hash(message))}"
        proc = cli(["prestage", "--source", cubes["cube"]["path"], "--output-dir", out_dir, "--no-progress", *extra],
                   env)
        assert proc.returncode == 1, proc.stderr
        assert message in proc.stderr
        assert not out_dir.exists() or not any(p for p in out_dir.rglob("*") if p.is_file())
    # No output directory at all.
    proc = cli(["prestage", "--source", cubes["cube"]["path"], "--no-progress"], env)
    assert proc.returncode == 1 and "output_dir: required" in proc.stderr
    # A file already there that no manifest accounts for is never overwritten.
    out_dir = tmp_path / "foreign"
    out_dir.mkdir()
    (out_dir / "cube.fits").write_bytes(b"precious")
    proc = cli(["prestage", "--source", cubes["cube"]["path"], "--output-dir", out_dir, "--no-progress"], env)
    assert proc.returncode == 1 and "no manifest.json says ingest wrote it" in proc.stderr
    assert (out_dir / "cube.fits").read_bytes() == b"precious"


def test_plan_lists_the_regions_and_their_ranks(cubes):
    proc = cli(["plan", cubes["cube"]["path"], "--ranks", "4", *REGIONS, "--requests", "0"], child_env())
    assert proc.returncode == 0, proc.stderr
    assert "regions on 4 rank(s): 18 regions of 20x16x12 px by s2p_setup's rule" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit() and "," in line]
    assert [int(r[0]) for r in rows] == list(range(1, 19))
    assert sorted({int(r[1]) for r in rows}) == [0, 1, 2, 3]
    assert " ".join(rows[0][2:8]) == "0, 20, 0, 16, 0, 12"  # s2p_setup's inclusive ends: w + 1 pixels


def test_a_killed_prestage_resumes_with_only_the_unfinished_regions(cubes, s3_server, toxiproxy, tmp_path):
    """SIGKILL the whole job once some regions are done; the re-run reads only the others."""
    import signal
    import subprocess
    import sys
    import time

    from tests.mpitools import ROOT

    name = "prestage-kill"
    listen = toxiproxy.create_proxy(name, f"127.0.0.1:{s3_server.port}")
    toxiproxy.add_toxic(name, "bandwidth", {"rate": 64})  # kB/s per connection: ~10 s for the job
    env = child_env(s3_server, AWS_ENDPOINT_URL=f"http://{listen}")
    out_dir = tmp_path / "stage"
    args = ["prestage", "--source", cubes["cube"]["s3"], "--method", "s3", "--output-dir", str(out_dir), *REGIONS,
            "--threads", "1", "--chunk-bytes", "8KiB", "--strategy", "small", "--no-probe", "--no-progress"]
    cmd = ["mpiexec", "-n", "2", "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "ingest", *args]
    job = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    manifest_path, done = out_dir / "manifest.json", []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(done) < 4:
        time.sleep(0.05)
        if manifest_path.exists():
            done = [r["index"] for r in json.loads(manifest_path.read_text())["regions"] if r["status"] == "done"]
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=30)
    # mpiexec is gone, but a rank can outlive it by a moment (and rank 0's listener still write
    # the manifest): read what was done only once no process of this job is left.
    gone_by = time.monotonic() + 30
    while time.monotonic() < gone_by and subprocess.run(["pgrep", "-f", str(out_dir)],
                                                        stdout=subprocess.DEVNULL).returncode == 0:
        time.sleep(0.05)
    done = [r["index"] for r in json.loads(manifest_path.read_text())["regions"] if r["status"] == "done"]
    assert 4 <= len(done) < 18, f"kill landed after {len(done)} regions"
    assert not (out_dir / "cube.fits").exists()  # not published: the frame is complete or absent
    toxiproxy.reset()
    proc, _ = mpiexec(2, [*args, "--report", tmp_path / "r.json"], env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert sorted(r["index"] for r in report["regions"] if r["status"] == "skipped") == sorted(done)
    assert report["region_counts"] == {"read": 18 - len(done), "skipped": len(done)}
    assert report["aggregate"]["bytes_needed"] == sum(
        r["bytes_needed"] for r in report["regions"] if r["status"] == "read")
    assert np.array_equal(fits.getdata(out_dir / "cube.fits"), cubes["cube"]["data"])


def test_compare_staging_puts_the_whole_cube_copy_beside_the_prestage(cubes, tmp_path):
    report_path = tmp_path / "r.json"
    proc, _ = _prestage(["--source", cubes["cube"]["path"], "--output-dir", tmp_path / "stage", *REGIONS,
                         "--compare", "staging", "--stage-dir", tmp_path / "copy", "--report", report_path],
                        child_env(), n=2)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert report["mode"] == "prestage" and report["baseline"]["stage_s"] > 0 and report["speedup"] > 0
    assert "staging  prestage" in proc.stdout


def test_a_failing_rank_fails_the_job_and_its_regions_resume(cubes, tmp_path):
    """Rank 1's reads raise after its first request: the job exits non-zero naming the rank, nothing
    is published, the regions the others finished stay done, and a clean re-run completes."""
    out_dir, env = tmp_path / "stage", child_env()
    args = ["prestage", "--source", cubes["cube"]["path"], "--output-dir", out_dir, *REGIONS, "--threads", "1",
            "--chunk-bytes", "8KiB", "--no-progress"]
    proc, _ = mpiexec(3, ["1", "raise", *args], env, python_args=("tests/mpi_harness.py",))
    assert proc.returncode != 0 and "rank 1" in proc.stderr
    assert not (out_dir / "cube.fits").exists() and not list(out_dir.glob("sofia_*.par"))
    done = [r["index"] for r in json.loads((out_dir / "manifest.json").read_text())["regions"] if r["status"] == "done"]
    proc, _ = mpiexec(3, [*args, "--report", tmp_path / "r.json"], env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert sorted(r["index"] for r in report["regions"] if r["status"] == "skipped") == sorted(done)
    assert np.array_equal(fits.getdata(out_dir / "cube.fits"), cubes["cube"]["data"])
