"""`mpiexec -n 4 python -m ingest run` end to end against the local S3 server."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ingest.testbed.synth import write_cube
from tests.mpitools import ROOT, check_root_ledger, child_env, mpiexec, reassemble, upload_fits_cube

SHAPE = (24, 40, 36)  # numpy order (z, y, x)
N_RANKS = 4


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    return upload_fits_cube(s3_server, tmp_path_factory.mktemp("mpi"), "mpi-cubes", SHAPE)


@pytest.mark.parametrize("method", ["presigned", "s3", "posix"])
def test_four_ranks_reassemble_bit_exactly(cube, method, s3_server, tmp_path):
    source = cube["path"] if method == "posix" else cube["s3"]
    out_dir, report_path = tmp_path / "out", tmp_path / "report.json"
    proc, _ = mpiexec(N_RANKS, ["run", "--source", source, "--method", method, "--threads", "2",
                                "--chunk-bytes", "4KiB", "--output-dir", str(out_dir), "--report", str(report_path),
                                "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    assert len(os.listdir(out_dir)) == N_RANKS
    report = json.loads(report_path.read_text())
    rebuilt, hits = reassemble(report, SHAPE, cube["data"].dtype)
    assert (hits == 1).all(), "without halo every voxel belongs to exactly one rank"
    assert rebuilt.dtype == cube["data"].dtype and np.array_equal(rebuilt, cube["data"])
    assert report["schema"] == "ingest.report/1"
    assert len(report["ranks"]) == N_RANKS
    assert sum(r["bytes_needed"] for r in report["ranks"]) == cube["data"].size * 2
    assert report["aggregate"]["bytes_needed"] == cube["data"].size * 2
    starts = [r["start_s"] for r in report["ranks"]]
    stops = [r["stop_s"] for r in report["ranks"]]
    assert report["aggregate"]["makespan_s"] == pytest.approx(max(stops) - min(starts))
    assert "X-Amz-Signature" not in report_path.read_text() + proc.stdout + proc.stderr
    assert "aggregate" in proc.stdout.lower() or "makespan" in proc.stdout.lower()


def test_halo_boxes_overlap_by_the_halo(cube, s3_server, tmp_path):
    out_dir, report_path = tmp_path / "out", tmp_path / "report.json"
    proc, _ = mpiexec(N_RANKS, ["--source", cube["s3"], "--grid", "1x2x2", "--halo", "3", "--output-dir",
                                str(out_dir), "--report", str(report_path), "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    boxes = [r["box"] for r in report["ranks"]]
    # grid 1x2x2 (x, y, z): z and y split in two; neighbours share 2 x halo planes
    z_cut, y_cut = SHAPE[0] // 2, SHAPE[1] // 2
    for box in boxes:
        (z0, z1), (y0, y1), (x0, x1) = box
        assert (x0, x1) == (0, SHAPE[2])
        assert (z0, z1) in ((0, z_cut + 3), (z_cut - 3, SHAPE[0]))
        assert (y0, y1) in ((0, y_cut + 3), (y_cut - 3, SHAPE[1]))
    rebuilt, hits = reassemble(report, SHAPE, cube["data"].dtype)
    assert np.array_equal(rebuilt, cube["data"])
    assert hits.max() == 4 and hits.min() == 1


def test_compare_staging_reports_baseline_and_speedup(cube, s3_server, tmp_path):
    report_path = tmp_path / "report.json"
    proc, _ = mpiexec(N_RANKS, ["--source", cube["s3"], "--compare", "staging", "--stage-dir",
                                str(tmp_path / "stage"), "--report", str(report_path), "--no-progress"],
                      child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    base = report["baseline"]
    assert base["stage_s"] > 0 and base["read_makespan_s"] > 0
    assert base["total_s"] == pytest.approx(base["stage_s"] + base["read_makespan_s"])
    assert report["speedup"] == pytest.approx(base["total_s"] / report["aggregate"]["makespan_s"])
    staged = [f for f in os.listdir(tmp_path / "stage") if not f.startswith(".")]
    assert staged == ["cube.fits"]
    assert open(tmp_path / "stage" / "cube.fits", "rb").read() == open(cube["path"], "rb").read()
    assert "speedup" in proc.stdout.lower()


def test_stage_command_then_baseline_from_its_report(cube, s3_server, tmp_path):
    env = child_env(s3_server)
    stage_report = tmp_path / "stage.json"
    proc, _ = mpiexec(2, ["stage", "--source", cube["s3"], "--stage-dir", str(tmp_path / "st"),
                          "--report", str(stage_report), "--no-progress"], env)
    assert proc.returncode == 0, proc.stderr
    staged = json.loads(stage_report.read_text())
    assert staged["mode"] == "staging"
    check_root_ledger(staged["root"], staged["aggregate"]["makespan_s"], gathers=1)  # the staged read's records
    report_path = tmp_path / "direct.json"
    proc, _ = mpiexec(2, ["--source", cube["s3"], "--baseline", str(stage_report), "--report", str(report_path),
                          "--no-progress"], env)
    assert proc.returncode == 0, proc.stderr
    direct = json.loads(report_path.read_text())
    # The baseline is the stage report's own (copy + read of the copy), and the speedup is its
    # total over this run's makespan: the ratio of the two reports' figures, nothing else.
    base = staged["baseline"]
    assert base["total_s"] == pytest.approx(base["stage_s"] + base["read_makespan_s"])
    assert direct["baseline"]["total_s"] == base["total_s"] and direct["baseline"]["stage_s"] == base["stage_s"]
    assert direct["speedup"] == pytest.approx(base["total_s"] / direct["aggregate"]["makespan_s"], rel=1e-12)


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_one_failing_rank_ends_the_job_quickly(cube, s3_server, tmp_path, mode):
    proc, elapsed_s = mpiexec(
        N_RANKS,
        ["--source", cube["s3"], "--chunk-bytes", "2KiB", "--threads", "1", "--no-progress",
         "--output-dir", str(tmp_path / "out")],
        child_env(s3_server),
        timeout_s=90,
        python_args=(os.path.join(ROOT, "tests", "mpi_harness.py"), "2", mode),
    )
    assert proc.returncode != 0
    assert elapsed_s < 60
    if mode == "raise":
        assert "injected read failure on rank 2" in proc.stderr
    # nothing that looks like a finished output is left behind by the failed rank
    leftovers = os.listdir(tmp_path / "out") if os.path.exists(tmp_path / "out") else []
    assert not any(name.startswith("rank0002") for name in leftovers)


def test_bad_config_is_one_clear_error(cube, s3_server):
    proc, _ = mpiexec(2, ["--source", cube["s3"], "--chunk-bytes", "lots"], child_env(s3_server))
    assert proc.returncode == 1
    assert "chunk_bytes" in proc.stderr
    assert proc.stderr.count("chunk_bytes") == 1, "rank 0 alone reports a config error"


def test_singleton_worlds_are_refused(cube, s3_server):
    env = {**child_env(s3_server), "SLURM_STEP_NUM_TASKS": "4"}
    proc = subprocess.run([sys.executable, "-m", "ingest", "--source", cube["path"]], env={**env, "PYTHONPATH": ROOT},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "launcher started 4 task(s)" in proc.stderr


def test_tiny_cube_runs_without_probing(s3_server, tmp_path):
    """A cube too small to probe (found by the soak tests: the probe once read past its end)."""
    path = tmp_path / "tiny.fits"
    write_cube(path, (8, 16, 16), 16)
    bucket = s3_server.make_bucket("tiny-cubes")
    s3_server.client().upload_file(str(path), bucket, "tiny.fits")
    report_path = tmp_path / "r.json"
    proc, _ = mpiexec(2, ["--source", f"s3://{bucket}/tiny.fits", "--report", str(report_path), "--no-progress"],
                      child_env(s3_server))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report_path.read_text())["settings"]["tuning"] is None
