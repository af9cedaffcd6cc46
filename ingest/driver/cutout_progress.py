"""Rank 0's progress bar for a cut-out job: sources done of the job's total, and bytes, from
every rank. The other ranks tell rank 0 of each group of cut-outs they finish by non-blocking sends (and that
they are done); rank 0 counts them between its own groups and, at the end, until every rank has
said it is done, so no message is left unreceived."""
from __future__ import annotations

import sys
import time

from mpi4py import MPI

from ingest.config import RunConfig

_PROGRESS_TAG = 4401


class Reporter:
    """A rank other than 0: tells rank 0 of each finished group of cut-outs (non-blocking sends)."""

    def __init__(self, comm):
        self.comm, self.pending = comm, []

    def send(self, n_sources: int, nbytes: int) -> None:
        self.pending.append(self.comm.isend((n_sources, nbytes), dest=0, tag=_PROGRESS_TAG))

    def close(self) -> None:
        self.pending.append(self.comm.isend(None, dest=0, tag=_PROGRESS_TAG))  # this rank is done
        MPI.Request.waitall(self.pending)


class Progress:
    """Rank 0's bar: sources done of the job's total, and bytes, from every rank."""

    def __init__(self, cfg: RunConfig, comm, total: int):
        self.comm, self.bar, self.finished = comm, None, 0
        if cfg.progress and total and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="src", file=sys.stderr, desc="cutouts", leave=False)
        self.nbytes = 0

    def mine(self, n_sources: int, nbytes: int) -> None:
        self._add(n_sources, nbytes)
        self._poll()

    def _add(self, n_sources: int, nbytes: int) -> None:
        self.nbytes += nbytes
        if self.bar is not None:
            self.bar.update(n_sources)
            self.bar.set_postfix_str(f"{self.nbytes / 2**20:.1f} MiB")

    def _poll(self) -> None:
        status = MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=_PROGRESS_TAG, status=status):
            message = self.comm.recv(source=status.Get_source(), tag=_PROGRESS_TAG)
            if message is None:
                self.finished += 1
            else:
                self._add(*message)

    def drain_until_done(self, size: int) -> None:
        """Wait (quietly) until every other rank has said it is done, counting what it sends."""
        while self.finished < size - 1:
            self._poll()
            if self.finished < size - 1:
                time.sleep(0.005)
        if self.bar is not None:
            self.bar.close()
