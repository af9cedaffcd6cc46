"""MPI plumbing for the driver: the world, launcher sanity checks, root-only steps, abort.

mpi4py is imported only here and in the driver, and only when a command that needs it runs,
so `import ingest` and the single-process API never start MPI.
"""
from __future__ import annotations

import atexit
import fcntl
import glob
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

from ingest.core.sharing import Topology
from ingest.driver.quiet import quiet_allgather, quiet_bcast, quiet_scatter
from ingest.driver.rootwork import Clock, note_step
from ingest.errors import IngestError

# Launchers export the task count they started; a world smaller than that means mpi4py was not
# wired to the launcher (srun --mpi=none, a PMIx mismatch, mpi4py on Open MPI under MPICH's
# hydra) and every task is a size-1 world. The MPI launchers' own counts come first: Open MPI's
# mpirun (OMPI_COMM_WORLD_SIZE), MPICH's hydra mpiexec and srun --mpi=pmi2 (PMI_SIZE), PMIx
# (PMIX_SIZE). Under SLURM, mpirun and hydra start their per-node daemons with srun, one task per
# node, so the SLURM_STEP_NUM_TASKS a rank inherits from them counts nodes, not ranks.
_LAUNCHER_COUNTS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")


class RootStepFailed(IngestError):
    """Raised on every rank when a step run by rank 0 alone failed (rank 0 holds the message)."""


# A process no launcher started is a world of one (a singleton). Open MPI 4 then forks a daemon
# for it and its default PML probes the fabrics (PSM, PSM2, OFI) a lone process never uses; isolated
# on ob1 it starts and finalizes in a tenth of the time (BENCHMARKS, "A lone process's MPI"). Set
# only while MPI starts, and only where the user set nothing, so that an mpiexec this process
# launches later inherits the user's own environment.
LONE_PROCESS_MPI_DEFAULTS = {"OMPI_MCA_ess_singleton_isolated": "1", "OMPI_MCA_pml": "ob1"}
# Variables a launcher gives every task, beside the counts above (a rank's own number).
_LAUNCHER_RANKS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


# Open MPI 4 keeps a session directory per process in one tree per node and user,
# <orte_tmpdir_base>/ompi.<node>.<uid>/jf.<job family>/<job>/<rank>, and a process that finalizes
# removes every level it left empty. Another process creating its own levels at that moment finds
# a parent gone and dies in MPI_Init ("A call to mkdir was unable to create the desired
# directory"; open-mpi/ompi#8510). Isolated singletons are all job [0,1], so every lone process on
# a node creates and removes the same jf.0/1: started together (a pipeline's lone steps) they
# collide within seconds. A lone process therefore starts MPI in a tree of its own, a fresh
# directory under the user's orte_tmpdir_base (the system's temporary directory where they set
# none), removed at exit once it has finalized (or, killed outright, by the next lone process).
# Open MPI 5 names a singleton's directories by its own job and removes only those, and MPICH's
# singletons keep none: the variable means nothing to them.
SESSION_DIR_VARIABLE = "OMPI_MCA_orte_tmpdir_base"
SESSION_DIR_PREFIX = "ingest-mpi-"
# A process killed outright runs no exit handler, so each directory holds a file its process keeps
# locked (flock) for its whole life; the next lone process removes every directory whose lock it
# can take. A lock, not a pid: the kernel drops it however the process dies, and a pid seen from
# another pid namespace (a container sharing the directory) may look dead while it runs.
SESSION_OWNER_FILE = "owner.lock"
_session_locks: list[int] = []  # this process's own lock, held open until it exits


def world():
    """MPI.COMM_WORLD, after checking its size against what the launcher says it started."""
    with _lone_process_defaults(os.environ), _own_session_dir(os.environ):
        from mpi4py import MPI

    comm = MPI.COMM_WORLD
    check_world_size(comm.Get_size(), os.environ, library=MPI.Get_library_version().splitlines()[0].strip())
    return comm


def finalize() -> None:
    """MPI_Finalize, if MPI started and has not finished (a command's last step: cli.ending)."""
    from mpi4py import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()


def launcher_tasks(environ) -> tuple[str, int] | None:
    """(variable, count) of the first launcher task count found in `environ`, if any."""
    for name in _LAUNCHER_COUNTS:
        value = environ.get(name, "")
        if value.isdigit():
            return name, int(value)
    if environ.get("SLURM_STEP_ID") and environ.get("SLURM_NTASKS", "").isdigit():
        return "SLURM_NTASKS", int(environ["SLURM_NTASKS"])
    return None


@contextmanager
def _lone_process_defaults(environ):
    """LONE_PROCESS_MPI_DEFAULTS in `environ` while MPI starts, for a process no launcher started;
    what it added is taken out again afterwards."""
    added = [name for name in LONE_PROCESS_MPI_DEFAULTS if _alone(environ) and name not in environ]
    environ.update({name: LONE_PROCESS_MPI_DEFAULTS[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            environ.pop(name, None)


def _alone(environ) -> bool:
    """True for a process no launcher started (no task count, no rank number in `environ`)."""
    return launcher_tasks(environ) is None and not any(name in environ for name in _LAUNCHER_RANKS)


@contextmanager
def _own_session_dir(environ):
    """For a lone process, SESSION_DIR_VARIABLE names a fresh directory of its own while MPI starts
    (under the user's value, if any); the directory is removed at exit, after MPI_Finalize. Where
    it cannot be made, MPI starts where it would have."""
    base = environ.get(SESSION_DIR_VARIABLE) or None
    directory = None
    if _alone(environ) and "mpi4py.MPI" not in sys.modules:
        remove_abandoned_session_dirs(base or tempfile.gettempdir())
        try:
            directory = _held_session_dir(base)
        except OSError:
            directory = None
    if directory is not None:
        atexit.register(_remove_session_dir, directory, os.getpid())
        environ[SESSION_DIR_VARIABLE] = directory
    try:
        yield directory
    finally:
        if directory is not None:
            if base is None:
                environ.pop(SESSION_DIR_VARIABLE, None)
            else:
                environ[SESSION_DIR_VARIABLE] = base


def _held_session_dir(base: str | None) -> str:
    """A fresh session directory under base (the system's temporary directory if None), its
    SESSION_OWNER_FILE locked by this process before the file has its name, so no other process
    ever finds it unlocked while this one lives."""
    directory = tempfile.mkdtemp(prefix=SESSION_DIR_PREFIX, dir=base)
    fd = None
    try:
        fd = os.open(os.path.join(directory, SESSION_OWNER_FILE + ".new"),
                     os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(os.path.join(directory, SESSION_OWNER_FILE + ".new"), os.path.join(directory, SESSION_OWNER_FILE))
    except OSError:
        if fd is not None:
            os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)
        raise
    _session_locks.append(fd)
    return directory


def remove_abandoned_session_dirs(base: str) -> list[str]:
    """Remove the lone processes' session directories under base whose owner no longer holds its
    lock (it died without its exit handler); those removed. A directory still being made (no
    owner file yet) and one whose lock is held are left alone."""
    removed = []
    for directory in glob.glob(os.path.join(glob.escape(base), SESSION_DIR_PREFIX + "*")):
        try:
            fd = os.open(os.path.join(directory, SESSION_OWNER_FILE), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its process lives
        finally:
            os.close(fd)  # a lock taken is released here; the directory goes at once
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def _remove_session_dir(directory: str, owner_pid: int) -> None:
    """Exit handler: finalize MPI, then remove the lone process's session directory (not from a
    forked child, whose exit would pull it from under its parent)."""
    if os.getpid() != owner_pid:
        return
    if "mpi4py.MPI" in sys.modules:
        finalize()
    shutil.rmtree(directory, ignore_errors=True)


def check_world_size(size: int, environ, library: str | None = None) -> None:
    """Refuse to run N silent singleton worlds when the launcher started N tasks. `library`: the
    MPI library mpi4py loaded (its version string's first line), for the message."""
    found = launcher_tasks(environ)
    if found and found[1] != size:
        name, count = found
        uses = f" (it uses {library})" if library else ""
        raise IngestError(
            f"MPI world has {size} rank(s) but the launcher started {count} task(s) ({name}={count}): "
            f"mpi4py{uses} is not connected to the launcher, so every task would run alone. Under srun use "
            "--mpi=pmix (not --mpi=none) with an MPI that mpi4py was built against; under mpiexec, "
            "run the mpiexec of the MPI library mpi4py uses. mpi4py's PyPI wheel picks its MPI family "
            "at import: MPI4PY_MPIABI=mpich (MPICH, Cray MPICH, Intel MPI) or openmpi."
        )


def topology(comm) -> Topology:
    """Which node each rank runs on, by processor name (collective): which ranks share a node's
    link to the store; and which machine, by its boot id (nodes emulated in namespaces on one
    machine share its cores), with the CPUs each rank may run on."""
    hosts, machines = zip(*quiet_allgather(comm, placement()))  # ranks start seconds apart at scale
    return Topology.of_hosts(hosts, machines)


def placement() -> tuple[str, tuple[str, tuple[int, ...]]]:
    """Where this rank runs, as topology() gathers it: (its node's name, (its machine's boot id,
    the CPUs it may run on)); a caller that gathers something else too sends it beside this."""
    from mpi4py import MPI

    return MPI.Get_processor_name(), (_machine_id(), cpus())


def cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (a launcher's binding or a job's cgroup narrows them)."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def _machine_id() -> str:
    """This machine's boot id (the same in every network or UTS namespace), else its host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return socket.gethostname()


@dataclass(frozen=True)
class Handout:
    """A root step's result in three parts: `shared` goes to every rank, `per_rank[r]` to rank r
    alone, `root_only` stays on rank 0. A result that is mostly per-rank (a catalogue's sources)
    broadcast whole would sit in every rank's memory: n_ranks copies of what each needs 1/n of.
    What root_step returns for one on every rank: Handout(shared, the rank's part, root_only or None)."""

    shared: object
    per_rank: object
    root_only: object = None

    def __iter__(self):  # shared, per_rank, root_only = root_step(...)
        return iter((self.shared, self.per_rank, self.root_only))


def root_step(comm, fn, *args, **kwargs):
    """Run fn on rank 0 only and broadcast its result (a Handout: broadcast, scattered and kept);
    an IngestError there is raised on every rank (the others get RootStepFailed), so all ranks
    leave together instead of hanging."""
    result, error = None, None
    clock = Clock()
    if comm.Get_rank() == 0:
        try:
            result = fn(*args, **kwargs)
        except IngestError as exc:
            error = exc
    # The others wait for rank 0's step asleep (driver.quiet): a rank blocked in bcast spins a core
    # (Open MPI busy-polls), and where ranks outnumber cores (64 emulated ranks on 2 cores) they
    # took them from rank 0 itself, so the step it did for them took minutes instead of a second.
    # The error, if any, goes with the result: one collective, not two.
    waiting = Clock()
    root = comm.Get_rank() == 0
    head = Handout(result.shared, None) if root and isinstance(result, Handout) else result
    error_text, head = quiet_bcast(comm, (None if error is None else str(error), head) if root else None)
    if error is not None:
        error.collective = True  # every rank knows: exit cleanly, no Abort needed
        error.from_root_step = True  # rank 0 did it for everyone: no rank number in the message
        raise error
    if error_text is not None:
        raise RootStepFailed(error_text)
    if isinstance(head, Handout):  # each rank its own part; the shared part went to all above
        head = Handout(head.shared, quiet_scatter(comm, result.per_rank if root else None),
                       result.root_only if root else None)
    waiting_s, waiting_cpu_s = waiting.elapsed()
    if root:
        wall_s, cpu_s = clock.elapsed()
        note_step(wall_s - waiting_s, cpu_s - waiting_cpu_s, waiting_s, getattr(fn, "__name__", "step"))
    return head


def all_agree_or_raise(comm, error: BaseException | None) -> None:
    """Collective: if any rank failed, raise on every rank (naming the first failed rank). Ranks
    wait for the last one asleep (driver.quiet)."""
    messages = quiet_allgather(comm, None if error is None else f"{type(error).__name__}: {error}")
    failed = [(r, m) for r, m in enumerate(messages) if m is not None]
    if not failed:
        return
    if error is not None:
        error.collective = True
        raise error
    rank, message = failed[0]
    raise RootStepFailed(f"rank {rank} failed: {message}")


def run_or_abort(comm, fn, *args) -> int:
    """CLI wrapper: run fn(comm, *args); on an error print it with the rank and end the whole job.

    An IngestError that every rank raised together (a bad config, a bad header) exits 1
    cleanly. Anything else on one rank calls MPI Abort, which ends every rank at once, so a
    failure never leaves the others waiting in a collective (the `python -m mpi4py` rule).
    """
    rank = comm.Get_rank()
    try:
        return int(fn(comm, *args) or 0)
    except RootStepFailed:
        return 1  # rank 0 has printed the reason
    except IngestError as exc:
        if getattr(exc, "collective", False) or comm.Get_size() == 1:
            # A failure of this rank's own work names the rank; one rank 0 did for all does not.
            who = "" if comm.Get_size() == 1 or getattr(exc, "from_root_step", False) else f"rank {rank}: "
            print(f"ingest: {who}error: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"ingest: rank {rank}: error: {exc}", file=sys.stderr, flush=True)
        comm.Abort(1)
    except BaseException as exc:  # noqa: BLE001 - anything unexpected must still end the job
        print(f"ingest: rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        if comm.Get_size() == 1:
            return 1
        comm.Abort(1)
    return 1
