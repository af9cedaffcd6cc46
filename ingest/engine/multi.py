"""Run request generators with many reads in flight from one thread (a `concurrent` transport).

The threaded executor spends a Python thread per request in flight; a native engine (libcurl's
multi interface) keeps dozens of ranges moving on persistent connections from one loop. This
loop owns the bookkeeping the threads did: which request is next, which reads are in flight,
retries (the same `Attempts` as the threaded path, but a failed read is re-issued after its
backoff instead of sleeping a thread), and the stats. Each request's own code (scatter, decode)
runs here between its reads, exactly as it would on a worker thread.

The reads in flight follow the rank's Limiter (ingest.engine.throttle): `depth` is the session's
slots and the limiter's ceiling, and a read (a request's first, its next, or a retry after its
backoff) starts only when the limiter admits it. A throttling store so lowers the depth this
loop keeps, and it climbs back as the store answers.

A transport is concurrent when it declares `concurrent` and its `open_session(depth)` returns a
`Session` (ingest.transports.base).
"""
from __future__ import annotations

import heapq
import time
from collections import deque

from ingest.errors import RetryableError
from ingest.engine.stats import Worker, finish_stats, record_request
from ingest.engine.throttle import Limiter
from ingest.transports.retry import FAILED, OK, Attempts, FaultLog, RetryPolicy, gate_outcome

IDLE_WAIT_S = 1.0  # longest single wait on the session; transfers have their own timeouts
ADMIT_POLL_S = 0.005  # wait between asks when reads wait on a limiter whose slots another execution holds


class _Live:
    """One request in flight: its generator, its current read's retry state, its timings."""

    __slots__ = ("request", "attempts", "t_req", "first_byte_s")

    def __init__(self, request, t_req: float):
        self.request, self.t_req = request, t_req
        self.attempts: Attempts | None = None
        self.first_byte_s: float | None = None


def run_concurrent(sequence, do_one, transport, stats, faults: FaultLog, t0: float, *, depth: int, buffer_bytes: int,
                   progress=None, retry: RetryPolicy = RetryPolicy(), limiter: Limiter | None = None) -> None:
    """Run requests `sequence` (indices for do_one) with up to `depth` reads in flight, as many as
    `limiter` admits (default: a limiter of its own, ceiling `depth`); fill `stats`. The first
    unrecoverable error closes every live request and is raised."""
    n = len(sequence)
    limiter = limiter if limiter is not None else Limiter(depth)
    session = transport.open_session(depth)
    free_slots = list(range(min(depth, n)))[::-1]
    workers = [Worker(buffer_bytes) for _ in free_slots]
    live: dict[int, _Live] = {}
    timers: list[tuple[float, int]] = []  # (due on time.monotonic, slot): retries waiting out a backoff
    ready: deque[int] = deque()  # slots whose next read waits for the limiter, oldest first
    tickets: dict[int, int] = {}  # slot -> the limiter's ticket of its read in flight
    next_i = 0

    def advance(slot: int, ttfb_s: float | None) -> None:
        """Resume the slot's request (with its last read's ttfb) until it asks for a read or ends."""
        entry = live[slot]
        entry.attempts = None  # the request may close a window on that buffer now
        try:
            read = next(entry.request) if ttfb_s is None else entry.request.send(ttfb_s)
        except StopIteration as done:
            del live[slot]
            free_slots.append(slot)
            record_request(stats, t0, entry.t_req, entry.first_byte_s or 0.0, done.value)
            if progress is not None:
                progress(done.value)
            return
        entry.attempts = Attempts(transport, read[0], read[1], retry, limiter)
        ready.append(slot)

    def dispatch() -> None:
        """Start waiting reads, oldest first, while the limiter admits them."""
        while ready:
            ticket = limiter.try_acquire()
            if ticket is None:
                return
            slot = ready.popleft()
            tickets[slot] = ticket
            session.start(slot, *live[slot].attempts.remaining)

    try:
        while next_i < n or live:
            now = time.monotonic()
            while timers and timers[0][0] <= now:
                ready.append(heapq.heappop(timers)[1])
            dispatch()
            # A new request only when every started one's read is in flight and there is room.
            while next_i < n and free_slots and not ready and limiter.has_room():
                slot = free_slots.pop()
                live[slot] = _Live(do_one(int(sequence[next_i]), workers[slot]), time.perf_counter())
                next_i += 1
                advance(slot, None)
                dispatch()
            if ready and not tickets:  # the limiter's slots are another execution's: ask again soon
                wait_s = ADMIT_POLL_S
            else:
                wait_s = min(IDLE_WAIT_S, max(0.0, timers[0][0] - time.monotonic())) if timers else IDLE_WAIT_S
            for slot, ttfb_s, error in session.wait(wait_s):
                entry = live[slot]
                ticket = tickets.pop(slot)
                if error is None:
                    limiter.release(ticket, OK)
                    if entry.first_byte_s is None:
                        entry.first_byte_s = ttfb_s
                    advance(slot, ttfb_s)
                elif isinstance(error, RetryableError):
                    limiter.release(ticket, gate_outcome(error))  # first: failed() asks its floor
                    delay_s = entry.attempts.failed(error, faults.note)
                    heapq.heappush(timers, (time.monotonic() + delay_s, slot))
                else:
                    limiter.release(ticket, FAILED)
                    raise error
    except BaseException:
        session.close()  # first: its transfers let go of the requests' buffers
        for ticket in tickets.values():  # the limiter outlives this execution: give its slots back
            limiter.release(ticket, FAILED)
        tickets.clear()
        for entry in live.values():
            entry.attempts = None
            entry.request.close()
        raise
    finally:
        session.close()
        finish_stats(stats, faults, t0, limiter)
