"""Rank 0's own work (planning, gathering, the report) is in every run's and prestage's report,
with what grows with the ranks: real `mpiexec` jobs against the local S3 server."""
from __future__ import annotations

import json
import time
import uuid

import pytest

from ingest.driver.mpi import root_step
from ingest.driver.quiet import QUIET_POLL_MAX_S, QUIET_POLL_MIN_S, quiet_barrier, quiet_poll_s, quiet_wait
from ingest.driver.rootwork import ledger, preload, start_ledger
from ingest.testbed.synth import write_cube
from tests.mpitools import check_root_ledger, child_env, mpiexec

SHAPE = (16, 64, 64)  # float32: 256 KiB


@pytest.fixture(scope="module")
def cube(s3_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("rootwork") / "cube.fits"
    write_cube(path, SHAPE, -32)
    bucket = s3_server.make_bucket(f"rootwork-{uuid.uuid4().hex[:8]}")
    s3_server.client().upload_file(str(path), bucket, "cube.fits")
    return f"s3://{bucket}/cube.fits"


def _root(s3_server, ranks: int, args: list, report_path) -> dict:
    proc, _ = mpiexec(ranks, [*args, "--report", report_path, "--no-probe", "--no-progress"], child_env(s3_server))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert report["root"]["measuring_s"] == 0.0  # --no-probe
    return check_root_ledger(report["root"], report["aggregate"]["makespan_s"], gathers=2)


def test_run_reports_rank_0s_steps_gathers_and_bytes_gathered_growing_with_ranks(s3_server, cube, tmp_path):
    two = _root(s3_server, 2, ["run", "--source", cube, "--grid", "auto"], tmp_path / "two.json")
    four = _root(s3_server, 4, ["run", "--source", cube, "--grid", "auto"], tmp_path / "four.json")
    for root in (two, four):
        assert root["steps_s"] > 0  # at least the job's preparation; 2 gathers: the ranks' records and regions
    # Every rank's record and regions come to rank 0: twice the ranks, more bytes.
    assert four["bytes_gathered"] > two["bytes_gathered"] > 0


def test_prestage_reports_rank_0s_own_work(s3_server, cube, tmp_path):
    root = _root(s3_server, 2, ["prestage", "--source", cube, "--output-dir", tmp_path / "staged"],
                 tmp_path / "prestage.json")
    # prepare, the stage, its files, their completion: four steps; the regions and the ranks gathered
    assert root["steps"] >= 4


class _LateOthers:
    """Rank 0 of two, whose other rank arrives at the step's first collective `late_s` after rank 0
    does: a collective's request (Ibarrier, Ibcast) is done from then on."""

    def __init__(self, late_s: float):
        self.late_s = late_s
        self.arrives = None
        self.looks = 0

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2

    def Ibarrier(self):
        if self.arrives is None:
            self.arrives = time.perf_counter() + self.late_s

        def test(_self):
            self.looks += 1
            return time.perf_counter() >= self.arrives

        return type("Request", (), {"Test": test})()

    def Ibcast(self, buffer, root=0):
        return self.Ibarrier()  # the root's own buffer is already what it sends


def test_a_step_charges_rank_0_its_work_not_its_wait_for_late_ranks():
    # Where 64 ranks start on 2 cores, rank 0 plans long before the last rank has imported
    # Python: that wait is the others' start-up, kept apart from rank 0's own work.
    start_ledger()
    def plan():
        time.sleep(0.05)
        return "planned"

    t0 = time.perf_counter()
    assert root_step(_LateOthers(late_s=0.3), plan) == "planned"
    elapsed_s = time.perf_counter() - t0
    root = ledger().as_dict(makespan_s=1.0)
    assert root["steps"] == 1
    assert root["waiting_s"] >= 0.3
    # Its work is the plan (at least its sleep), and work and wait are parts of the step, not both the wait.
    assert root["steps_s"] >= 0.05 and root["steps_s"] + root["waiting_s"] <= elapsed_s
    assert root["own_s"] == root["steps_s"]
    assert root["steps_cpu_s"] < root["steps_s"]  # a sleep costs no CPU
    assert root["by_step"] == {"plan": {"calls": 1, "s": root["steps_s"], "cpu_s": root["steps_cpu_s"]}}


def test_rank_0s_imports_are_start_up_kept_apart_from_its_own_work():
    # astropy's import is about a second of rank 0's prepare at any rank count: start-up, as every
    # rank's imports are, so the ledger shows it as starting_s and leaves it out of own_s.
    start_ledger()
    preload(1, ("ingest.sky.regions",))  # another rank: imports, charges nothing
    assert ledger().as_dict(makespan_s=1.0)["starting_s"] == 0.0
    preload(0, ("ingest.sky.pixels", "ingest.sky.sources"))
    root = ledger().as_dict(makespan_s=1.0)
    assert root["starting_s"] > 0.0 and root["starting_cpu_s"] >= 0.0
    assert root["steps"] == 0 and root["own_s"] == 0.0 and root["own_cpu_s"] == 0.0


def test_a_waiting_rank_looks_less_often_the_longer_it_waits():
    # 63 ranks waiting on 2 cores for rank 0 looked 2,000 times a second each at a fixed 0.5 ms,
    # and their MPI_Tests took the cores rank 0 needed. The sleep grows with the wait (10 %),
    # between 0.5 ms and 20 ms: a short barrier stays short, a long wait costs little.
    assert quiet_poll_s(0.0) == QUIET_POLL_MIN_S
    assert quiet_poll_s(0.05) == pytest.approx(0.005)
    assert quiet_poll_s(60.0) == QUIET_POLL_MAX_S
    comm = _LateOthers(late_s=0.5)
    t0 = time.perf_counter()
    quiet_barrier(comm)
    assert time.perf_counter() - t0 >= 0.5
    # 10 looks to 5 ms, ~39 while the sleep grows 10 % a look to 20 ms, 15 after: ~64 (a loaded
    # machine oversleeps, so looks fewer); at a fixed 0.5 ms it was up to 1,000.
    assert comm.looks <= 100, comm.looks


def test_a_transfer_wait_spins_first_then_backs_off_to_its_own_cap():
    # publish's exchange waits on transfers that move only while polled: it looks back to back
    # first, then sleeps no more than its cap (2 ms), where a status wait sleeps up to 20 ms.
    from ingest.driver.publish.rounds import TRANSFER_POLL_MAX_S

    assert quiet_poll_s(60.0, TRANSFER_POLL_MAX_S) == TRANSFER_POLL_MAX_S < QUIET_POLL_MAX_S
    ready_at = {"looks": 0}

    def test():
        ready_at["looks"] += 1
        return ready_at["looks"] > 50

    from ingest.driver import quiet

    sleeps, real_sleep = [], quiet.time.sleep
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quiet.time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
        quiet_wait(test, spins=50)
    assert ready_at["looks"] == 51 and sleeps == []  # 50 spins, no sleep
    comm = _LateOthers(late_s=0.3)
    t_request = time.perf_counter()
    request = comm.Ibarrier()
    waited_s = quiet_wait(request.Test, spins=10, max_sleep_s=TRANSFER_POLL_MAX_S)
    # Not back before the request was done; and what it says it waited is that wait, counted from
    # its own start a moment after the request was made (0.29989 s was seen once under load).
    assert time.perf_counter() - t_request >= 0.3 and 0.25 <= waited_s <= time.perf_counter() - t_request
    # 10 spins, ~8 looks to 2 ms, then one every 2 ms: ~160 in 0.3 s (fewer on a loaded machine).
    assert 10 < comm.looks <= 200, comm.looks


_LATE_RANK = """
import json, sys, time
from mpi4py import MPI
from ingest.driver.mpi import root_step
from ingest.driver.rootwork import ledger, start_ledger

late_s = float(sys.argv[1])
comm = MPI.COMM_WORLD
start_ledger()
comm.Barrier()
if comm.Get_rank() == 1:
    time.sleep(late_s)  # rank 1 comes to the step's collective late_s after rank 0

def plan():
    time.sleep(0.05)
    return "x" * (8 << 20)  # a plan too large to be sent before its receiver is there

t0 = time.perf_counter()
got = root_step(comm, plan)
elapsed_s = time.perf_counter() - t0
if comm.Get_rank() == 0:
    print(json.dumps({"got": len(got), "elapsed_s": elapsed_s, "root": ledger().as_dict(makespan_s=elapsed_s)}),
          flush=True)
"""


def test_a_real_job_charges_rank_0_its_step_not_the_late_ranks_start():
    # Real mpiexec, real collectives: rank 1 of 2 is made 2 s late by a sleep. Rank 0's step is
    # the plan (a 0.05 s sleep, 8 MiB to broadcast); the 2 s go to waiting_s, not to its own work.
    late_s = 2.0
    proc, _ = mpiexec(2, [_LATE_RANK, str(late_s)], child_env(), python_args=("-c",))
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    out = json.loads(line)
    root = out["root"]
    assert out["got"] == 8 << 20 and root["steps"] == 1 and list(root["by_step"]) == ["plan"]
    assert root["waiting_s"] >= 0.75 * late_s  # most of the injected delay, whatever the load
    assert 0.05 <= root["steps_s"] < root["waiting_s"] and root["own_s"] == root["steps_s"]
    assert root["steps_s"] + root["waiting_s"] <= out["elapsed_s"]


_HANDOUT = """
import json
from mpi4py import MPI
from ingest.driver.mpi import Handout, root_step

comm = MPI.COMM_WORLD
def step():
    return Handout({"cube": "c"}, [[f"row{r}"] * (r + 1) for r in range(comm.Get_size())], {"rows": "all"})
shared, mine, root_only = root_step(comm, step)
# one line from rank 0: ranks printing at once can share a line of mpiexec's output
got = comm.gather([comm.Get_rank(), shared, mine, root_only], root=0)
if comm.Get_rank() == 0:
    print(json.dumps(got), flush=True)
"""


def test_a_handout_gives_each_rank_its_own_part_and_keeps_the_rest_on_rank_0():
    # A catalogue's 10,000 sources broadcast whole sat in every rank's memory: each rank gets only
    # its own part, the shared part goes to all, and rank 0 alone keeps what only it writes.
    proc, _ = mpiexec(3, [_HANDOUT], child_env(), python_args=("-c",))
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert json.loads(line) == [[0, {"cube": "c"}, ["row0"], {"rows": "all"}],
                   [1, {"cube": "c"}, ["row1", "row1"], None],
                   [2, {"cube": "c"}, ["row2", "row2", "row2"], None]]
