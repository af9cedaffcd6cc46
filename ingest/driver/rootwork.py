"""What rank 0 does for every rank, timed where it does it.

Reading the header and planning (every root_step), gathering the ranks' records and building the
report are serial: every other rank waits, or has finished, while rank 0 does them. At a thousand
ranks they must stay a small part of the makespan, so a command starts a ledger, root_step and
gather_to_root add to it, and the report carries it ("root"), with what grows with the ranks:
the collectives rank 0 led and the bytes it gathered.

Only rank 0's own work is charged to it. A step's wait for the other ranks to arrive (their
Python starting, their previous step) is kept apart as `waiting_s`: it grows with the ranks'
start-up, not with what rank 0 does. The gathers are timed after a collective that all ranks
have passed (all_agree_or_raise): their time is the gather's, not rank 0 waiting for a slow
rank's read. Each term is kept in wall and CPU seconds: where ranks outnumber cores (an emulated
cluster on one machine) the wall time counts rank 0 waiting for a core, and the CPU time is what
its work costs on a node where it has one.

Rank 0's imports of the libraries its steps use (astropy: about a second of a quiet core) are
start-up, as every rank's own imports are: they do not grow with the ranks, and part of the
start-up that docs/install-cluster.md measures. A command loads them before its first step
(`preload`), while the other ranks import theirs, and the ledger keeps them apart as
`starting_s` beside `waiting_s`, in the report but not in `own_s`.
"""
from __future__ import annotations

import importlib
import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from ingest.driver.quiet import quiet_gather


@dataclass
class RootLedger:
    steps: int = 0  # root_step calls: rank 0 ran a step and broadcast its result
    steps_s: float = 0.0  # rank 0 running them and broadcasting the results (the probe rounds too)
    steps_cpu_s: float = 0.0
    waiting_s: float = 0.0  # in the steps, rank 0 waiting for the other ranks to arrive
    gathers: int = 0
    gather_s: float = 0.0
    gather_cpu_s: float = 0.0
    bytes_gathered: int = 0  # the gathered records, pickled as MPI sends them
    report_s: float = 0.0  # building the report (writing it comes after, and is not in it)
    report_cpu_s: float = 0.0
    # Inside the steps, the time the link's probe and the shared rounds took: a measurement the
    # ranks make together (and --no-probe skips), not work rank 0 does for the others.
    measuring_s: float = 0.0
    measuring_cpu_s: float = 0.0
    starting_s: float = 0.0  # before the first step, rank 0 importing what its steps use (`preload`)
    starting_cpu_s: float = 0.0
    # Each step by its function's name: [calls, wall s, CPU s] (which step grows, not only that one does).
    by_step: dict = field(default_factory=dict)

    def as_dict(self, makespan_s: float | None) -> dict:
        own_s = self.steps_s - self.measuring_s + self.gather_s + self.report_s
        own_cpu_s = self.steps_cpu_s - self.measuring_cpu_s + self.gather_cpu_s + self.report_cpu_s
        share = (lambda s: s / makespan_s if makespan_s else None)
        return {"steps": self.steps, "steps_s": self.steps_s, "steps_cpu_s": self.steps_cpu_s,
                "waiting_s": self.waiting_s, "measuring_s": self.measuring_s,
                "measuring_cpu_s": self.measuring_cpu_s, "starting_s": self.starting_s,
                "starting_cpu_s": self.starting_cpu_s, "gathers": self.gathers, "gather_s": self.gather_s,
                "gather_cpu_s": self.gather_cpu_s, "bytes_gathered": self.bytes_gathered,
                "report_s": self.report_s, "report_cpu_s": self.report_cpu_s, "own_s": own_s,
                "own_cpu_s": own_cpu_s, "of_makespan": share(own_s), "cpu_of_makespan": share(own_cpu_s),
                "by_step": {name: {"calls": n, "s": wall_s, "cpu_s": cpu_s}
                            for name, (n, wall_s, cpu_s) in self.by_step.items()}}


_ledger = RootLedger()


def start_ledger() -> RootLedger:
    """A fresh ledger for the command about to run (a process may run several: ingest's API)."""
    global _ledger
    _ledger = RootLedger()
    return _ledger


def ledger() -> RootLedger:
    return _ledger


class Clock:
    """Wall and CPU seconds since it started (CPU: this process's, all its threads)."""

    def __init__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


def note_step(elapsed_s: float, cpu_s: float, waiting_s: float, name: str = "step") -> None:
    """One root_step (`name`: its function's): its work (wall, CPU) and, apart, rank 0's wait for
    the others to arrive."""
    _ledger.steps += 1
    _ledger.steps_s += elapsed_s
    _ledger.steps_cpu_s += cpu_s
    _ledger.waiting_s += waiting_s
    n, wall_s, step_cpu_s = _ledger.by_step.get(name, (0, 0.0, 0.0))
    _ledger.by_step[name] = (n + 1, wall_s + elapsed_s, step_cpu_s + cpu_s)


def note_measuring(elapsed_s: float, cpu_s: float) -> None:
    _ledger.measuring_s += elapsed_s
    _ledger.measuring_cpu_s += cpu_s


def gather_to_root(comm, obj):
    """comm.gather(obj, root=0), waited for asleep (driver.quiet) and counted in the ledger on rank 0;
    None on the others."""
    clock = Clock()
    gathered = quiet_gather(comm, obj)
    if comm.Get_rank() == 0:
        wall_s, cpu_s = clock.elapsed()
        _ledger.gathers += 1
        _ledger.gather_s += wall_s
        _ledger.gather_cpu_s += cpu_s
        _ledger.bytes_gathered += sum(len(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)) for o in gathered)
    return gathered


def preload(rank: int, root_modules=(), others=None) -> None:
    """Before a command's first step: rank 0 imports `root_modules` (what its steps use), timed
    into the ledger's `starting_s`; every other rank calls `others()` meanwhile (what its first
    read needs: ingest.driver.source.ready_to_read)."""
    if rank != 0:
        if others is not None:
            others()
        return
    clock = Clock()
    for name in root_modules:
        importlib.import_module(name)
    wall_s, cpu_s = clock.elapsed()
    _ledger.starting_s += wall_s
    _ledger.starting_cpu_s += cpu_s


@contextmanager
def building_report():
    """Around building a report on rank 0: its time in the ledger."""
    clock = Clock()
    try:
        yield
    finally:
        wall_s, cpu_s = clock.elapsed()
        _ledger.report_s += wall_s
        _ledger.report_cpu_s += cpu_s
