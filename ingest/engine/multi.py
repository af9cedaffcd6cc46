"""Run request generators with many reads in flight from one thread (a `concurrent` transport).

The threaded executor spends a Python thread per request in flight; a native engine (libcurl's
multi interface) keeps dozens of ranges moving on persistent connections from one loop. This
loop owns the bookkeeping the threads did: which request is next, which reads are in flight,
retries (the same `Attempts` as the threaded path, but a failed read is re-issued after its
backoff instead of sleeping a thread), and the stats. Each request's own code (scatter, decode)
runs here between its reads, exactly as it would on a worker thread.

A transport is concurrent when it declares `concurrent` and its `open_session(depth)` returns a
`Session` (ingest.transports.base).
"""
from __future__ import annotations

import heapq
import time

from ingest.errors import RetryableError
from ingest.engine.stats import Worker, finish_stats, record_request
from ingest.transports.retry import Attempts, FaultLog, RetryPolicy

IDLE_WAIT_S = 1.0  # longest single wait on the session; transfers have their own timeouts


class _Live:
    """One request in flight: its generator, its current read's retry state, its timings."""

    __slots__ = ("request", "attempts", "t_req", "first_byte_s")

    def __init__(self, request, t_req: float):
        self.request, self.t_req = request, t_req
        self.attempts: Attempts | None = None
        self.first_byte_s: float | None = None


def run_concurrent(sequence, do_one, transport, stats, faults: FaultLog, t0: float, *, depth: int, buffer_bytes: int,
                   progress=None, retry: RetryPolicy = RetryPolicy()) -> None:
    """Run requests `sequence` (indices for do_one) with up to `depth` reads in flight; fill
    `stats`. The first unrecoverable error closes every live request and is raised."""
    n = len(sequence)
    session = transport.open_session(depth)
    free_slots = list(range(min(depth, n)))[::-1]
    workers = [Worker(buffer_bytes) for _ in free_slots]
    live: dict[int, _Live] = {}
    timers: list[tuple[float, int]] = []  # (due on time.monotonic, slot): retries waiting out a backoff
    next_i = 0

    def advance(slot: int, ttfb_s: float | None) -> None:
        """Resume the slot's request (with its last read's ttfb) until it starts a read or ends."""
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
        entry.attempts = Attempts(transport, read[0], read[1], retry)
        session.start(slot, *read)

    try:
        while next_i < n or live:
            while next_i < n and free_slots:
                slot = free_slots.pop()
                live[slot] = _Live(do_one(int(sequence[next_i]), workers[slot]), time.perf_counter())
                next_i += 1
                advance(slot, None)
            now = time.monotonic()
            while timers and timers[0][0] <= now:
                slot = heapq.heappop(timers)[1]
                session.start(slot, *live[slot].attempts.remaining)
            wait_s = min(IDLE_WAIT_S, max(0.0, timers[0][0] - now)) if timers else IDLE_WAIT_S
            for slot, ttfb_s, error in session.wait(wait_s):
                entry = live[slot]
                if error is None:
                    if entry.first_byte_s is None:
                        entry.first_byte_s = ttfb_s
                    advance(slot, ttfb_s)
                elif isinstance(error, RetryableError):
                    delay_s = entry.attempts.failed(error, faults.note)
                    heapq.heappush(timers, (time.monotonic() + delay_s, slot))
                else:
                    raise error
    except BaseException:
        session.close()  # first: its transfers let go of the requests' buffers
        for entry in live.values():
            entry.attempts = None
            entry.request.close()
        raise
    finally:
        session.close()
        finish_stats(stats, faults, t0)
