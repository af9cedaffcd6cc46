"""Rank 0's progress bar for a cut-out job, and how the job stops at SIGINT or SIGTERM.

Progress: sources done of the job's total, and bytes, from every rank. The other ranks tell rank 0
of each group of cut-outs they finish by non-blocking sends (and that they are done); rank 0 counts
them between its own groups and, at the end, until every rank has said it is done, so no message
is left unreceived.

Stopping: a signal ends the job where it stands (a read, a collective, the catalogue), except while
a cut-out is written or a group of them changes hands (`Stop.held`): there it waits until that
stretch ends, so every file is whole under its final name and journalled, or gone. A rank lets the
group in flight finish publishing and journals it; the cut-outs not yet handed over (at most a
group's work, about cutout_rank.PUBLISH_AFTER_S) are removed. Rank 0 then says how many cut-outs
were kept. With several ranks it first waits (at most STOP_WAIT_S) until every other rank says it
has journalled its own, then ends them all with MPI Abort: a rank the signal did not reach may be
inside a collective that would never finish. Later signals wait for the first one's ending.
mpi4py is imported in the functions, so that the command line can take signals before MPI starts.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time

from ingest.config import RunConfig

_PROGRESS_TAG = 4401
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_WAIT_S = 10.0  # how long rank 0 waits for the other ranks' last groups before it ends them all
_STOP_POLL_S = 0.02


class Interrupted(BaseException):
    """SIGINT or SIGTERM stopped the job; the process exits with 128 + the signal's number (130, 143).
    A BaseException, as KeyboardInterrupt is: no `except Exception` on the way out may swallow it."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Stop:
    """The process's one stop request (signal handlers are process-wide): the first SIGINT or
    SIGTERM raises Interrupted in the main thread, at once or, inside `held`, as the held stretch
    ends; later ones are ignored. `progress` and `reporter` are this process's Progress or
    Reporter, which the ending reads."""

    def __init__(self):
        self.signum: int | None = None
        self.progress = self.reporter = None
        self._depth = 0
        self._due = False
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        """A signal came: start nothing new."""
        return self.signum is not None

    def install(self) -> None:
        """Take SIGINT and SIGTERM (main thread only: Python runs handlers there alone)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous.setdefault(sig, signal.signal(sig, self._on_signal))

    def release(self) -> None:
        """Give SIGINT and SIGTERM back to the handlers they had before `install`."""
        for sig, handler in self._previous.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:
            return  # the first signal's ending is under way
        self.signum = signum
        if self._depth:
            self._due = True
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self):
        """Within the block a signal waits; Interrupted is raised as the outermost block ends (over
        the block's own error: the signal decides how the process ends). Outside the main thread
        nothing is held, as no handler runs there."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._due:
                self._due = False
                raise Interrupted(self.signum)


STOP = Stop()


class Reporter:
    """A rank other than 0: tells rank 0 of each finished group of cut-outs (non-blocking sends)."""

    def __init__(self, comm):
        self.comm, self.pending, self.closed = comm, [], False
        STOP.reporter = self

    def send(self, n_sources: int, nbytes: int) -> None:
        self.pending.append(self.comm.isend((n_sources, nbytes), dest=0, tag=_PROGRESS_TAG))

    def close(self) -> None:
        from mpi4py import MPI

        if not self.closed:
            self.closed = True
            self.pending.append(self.comm.isend(None, dest=0, tag=_PROGRESS_TAG))  # this rank is done
        MPI.Request.waitall(self.pending)


class Progress:
    """Rank 0's bar: sources done of the job's total, and bytes, from every rank."""

    def __init__(self, cfg: RunConfig, comm, total: int):
        self.comm, self.bar, self.finished = comm, None, 0
        self.total, self.done = total, 0  # cut-outs this run makes, and those finished (journalled)
        if cfg.progress and total and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="src", file=sys.stderr, desc="cutouts", leave=False)
        self.nbytes = 0
        STOP.progress = self

    def mine(self, n_sources: int, nbytes: int) -> None:
        self._add(n_sources, nbytes)
        self._poll()

    def _add(self, n_sources: int, nbytes: int) -> None:
        self.done += n_sources
        self.nbytes += nbytes
        if self.bar is not None:
            self.bar.update(n_sources)
            self.bar.set_postfix_str(f"{self.nbytes / 2**20:.1f} MiB")

    def _poll(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=_PROGRESS_TAG, status=status):
            message = self.comm.recv(source=status.Get_source(), tag=_PROGRESS_TAG)
            if message is None:
                self.finished += 1
            else:
                self._add(*message)

    def drain_until_done(self, size: int, wait_s: float | None = None) -> None:
        """Wait (quietly) until every other rank has said it is done, counting what it sends; at
        most `wait_s` seconds when given."""
        deadline_s = None if wait_s is None else time.monotonic() + wait_s
        while self.finished < size - 1:
            self._poll()
            if self.finished < size - 1:
                if deadline_s is not None and time.monotonic() > deadline_s:
                    break
                time.sleep(0.005)
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def interrupted_line(progress: Progress | None) -> str:
    """What rank 0 says when a signal stopped the job."""
    kept = "0" if progress is None else f"{progress.done} of {progress.total}"
    return f"interrupted: {kept} cut-outs kept; run the same command again to finish"


def end_interrupted(comm, stop: Interrupted) -> int:
    """After Interrupted, on each rank: rank 0 (or the one process) prints interrupted_line; with
    several ranks every rank's kept cut-outs are journalled first, as far as STOP_WAIT_S allows, and
    MPI Abort ends them all. The exit status: 128 + the signal's number."""
    size = 1 if comm is None else comm.Get_size()
    rank = 0 if comm is None else comm.Get_rank()
    progress = STOP.progress
    if rank == 0:
        if progress is not None:
            progress.drain_until_done(size, STOP_WAIT_S if size > 1 else 0.0)
        print(interrupted_line(progress), file=sys.stderr, flush=True)
    elif STOP.reporter is not None:
        STOP.reporter.close()  # tiny messages: sent at once, whether or not rank 0 still listens
    if size > 1:
        if rank != 0:
            time.sleep(STOP_WAIT_S)  # rank 0 ends every rank once all have reported; if it cannot, this one does
        sys.stderr.flush()
        comm.Abort(stop.exit_code)
    return stop.exit_code
