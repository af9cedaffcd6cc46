"""A real single-node SLURM (scripts/slurm-local.sh) runs a 4-task MPI job as ONE world of 4.

The failure this guards against is the classic one: srun without working PMIx starts N
separate size-1 worlds, and a job "succeeds" with every rank doing all the work alone. A
broken setup (packages, daemons, PMIx) FAILS here; it never skips.
"""
import os
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


@pytest.mark.slurm
def test_srun_gives_one_world_of_n_tasks():
    deadline = time.monotonic() + BUDGET_S
    # Short path (slurmd puts unix sockets in its spool) and own ports, so a SLURM someone
    # already runs from the default directory is neither reused nor stopped by this test.
    slurm_dir = Path(tempfile.mkdtemp(prefix="ingest-slurm-"))
    # Nothing from a surrounding allocation or a user's SLURM_MPI_TYPE may steer this job.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(INGEST_SLURM_DIR=str(slurm_dir), SLURM_CONF=str(slurm_dir / "etc" / "slurm.conf"),
               INGEST_SLURM_CTLD_PORT=str(_free_port()), INGEST_SLURM_SLURMD_PORT=str(_free_port()))
    out_file = slurm_dir / "job.out"
    job = slurm_dir / "world.sbatch"
    job.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --ntasks={N_TASKS}\n"
        f"#SBATCH --output={out_file}\n"
        "#SBATCH --time=2\n"
        f"srun -n {N_TASKS} {sys.executable} -c "
        "\"from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.rank, c.size, flush=True)\"\n"
    )

    def run(cmd, what):
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            pytest.fail(f"SLURM check over its {BUDGET_S} s budget before {what}")
        try:
            return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{what} did not finish within the {BUDGET_S} s budget\nslurmctld log:\n"
                        f"{_tail(slurm_dir / 'log' / 'slurmctld.log')}")

    try:
        t0 = time.monotonic()
        started = run(["bash", str(SCRIPT), "start"], "scripts/slurm-local.sh start")
        assert started.returncode == 0, f"slurm-local.sh start failed:\n{started.stderr}"
        start_s = time.monotonic() - t0
        t0 = time.monotonic()
        submitted = run(["sbatch", "--wait", "--parsable", str(job)], "sbatch --wait")
        job_s = time.monotonic() - t0
        output = _tail(out_file)
        assert submitted.returncode == 0, (
            f"job failed (sbatch rc {submitted.returncode}): {submitted.stderr}\njob output:\n{output}\n"
            f"slurmd log:\n{_tail(slurm_dir / 'log' / 'slurmd.log')}"
        )
        lines = sorted(line.split() for line in output.splitlines() if line.strip())
        # N separate singletons would print "0 1" N times: ranks AND size must both be right.
        assert lines == [[str(r), str(N_TASKS)] for r in range(N_TASKS)], f"job output:\n{output}"
        print(f"slurm start {start_s:.1f} s, job {job_s:.1f} s")
    finally:
        stopped = subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=60)
        shutil.rmtree(slurm_dir, ignore_errors=True)
    assert stopped.returncode == 0, f"slurm-local.sh stop failed:\n{stopped.stderr}"
