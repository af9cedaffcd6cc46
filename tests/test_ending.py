"""How a command's process starts MPI alone and how it ends (ingest.driver.mpi.world, ingest.cli.ending).

A process ends at once only when nothing it holds can be lost: these tests hold a buffered file,
a working thread and an exit handler across the end and find every byte, the thread's work and
the exit code; and a lone process's MPI starts without the daemon and fabric probes, leaving the
environment as it found it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ingest.cli.ending import running_threads, writing_files
from ingest.driver import mpi
from tests.mpitools import ROOT, child_env

LAUNCHED = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_SIZE", "PMIX_RANK",
            "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_NTASKS")


def _lone_env() -> dict:
    """This suite's child environment, as a process no launcher started sees it."""
    env = child_env()
    for name in (*LAUNCHED, *mpi.LONE_PROCESS_MPI_DEFAULTS):
        env.pop(name, None)
    return env


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env or _lone_env(), capture_output=True,
                          text=True, timeout=120)


def test_a_file_left_open_for_writing_keeps_every_byte_and_the_exit_code(tmp_path):
    path = tmp_path / "left-open.txt"
    done = _python(f"""
from ingest.cli.ending import end_process
fh = open({str(path)!r}, "w")
fh.write("x" * 1000)  # buffered: only teardown (closing fh) writes it
end_process(3)
""")
    assert done.returncode == 3, done.stderr
    assert path.read_text() == "x" * 1000


def test_a_process_with_nothing_to_lose_runs_its_exit_handlers_and_skips_teardown(tmp_path):
    done = _python("""
import atexit, sys
from mpi4py import MPI
from ingest.cli.ending import end_process

class Torn:
    def __del__(self):
        sys.stderr.write("torn down\\n")

kept = Torn()  # freed by the interpreter's teardown, and only by it
atexit.register(lambda: print("exit handler ran"))
print("buffered line")  # stdout is a pipe: held in its buffer until flushed
end_process(0)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["buffered line", "exit handler ran"]
    assert "torn down" not in done.stderr


def test_a_thread_still_working_is_waited_for(tmp_path):
    path = tmp_path / "from-thread.txt"
    done = _python(f"""
import threading, time
from ingest.cli.ending import end_process, running_threads

def work():
    time.sleep(0.5)
    with open({str(path)!r}, "w") as fh:
        fh.write("done")

threading.Thread(target=work, name="worker").start()
assert running_threads() == ["worker"]
end_process(0)
""")
    assert done.returncode == 0, done.stderr
    assert path.read_text() == "done"


def test_writing_files_names_files_open_for_writing_and_no_other(tmp_path):
    (tmp_path / "read.txt").write_text("r")
    gone = open(tmp_path / "gone.txt", "w")
    os.unlink(tmp_path / "gone.txt")
    with open(tmp_path / "read.txt") as reading, open(tmp_path / "write.txt", "w") as writing, \
            open(tmp_path / "both.txt", "w+") as both:
        found = writing_files()
    gone.close()
    assert found is not None
    mine = sorted(os.path.basename(p) for p in found if p.startswith(str(tmp_path)))
    assert mine == ["both.txt", "write.txt"], (reading, writing, both)
    assert writing_files(str(tmp_path / "no-proc")) is None  # cannot tell: the ordinary exit
    assert "MainThread" not in running_threads()


@pytest.mark.parametrize("launched", [None, "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"])
def test_a_lone_process_starts_mpi_isolated_and_leaves_the_environment_as_it_was(launched):
    environ = {"HOME": "/home/user", "OMPI_MCA_pml": "ucx"}  # the user's own choice is kept
    if launched:
        environ[launched] = "4"
    before = dict(environ)
    with mpi._lone_process_defaults(environ):
        during = dict(environ)
    assert environ == before
    expected = dict(before)
    if launched is None:
        expected["OMPI_MCA_ess_singleton_isolated"] = "1"
    assert during == expected


def test_a_lone_command_world_is_one_rank_and_its_children_inherit_no_mpi_setting():
    done = _python("""
import json, os
from ingest.driver.mpi import world
comm = world()
print(json.dumps({"size": comm.Get_size(), "left": sorted(k for k in os.environ if k.startswith("OMPI_MCA_"))}))
""")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"size": 1, "left": []}


def test_no_commands_module_starts_mpi_before_world_does():
    """world() sets the lone process's defaults as MPI starts: a command's module that imported
    mpi4py.MPI itself (a driver module importing it at the top) would start it first, without them."""
    done = _python("""
import json, sys
from ingest.cli.main import COMMANDS, build_parser
for name in COMMANDS:
    build_parser(name)
print(json.dumps("mpi4py.MPI" in sys.modules))
""")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) is False
