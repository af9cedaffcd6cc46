"""What every way of running requests shares: the stats one execution fills and the per-slot
buffer a request is read into. The threaded executor and the one-thread concurrent loop (multi)
both build on these, so neither imports the other's module."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ingest import buffers
from ingest.transports.retry import FaultLog


@dataclass
class ReadStats:
    """What one execution did; times are seconds from the start of `execute`."""

    requests: int = 0
    bytes_needed: int = 0
    bytes_wire: int = 0
    elapsed_s: float = 0.0
    first_byte_s: float | None = None  # earliest time any reply started arriving
    retries: int = 0
    resumed_bytes: int = 0  # bytes resumed requests did not fetch twice
    faults: dict = field(default_factory=dict)  # fault kind -> count (recovered or not); throttles apart
    throttled: int = 0  # replies that asked for fewer requests at once (503 SlowDown, 429, refused)
    # The rank's limiter on requests in flight (ingest.engine.throttle), as this execution left it:
    # its ceiling (the threads or depth asked for), the level it settled on, and its fewest.
    concurrency_ceiling: int | None = None
    concurrency_settled: float | None = None
    concurrency_min: int | None = None
    request_s: list = field(default_factory=list, repr=False)  # per-request wall time, for percentiles

    @property
    def throughput_bytes_per_s(self) -> float:
        return self.bytes_needed / self.elapsed_s if self.elapsed_s > 0 else 0.0


class Worker:
    """Per-thread state: one reusable buffer, allocated on first use at least `size_bytes` long."""

    def __init__(self, size_bytes: int):
        self.size_bytes = size_bytes
        self._buf: np.ndarray | None = None

    def buffer(self, nbytes: int) -> np.ndarray:
        # Not bytearray: a bytearray zeroes every page up front, and with 64 slots of 16 MiB that
        # memset (and its page faults) cost more than the reads it served. Pages the reads never
        # reach are then never touched (and never huge pages: ingest.buffers says why).
        if self._buf is None or len(self._buf) < nbytes:
            self._buf = buffers.empty(max(nbytes, self.size_bytes), np.uint8)
        return self._buf


def record_request(stats: ReadStats, t0: float, t_req: float, first_byte_s: float, nbytes: int) -> None:
    """Count one finished request (under the caller's lock, if threads share `stats`)."""
    stats.requests += 1
    stats.bytes_wire += nbytes
    stats.request_s.append(time.perf_counter() - t_req)
    first = t_req + first_byte_s - t0
    if stats.first_byte_s is None or first < stats.first_byte_s:
        stats.first_byte_s = first


def finish_stats(stats: ReadStats, faults: FaultLog, t0: float, limiter=None) -> None:
    """Close an execution's stats: its time, its faults and throttles, and what `limiter` (an
    ingest.engine.throttle.Limiter, or None) allowed."""
    stats.elapsed_s = time.perf_counter() - t0
    stats.retries, stats.resumed_bytes, stats.faults = faults.retries, faults.resumed_bytes, dict(faults.faults)
    stats.throttled = faults.throttled
    if limiter is not None:
        seen = limiter.stats()
        stats.concurrency_ceiling = seen.concurrency_ceiling
        stats.concurrency_settled = seen.concurrency_settled
        stats.concurrency_min = seen.concurrency_min
