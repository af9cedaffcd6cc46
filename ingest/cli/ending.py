"""How a command's process ends: at once, when nothing it holds can be lost.

Tearing down an interpreter that loaded numpy, astropy and botocore frees every module's objects
one by one, and a lone process's MPI finalizes through its daemon: a visible share of a short job,
on every rank (BENCHMARKS, "A lone process's MPI, and a process that ends at once"). Once a
command has returned none of that is needed: the exit handlers run, MPI is finalized, stdout and
stderr are flushed, and the process ends with os._exit.

Teardown is also what closes a file object nobody closed (and writes out its buffer). So the
process ends at once only when it holds no regular file open for writing (beside stdout and
stderr, flushed first, and files already deleted) and runs no thread that is not a daemon;
otherwise, or where /proc cannot tell which files are open (not Linux), it exits the ordinary way.
"""
from __future__ import annotations

import atexit
import os
import stat
import sys
import threading

_WRITING = os.O_WRONLY | os.O_RDWR
_FLUSHED = ("1", "2")  # stdout and stderr: their Python buffers are flushed before the check
_UNLINKED = " (deleted)"  # how /proc names a file already removed


def end_process(code: int):
    """Exit with `code`: at once where safe (see the module docstring), else through sys.exit."""
    atexit._run_exitfuncs()  # logging's shutdown, thread pools' joins: what an ordinary exit runs first
    if "mpi4py.MPI" in sys.modules:
        from ingest.driver.mpi import finalize

        finalize()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # closed or replaced: nothing of ours is buffered in it
    if writing_files() == [] and not running_threads():
        os._exit(code)
    sys.exit(code)


def running_threads() -> list[str]:
    """Names of the live threads an ordinary exit would wait for (not daemons, not this one)."""
    return [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]


def writing_files(proc_fd: str = "/proc/self/fd") -> list[str] | None:
    """Paths of the regular files this process holds open for writing; None where /proc cannot tell."""
    try:
        fds = os.listdir(proc_fd)
    except OSError:
        return None
    found = []
    for fd in fds:
        if fd in _FLUSHED:
            continue
        try:
            if not stat.S_ISREG(os.fstat(int(fd)).st_mode):
                continue  # pipes, sockets, devices: nothing a file object buffers for later
        except (OSError, ValueError):
            continue  # closed since the listing (the listing's own descriptor)
        try:
            with open(os.path.join(os.path.dirname(proc_fd), "fdinfo", fd)) as fh:
                flags = next(int(line.split()[1], 8) for line in fh if line.startswith("flags:"))
        except (OSError, ValueError, StopIteration):
            flags = _WRITING  # cannot tell: counted as writing, so the exit is the ordinary one
        if flags & _WRITING:
            try:
                path = os.readlink(os.path.join(proc_fd, fd))
            except OSError:
                path = f"descriptor {fd}"
            if not path.endswith(_UNLINKED):  # e.g. Open MPI's shared memory: nobody can read it
                found.append(path)
    return found
