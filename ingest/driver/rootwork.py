"""What rank 0 does for every rank, timed where it does it.

Reading the header and planning (every root_step), gathering the ranks' records and building the
report are serial: every other rank waits, or has finished, while rank 0 does them. At a thousand
ranks they must stay a small part of the makespan, so a command starts a ledger, root_step and
gather_to_root add to it, and the report carries it ("root"), with what grows with the ranks:
the collectives rank 0 led and the bytes it gathered.

The gathers are timed after a collective that all ranks have passed (all_agree_or_raise): their
time is the gather's, not rank 0 waiting for a slow rank's read.
"""
from __future__ import annotations

import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class RootLedger:
    steps: int = 0  # root_step calls: rank 0 ran a step and broadcast its result
    steps_s: float = 0.0  # their time on rank 0, the broadcasts included (the probe rounds too)
    gathers: int = 0
    gather_s: float = 0.0
    bytes_gathered: int = 0  # the gathered records, pickled as MPI sends them
    report_s: float = 0.0  # building the report (writing it comes after, and is not in it)
    # Inside the steps, the time the link's probe and the shared rounds took: a measurement the
    # ranks make together (and --no-probe skips), not work rank 0 does for the others.
    measuring_s: float = 0.0

    def as_dict(self, makespan_s: float | None) -> dict:
        own_s = self.steps_s - self.measuring_s + self.gather_s + self.report_s
        return {"steps": self.steps, "steps_s": self.steps_s, "measuring_s": self.measuring_s,
                "gathers": self.gathers, "gather_s": self.gather_s, "bytes_gathered": self.bytes_gathered,
                "report_s": self.report_s, "own_s": own_s, "of_makespan": own_s / makespan_s if makespan_s else None}


_ledger = RootLedger()


def start_ledger() -> RootLedger:
    """A fresh ledger for the command about to run (a process may run several: ingest's API)."""
    global _ledger
    _ledger = RootLedger()
    return _ledger


def ledger() -> RootLedger:
    return _ledger


def note_step(elapsed_s: float) -> None:
    _ledger.steps += 1
    _ledger.steps_s += elapsed_s


def note_measuring(elapsed_s: float) -> None:
    _ledger.measuring_s += elapsed_s


def gather_to_root(comm, obj):
    """comm.gather(obj, root=0), counted in the ledger on rank 0; None on the others."""
    t0 = time.perf_counter()
    gathered = comm.gather(obj, root=0)
    if comm.Get_rank() == 0:
        _ledger.gathers += 1
        _ledger.gather_s += time.perf_counter() - t0
        _ledger.bytes_gathered += sum(len(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)) for o in gathered)
    return gathered


@contextmanager
def building_report():
    """Around building a report on rank 0: its time in the ledger."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _ledger.report_s += time.perf_counter() - t0
