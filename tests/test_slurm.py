"""A real single-node SLURM (scripts/slurm-local.sh) runs a 4-task MPI job as ONE world of 4.

The failure this guards against is the classic one: srun without working PMIx starts N
separate size-1 worlds, and a job "succeeds" with every rank doing all the work alone. A
broken setup (packages, daemons, PMIx) FAILS here; it never skips.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
BUDGET_S = 120  # the whole test: install (first time), start, job, stop
N_TASKS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n_chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n_chars:]
    except OSError:
        return "(missing)"


class Slurm:
    """A running single-node SLURM of its own (own directory and ports), with a time budget."""

    def __init__(self):
        self.deadline = time.monotonic() + BUDGET_S
        # Short path (slurmd puts unix sockets in its spool) and own ports, so a SLURM someone
        # already runs from the default directory is neither reused nor stopped by this test.
        self.dir = Path(tempfile.mkdtemp(prefix="ingest-slurm-"))
        # Nothing from a surrounding allocation or a user's SLURM_MPI_TYPE may steer this job.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env.update(INGEST_SLURM_DIR=str(self.dir), SLURM_CONF=str(self.dir / "etc" / "slurm.conf"),
                        INGEST_SLURM_CTLD_PORT=str(_free_port()), INGEST_SLURM_SLURMD_PORT=str(_free_port()))

    def run(self, cmd, what, env=None, budget_s=None):
        left_s = self.deadline - time.monotonic() if budget_s is None else budget_s
        if left_s <= 0:
            pytest.fail(f"SLURM check over its {BUDGET_S} s budget before {what}")
        try:
            return subprocess.run(cmd, env=env or self.env, capture_output=True, text=True, timeout=left_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{what} did not finish within its budget\nslurmctld log:\n"
                        f"{_tail(self.dir / 'log' / 'slurmctld.log')}")

    def logs(self) -> str:
        return (f"slurmctld log:\n{_tail(self.dir / 'log' / 'slurmctld.log')}\n"
                f"slurmd log:\n{_tail(self.dir / 'log' / 'slurmd.log')}")


@pytest.fixture(scope="module")
def slurm():
    """Start SLURM once for this module's jobs; stop it (and check it stopped) at the end."""
    cluster = Slurm()
    try:
        t0 = time.monotonic()
        started = cluster.run(["bash", str(SCRIPT), "start"], "scripts/slurm-local.sh start")
        assert started.returncode == 0, f"slurm-local.sh start failed:\n{started.stderr}"
        print(f"slurm start {time.monotonic() - t0:.1f} s")
        yield cluster
    finally:
        stopped = subprocess.run(["bash", str(SCRIPT), "stop"], env=cluster.env, capture_output=True, text=True,
                                 timeout=60)
        shutil.rmtree(cluster.dir, ignore_errors=True)
    assert stopped.returncode == 0, f"slurm-local.sh stop failed:\n{stopped.stderr}"


@pytest.mark.slurm
def test_srun_gives_one_world_of_n_tasks(slurm):
    out_file = slurm.dir / "job.out"
    job = slurm.dir / "world.sbatch"
    job.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --ntasks={N_TASKS}\n"
        f"#SBATCH --output={out_file}\n"
        "#SBATCH --time=2\n"
        f"srun -n {N_TASKS} {sys.executable} -c "
        "\"from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.rank, c.size, flush=True)\"\n"
    )
    # A step directory a killed earlier cluster left in /tmp (job ids restart at 1 in every
    # cluster) must not stop this job's first step: the cluster keeps PMIx's in its own dir.
    stale = Path(tempfile.gettempdir()) / f"spmix_appdir_{os.getuid()}_1.0"
    planted = not stale.exists()
    stale.mkdir(exist_ok=True)
    t0 = time.monotonic()
    try:
        submitted = slurm.run(["sbatch", "--wait", "--parsable", str(job)], "sbatch --wait")
    finally:
        if planted:
            shutil.rmtree(stale, ignore_errors=True)
    output = _tail(out_file)
    assert submitted.returncode == 0, (
        f"job failed (sbatch rc {submitted.returncode}): {submitted.stderr}\njob output:\n{output}\n{slurm.logs()}")
    lines = sorted(line.split() for line in output.splitlines() if line.strip())
    # N separate singletons would print "0 1" N times: ranks AND size must both be right.
    assert lines == [[str(r), str(N_TASKS)] for r in range(N_TASKS)], f"job output:\n{output}"
    print(f"job {time.monotonic() - t0:.1f} s")


@pytest.mark.slurm
def test_prestage_sofia_sbatch_hands_every_region_to_sofia(slurm, s3_server, tmp_path):
    """jobs/prestage-sofia.sbatch as a user submits it: srun prestage of a cube and its weights
    from S3, then one `sofia` step per parameter file (the checker stands in for SoFiA-2)."""
    from tests.pipeline_fixtures import assert_every_region_checked, pipeline_inputs

    out_dir = tmp_path / "run"
    env = {**slurm.env, **s3_server.env(), **pipeline_inputs(s3_server, tmp_path), "OUT_DIR": str(out_dir),
           "PYTHONPATH": str(REPO)}
    out_file = tmp_path / "job.out"
    submitted = slurm.run(["sbatch", "--wait", "--ntasks", str(N_TASKS), "--output", str(out_file),
                           str(REPO / "jobs" / "prestage-sofia.sbatch")], "sbatch prestage-sofia", env=env,
                          budget_s=180)
    output = _tail(out_file, 6000)
    assert submitted.returncode == 0, f"job failed: {submitted.stderr}\njob output:\n{output}\n{slurm.logs()}"
    assert_every_region_checked(out_dir)
    assert output.count("sofia_checker: OK") == 12, output
    assert "regions: 12 (12 read)" in output


@pytest.mark.slurm
def test_study_sbatch_runs_the_local_study_as_srun_steps(slurm, tmp_path):
    """jobs/study.sbatch with configs/study-local.toml (one round): the study (its own local S3
    server and cube) runs every cell as an srun step of the one allocation and ends with STUDY.md."""
    from ingest.study import db
    from ingest.study.config import load_config
    from ingest.study.matrix import build_cells, default_boxes, schedule
    from ingest.study.setting import staging_tools

    # The shipped config's processes and threads (the cells every figure is drawn from), once
    # through: the test is of the batch script running the study's cells as srun steps, which
    # these 16 cells show; the other experiments' rows are checked under mpiexec in test_study_run.
    shipped = (REPO / "configs" / "study-local.toml").read_text()
    once = re.sub(r"(?m)^repeats = 2\b", "repeats = 1", shipped).split("[strategies]")[0]
    assert "repeats = 1" in once and "[threads]" in once, "configs/study-local.toml changed: update this test"
    config, out = tmp_path / "study-local-once.toml", tmp_path / "study"
    config.write_text(once)
    env = {**slurm.env, "STUDY_CONFIG": str(config), "STUDY_OUT": str(out), "PYTHONPATH": str(REPO)}
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}  # the study starts its own store
    out_file = tmp_path / "job.out"
    submitted = slurm.run(["sbatch", "--wait", "--ntasks", str(N_TASKS), "--nodes", "1", "--ntasks-per-node", str(N_TASKS),
                           "--chdir", str(REPO),
                           "--time", "15", "--output", str(out_file), str(REPO / "jobs" / "study.sbatch")],
                          "sbatch study", env=env, budget_s=900)
    output = _tail(out_file, 6000)
    # the study exits non-zero when a cell failed: name the cells and their stderr first
    rows, meta = db.load(str(out / db.DB_NAME)) if (out / db.DB_NAME).exists() else ([], {})
    failed = [(r["cell"], r["repeat"], r["exit_status"], r["stderr_head"]) for r in rows if r["status"] != "ok"]
    assert submitted.returncode == 0, (f"job failed: {submitted.stderr}\nfailed cells: {failed}\n"
                                       f"job output:\n{output}\n{slurm.logs()}")
    cfg = load_config(str(config))
    cells = build_cells(cfg, grid="x", boxes=default_boxes(cfg), stage_tools=staging_tools(["auto"]))
    assert {(r["cell"], r["repeat"]) for r in rows} == {(c.name, rep) for _, c, rep in schedule(cells)}
    assert all(r["status"] == "ok" for r in rows), [(r["cell"], r["stderr_head"]) for r in rows if r["status"] != "ok"]
    assert meta["launcher"].startswith("srun")
    assert {r["experiment"] for r in rows} == {"processes", "threads"}
    assert all(r["command"].startswith("srun --ntasks=") for r in rows)
    assert {r["ranks"] for r in rows} == {1, 2, 4}
    study_md = (out / "STUDY.md").read_text()
    recommendation = study_md.split("## Recommendation", 1)[1].split("\n## ", 1)[0]
    assert "presigned" in recommendation or "S3 API" in recommendation
    figures = sorted((out / "figures").glob("*.png"))
    assert len(figures) == 5 and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)
