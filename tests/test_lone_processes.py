"""Lone processes started together on one node never collide in MPI's start (ingest.driver.mpi:
_own_session_dir).

A pipeline starts many lone steps at once on a node, beside jobs under mpiexec. Open MPI 4 gives
every isolated singleton the same session directory, and one that finalizes removes it while
another creates it: that one dies in MPI_Init ("A call to mkdir was unable to create the desired
directory"). Here 120 lone processes start MPI as a command does (world(), then cli.ending's
end) while 4 `mpiexec -n 2` jobs run `ingest run` among them; every one must exit 0, and no
lone process may leave its session directory behind; one killed outright leaves it to the next.

Why 120 bare starts rather than whole commands: the race needs one process finalizing while
another creates its directories, so starts and ends must be dense. A whole `ingest run` spends
0.4 s of CPU importing before MPI starts, which spreads 64 of them over seconds on 2 cores and
the race was not hit; 120 bare starts (0.1 s of CPU each) lost several processes to it in every
storm tried without the fix, and take seconds. A barrier that starts every process's MPI at
once hits it less, not more: all start, then all end. The children's TMPDIR is the test's own,
so the Open MPI trees they share are theirs alone, not other jobs'.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ingest.driver.mpi import SESSION_DIR_PREFIX
from ingest.testbed.synth import write_cube
from tests.mpitools import ROOT, child_env, family_env, launcher

pytestmark = pytest.mark.timeout(300)

N_LONE = 120
N_JOBS = 4  # mpiexec -n 2 each
RANKS_PER_JOB = 2
DEADLINE_S = 180  # the whole storm, on 2 cores shared with other work

# A lone step's MPI as `python -m ingest` has it: world() starts it, cli.ending ends the process.
LONE = """
from ingest.cli.ending import end_process
from ingest.driver.mpi import world
world()
end_process(0)
"""


def _start(cmd, env, log_path):
    with open(log_path, "w") as log:  # a file, not a pipe: no child blocks on a full pipe
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def test_lone_processes_started_together_beside_mpiexec_jobs_all_succeed_and_leave_no_session_dir(tmp_path):
    source = tmp_path / "tiny.fits"
    write_cube(source, (4, 8, 8))
    scratch, logs = tmp_path / "tmp", tmp_path / "logs"
    for directory in (scratch, logs):
        directory.mkdir()
    env = child_env(TMPDIR=str(scratch))
    job = [*launcher(RANKS_PER_JOB), sys.executable, "-m", "ingest", "run", "--source", str(source), "--no-progress"]

    started = {}
    job_every = N_LONE // N_JOBS
    for i in range(N_LONE):
        if i % job_every == 0:  # the jobs start among the lone processes, not before or after them
            name = f"mpiexec-{i // job_every}"
            started[name] = _start(job, family_env(env), logs / name)
        name = f"lone-{i}"
        started[name] = _start([sys.executable, "-c", LONE], env, logs / name)

    deadline = time.monotonic() + DEADLINE_S
    failed = {}
    try:
        for name, proc in started.items():
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if code != 0:
                failed[name] = (code, (logs / name).read_text()[-1500:])
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not failed, f"{len(failed)} of {len(started)} failed: {sorted(failed)}; first: {next(iter(failed.values()))}"
    assert [p for p in os.listdir(scratch) if p.startswith(SESSION_DIR_PREFIX)] == []


def test_a_lone_process_keeps_the_users_session_dir_base_and_starts_in_a_directory_of_its_own_under_it(tmp_path):
    """A site's per-job orte_tmpdir_base is where the tree goes, but lone steps of one job would
    still share it: each makes its own directory inside, gone when it ends, and leaves the user's
    value as it was for what it starts next."""
    base = tmp_path / "site-tmp"
    base.mkdir()
    probe = """
import json, os
from ingest.cli.ending import end_process
from ingest.driver.mpi import world
world()
base = os.environ["OMPI_MCA_orte_tmpdir_base"]
print(json.dumps({"base": base, "mine": [(d, os.listdir(os.path.join(base, d))) for d in os.listdir(base)]}))
end_process(0)
"""
    env = child_env(OMPI_MCA_orte_tmpdir_base=str(base), TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["base"] == str(base)
    [(mine, inside)] = seen["mine"]
    assert mine.startswith(SESSION_DIR_PREFIX) and [d for d in inside if d.startswith("ompi.")], seen
    assert os.listdir(base) == []


def test_a_lone_process_killed_outright_leaves_a_directory_the_next_one_removes_and_a_live_ones_is_kept(tmp_path):
    """SIGKILL runs no exit handler, so the killed process's session directory stays; the next lone
    process removes it (its lock is free) and keeps the one a live process holds."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = child_env(TMPDIR=str(scratch))
    holder = """
import sys
from ingest.driver.mpi import world
world()
print("up", flush=True)
sys.stdin.read()
"""

    def start_holder():
        proc = subprocess.Popen([sys.executable, "-c", holder], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "up"
        return proc

    def session_dirs():
        return sorted(d for d in os.listdir(scratch) if d.startswith(SESSION_DIR_PREFIX))

    killed = start_holder()
    [killed_dir] = session_dirs()
    live = start_holder()
    try:
        [live_dir] = [d for d in session_dirs() if d != killed_dir]
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert session_dirs() == sorted([killed_dir, live_dir])  # the killed one's is left behind
        done = subprocess.run([sys.executable, "-c", LONE], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert session_dirs() == [live_dir]
    finally:
        live.stdin.close()
        live.wait(timeout=60)
        killed.stdout.close()
        live.stdout.close()
    assert session_dirs() == []  # the live one, ended, removed its own
