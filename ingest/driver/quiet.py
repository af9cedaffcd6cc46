"""Collectives whose waiting ranks sleep: barrier, allgather, bcast, gather and scatter of Python objects.

Open MPI busy-polls in its blocking collectives. Where ranks outnumber cores (64 emulated ranks
on 2 cores; a node's ranks beside its server) the ranks that wait take the cores of the ranks
that work, and even a collective that all ranks enter together is slow: each of its steps needs
a partner queued behind the spinning processes. Here every collective is built of the
nonblocking ones (Ibarrier, Ibcast, Igather(v), Iscatter(v)), tested in quiet_wait: back off
while waiting, asleep between looks (BENCHMARKS, "Collectives that wait asleep", measures both).

An object goes as its pickle in two steps, its size then its bytes, as mpi4py's own lowercase
collectives do inside one blocking call. mpi4py is imported in the functions, as in
driver.mpi, so that importing this module starts no MPI.
"""
from __future__ import annotations

import pickle
import time
from array import array
from itertools import accumulate

# How often a rank waiting in quiet_wait looks again: after a wait of w seconds, in
# QUIET_POLL_FRACTION x w, at least QUIET_POLL_MIN_S and at most QUIET_POLL_MAX_S. Each look is an
# MPI_Test that polls the sockets, so looks at a fixed short interval by many waiting ranks take
# the cores the awaited rank needs; backing off, a wait ends at most 10 % (and 20 ms) late, and a
# long one costs 50 looks a second.
QUIET_POLL_MIN_S = 0.0005
QUIET_POLL_MAX_S = 0.02
QUIET_POLL_FRACTION = 0.1
# A payload's bytes follow its size at once: every rank is already in the collective, and a
# nonblocking collective's steps move only while its ranks look (libnbc has no progress thread),
# so they look back to back first, then at most every 2 ms.
PAYLOAD_SPINS = 20
PAYLOAD_POLL_MAX_S = 0.002


def quiet_poll_s(waited_s: float, max_s: float = QUIET_POLL_MAX_S) -> float:
    """The sleep before the next look, after waiting `waited_s` seconds (at most max_s)."""
    return min(max_s, max(QUIET_POLL_MIN_S, QUIET_POLL_FRACTION * waited_s))


def quiet_wait(test, spins: int = 0, max_sleep_s: float = QUIET_POLL_MAX_S) -> float:
    """Call test() (an MPI Test) until it returns true: `spins` times back to back first (for a
    message nearly there), then sleeping quiet_poll_s between looks, at most max_sleep_s (lower
    where the wait is a transfer that moves only while polled). Returns the seconds waited."""
    start_s = time.monotonic()
    looks = 0
    while not test():
        looks += 1
        if looks > spins:
            time.sleep(quiet_poll_s(time.monotonic() - start_s, max_sleep_s))
    return time.monotonic() - start_s


def _payload_wait(request) -> None:
    quiet_wait(request.Test, spins=PAYLOAD_SPINS, max_sleep_s=PAYLOAD_POLL_MAX_S)


def quiet_barrier(comm) -> None:
    """A barrier that sleeps while it waits."""
    quiet_wait(comm.Ibarrier().Test)


def _dumps(obj) -> bytearray:
    return bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _offsets(sizes) -> list[int]:
    return list(accumulate(sizes, initial=0))[:-1]


def _unpickle_each(buffer: bytearray, sizes, offsets) -> list:
    view = memoryview(buffer)
    return [pickle.loads(view[at:at + n]) for at, n in zip(offsets, sizes)]


def quiet_allgather(comm, obj) -> list:
    """comm.allgather(obj): every rank's object, in rank order, on every rank. Gathered on rank 0,
    then broadcast down a tree: libnbc's Iallgatherv is linear (each rank sends to every other, p^2
    messages and as many connections), where this is 2p messages, and rank 0's p links already
    exist for its gathers."""
    sizes, gathered = quiet_bcast(comm, _gather_pickles(comm, _dumps(obj), 0))
    return _unpickle_each(gathered, sizes, _offsets(sizes))


def quiet_bcast(comm, obj=None, root: int = 0):
    """comm.bcast(obj, root): root's object on every rank (root keeps its own)."""
    from mpi4py import MPI

    here = comm.Get_rank() == root
    data = _dumps(obj) if here else None
    size = array("q", [len(data) if here else 0])
    quiet_wait(comm.Ibcast([size, MPI.INT64_T], root=root).Test)
    buffer = data if here else bytearray(size[0])
    _payload_wait(comm.Ibcast([buffer, MPI.BYTE], root=root))
    return obj if here else pickle.loads(buffer)


def _gather_pickles(comm, data: bytearray, root: int):
    """(every rank's size, their pickles end to end) on root; (None, None) elsewhere."""
    from mpi4py import MPI

    here = comm.Get_rank() == root
    sizes = array("q", [0]) * comm.Get_size() if here else None
    quiet_wait(comm.Igather([array("q", [len(data)]), MPI.INT64_T], [sizes, MPI.INT64_T] if here else None,
                            root=root).Test)
    gathered = bytearray(sum(sizes)) if here else None
    _payload_wait(comm.Igatherv([data, MPI.BYTE], [gathered, (list(sizes), _offsets(sizes)), MPI.BYTE] if here
                                else None, root=root))
    return sizes, gathered


def quiet_gather(comm, obj, root: int = 0) -> list | None:
    """comm.gather(obj, root): every rank's object in rank order on root, None elsewhere."""
    sizes, gathered = _gather_pickles(comm, _dumps(obj), root)
    return None if gathered is None else _unpickle_each(gathered, sizes, _offsets(sizes))


def quiet_scatter(comm, objs, root: int = 0):
    """comm.scatter(objs, root): objs[r] (a sequence of comm's size, given on root) on rank r."""
    from mpi4py import MPI

    here = comm.Get_rank() == root
    pieces = [_dumps(o) for o in objs] if here else []
    if here and len(pieces) != comm.Get_size():
        raise ValueError(f"quiet_scatter: {len(pieces)} objects for {comm.Get_size()} ranks")
    sizes = array("q", (len(p) for p in pieces))
    size = array("q", [0])
    quiet_wait(comm.Iscatter([sizes, MPI.INT64_T] if here else None, [size, MPI.INT64_T], root=root).Test)
    piece = bytearray(size[0])
    send = [bytearray().join(pieces), (list(sizes), _offsets(sizes)), MPI.BYTE] if here else None
    _payload_wait(comm.Iscatterv(send, [piece, MPI.BYTE], root=root))
    return pickle.loads(piece)
