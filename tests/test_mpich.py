"""The MPI jobs under MPICH (Debian's mpich, hydra's `mpiexec.mpich`), the other MPI family sites
run: every other MPI test launches Open MPI. A representative subset, not the whole MPI suite
again: the launcher check and ranks per node, a multi-rank run (exact data, per-rank report),
stage and a baseline from it, prestage then publish (write-back), and one failing rank ending
every rank. mpi4py is the same PyPI wheel as under Open MPI, switched to its MPICH build at
import (tests/mpitools.py: family_env).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.mpitools import (ROOT, child_env, family_env, launcher, mpich_problem, mpiexec, reassemble,
                            upload_fits_cube, upload_float_cube)

pytestmark = pytest.mark.timeout(300)

FAMILY = "mpich"
SHAPE = (24, 40, 36)  # numpy order (z, y, x), int16
N_RANKS = 4
# float32, 17 MiB: four 5 MiB parts for publish (S3's smallest part) over three ranks
PUBLISH_SHAPE = (52, 256, 320)
# Each rank says what ingest's MPI plumbing sees: its world, the launcher's count, its node; rank 0
# prints them all on one line (hydra forwards the ranks' stdout in chunks: printed by every rank,
# two ranks' lines once arrived joined as one).
# Ranks per node come from processor names: ranks_per_node(comm), or topology(comm) where the
# driver has that instead.
PROBE = """
import json, os
from mpi4py import MPI
import ingest.driver.mpi as mpi
comm = mpi.world()
per_node = mpi.topology(comm).most_per_node if hasattr(mpi, "topology") else mpi.ranks_per_node(comm)
seen = comm.gather({"rank": comm.Get_rank(), "size": comm.Get_size(), "ranks_per_node": per_node,
                    "launcher": mpi.launcher_tasks(os.environ), "library": MPI.Get_library_version()}, root=0)
if comm.Get_rank() == 0:
    print(json.dumps(seen), flush=True)
"""


@pytest.fixture(scope="module", autouse=True)
def mpich_here():
    """MPICH missing is a failure with the fix, not a skip: a skipped family looks like a pass."""
    problem = mpich_problem()
    if problem:
        pytest.fail(f"cannot run MPI ranks under MPICH: {problem}", pytrace=False)


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    return upload_fits_cube(s3_server, tmp_path_factory.mktemp("mpich"), "mpich-cubes", SHAPE)


def test_hydra_world_matches_the_launcher_and_ranks_share_a_node(s3_server):
    proc, _ = mpiexec(3, [], child_env(), python_args=("-c", PROBE), family=FAMILY)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == 1, proc.stdout
    ranks = sorted(json.loads(lines[0]), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    for r in ranks:
        assert r["library"].startswith("MPICH"), r["library"]
        assert r["size"] == 3 and r["launcher"] == ["PMI_SIZE", 3] and r["ranks_per_node"] == 3


def test_mpi4py_on_the_wrong_family_is_refused_not_run_as_singletons(cube):
    """hydra starting ranks whose mpi4py loaded Open MPI: each would be a world of 1. ingest says
    so (PMI_SIZE) and names the library and the switch, instead of reading the cube twice."""
    env = {**family_env(child_env(), FAMILY), "MPI4PY_MPIABI": "openmpi"}
    proc = subprocess.run([*launcher(2, FAMILY), sys.executable, "-m", "ingest", "run", "--source", cube["path"],
                           "--no-progress"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    assert "launcher started 2 task(s) (PMI_SIZE=2)" in proc.stderr and "Open MPI" in proc.stderr, proc.stderr
    assert "MPI4PY_MPIABI=mpich" in proc.stderr


def test_four_ranks_reassemble_bit_exactly_with_a_report_per_rank(cube, s3_server, tmp_path):
    out_dir, report_path = tmp_path / "out", tmp_path / "report.json"
    proc, _ = mpiexec(N_RANKS, ["run", "--source", cube["s3"], "--method", "s3", "--threads", "2", "--chunk-bytes",
                                "4KiB", "--output-dir", out_dir, "--report", report_path, "--no-progress"],
                      child_env(s3_server), family=FAMILY)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text())
    assert sorted(r["rank"] for r in report["ranks"]) == list(range(N_RANKS))
    rebuilt, hits = reassemble(report, SHAPE, cube["data"].dtype)
    assert (hits == 1).all() and np.array_equal(rebuilt, cube["data"])
    assert report["aggregate"]["bytes_needed"] == sum(r["bytes_needed"] for r in report["ranks"]) == cube["data"].nbytes
    assert all(r["requests"] > 0 for r in report["ranks"])


def test_stage_then_a_run_against_its_baseline(cube, s3_server, tmp_path):
    env = child_env(s3_server)
    stage_report = tmp_path / "stage.json"
    proc, _ = mpiexec(2, ["stage", "--source", cube["s3"], "--stage-dir", tmp_path / "st", "--report", stage_report,
                          "--no-progress"], env, family=FAMILY)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(stage_report.read_text())["mode"] == "staging"
    assert (tmp_path / "st" / "cube.fits").read_bytes() == open(cube["path"], "rb").read()
    report_path = tmp_path / "direct.json"
    proc, _ = mpiexec(2, ["run", "--source", cube["s3"], "--baseline", stage_report, "--report", report_path,
                          "--no-progress"], env, family=FAMILY)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report_path.read_text())["speedup"] > 0


@pytest.fixture(scope="module")
def float_cube(s3_server, tmp_path_factory):
    """A float32 cube in its own bucket: its bytes, its URI, a working directory."""
    return upload_float_cube(s3_server, tmp_path_factory.mktemp("mpich-publish"), "mpich", PUBLISH_SHAPE)


def prestage(s3_server, cube, staged, family):
    return mpiexec(3, ["prestage", "--source", cube["s3"], "--output-dir", staged, "--grid", "1x1x3", "--no-probe",
                       "--no-progress"], child_env(s3_server), family=family)[0]


def test_prestage_writes_a_frame_equal_to_the_source(s3_server, float_cube, tmp_path):
    proc = prestage(s3_server, float_cube, tmp_path / "staged", FAMILY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((tmp_path / "staged" / "manifest.json").read_text())
    assert len(manifest["regions"]) == 3 and all(r["status"] == "done" for r in manifest["regions"])
    assert (tmp_path / "staged" / "cube.fits").read_bytes() == float_cube["bytes"]


def test_publish_writes_a_prestaged_frame_back_as_one_object(s3_server, float_cube, tmp_path):
    """The frame is pre-staged under Open MPI (the test above covers MPICH's pre-stage); the
    write-back, four parts from three ranks, runs under MPICH."""
    staged = tmp_path / "staged"
    proc = prestage(s3_server, float_cube, staged, "openmpi")
    assert proc.returncode == 0, proc.stderr[-3000:]
    bucket, report_path = float_cube["bucket"], tmp_path / "publish.json"
    proc, _ = mpiexec(3, ["publish", "--source", staged, "--dest", f"s3://{bucket}/out/cube.fits",
                          "--report", report_path, "--no-progress"], child_env(s3_server), family=FAMILY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    body = s3_server.client().get_object(Bucket=bucket, Key="out/cube.fits")["Body"].read()
    assert body == float_cube["bytes"]
    report = json.loads(report_path.read_text())
    # 5 MiB parts made 4 for 3 ranks; whole waves make 3 of 5.4 MiB, one each
    assert len(report["ranks"]) == 3 and sum(r["parts_uploaded"] for r in report["ranks"]) == report["parts"] == 3


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_one_failing_rank_ends_every_rank_quickly(cube, s3_server, tmp_path, mode):
    """Rank 2 raises or dies mid-read: the job ends at once, with no rank left waiting in a
    collective. (Hydra ends every rank when one exits non-zero, so the failing rank's traceback
    may be cut short; its first line, flushed at once, names it.)"""
    proc, elapsed_s = mpiexec(
        N_RANKS, ["--source", cube["s3"], "--chunk-bytes", "2KiB", "--threads", "1", "--no-progress",
                  "--output-dir", tmp_path / "out"], child_env(s3_server), timeout_s=90,
        python_args=(os.path.join(ROOT, "tests", "mpi_harness.py"), "2", mode), family=FAMILY)
    assert proc.returncode != 0 and elapsed_s < 60
    if mode == "raise":
        assert "injected read failure on rank 2" in proc.stderr, proc.stderr
    leftovers = os.listdir(tmp_path / "out") if (tmp_path / "out").exists() else []
    assert not any(name.startswith("rank0002") for name in leftovers)
