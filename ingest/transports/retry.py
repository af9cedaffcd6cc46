"""Retry policy for ranged reads: which failures to ride through, how long, and resuming.

Seed 000 saw 0.1-0.3 % of cloud downloads end with "connection unexpectedly closed" and runs
stall for up to 40 minutes, so one broken range must not sink a multi-hour, 25-rank job. Only
RetryableError is retried (resets, timeouts, truncated bodies, 500/502/503/504, SlowDown);
everything else (403, 404, 416, a wrong Content-Range, a changed object) fails at once. A
range that broke mid-body resumes after the bytes that did arrive.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ingest.errors import RetryableError, TransportError


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds on retrying one request: by count and by time spent on it."""

    retries: int = 5  # attempts after the first
    total_s: float = 300.0  # give up once a request has spent this long, retries included
    backoff_s: float = 0.2  # first backoff ceiling; doubles each retry (full jitter below it)
    backoff_max_s: float = 20.0  # ceiling on one backoff

    def delay_s(self, attempt: int) -> float:
        """Full jitter (AWS architecture blog): uniform in [0, min(max, base * 2**(attempt-1))],
        so 25 ranks hit by the same outage do not come back in lockstep."""
        return random.uniform(0.0, min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1)))



class FaultLog:
    """Counts of what went wrong and what retrying saved; one per execution, thread-safe via
    the executor's lock (it calls `record` while holding it)."""

    def __init__(self):
        self.retries = 0
        self.resumed_bytes = 0  # bytes a resumed request did not have to fetch again
        self.faults: dict[str, int] = {}

    def record(self, error: RetryableError) -> None:
        self.faults[error.kind] = self.faults.get(error.kind, 0) + 1

    def note(self, error: RetryableError, will_retry: bool, resumed_bytes: int) -> None:
        """One RetryableError seen: counted always, as a retry (and what resuming saved) if retried."""
        self.record(error)
        if will_retry:
            self.retries += 1
            self.resumed_bytes += resumed_bytes

    def as_dict(self) -> dict:
        return {"retries": self.retries, "resumed_bytes": self.resumed_bytes, "faults": dict(self.faults)}


class Attempts:
    """One read's retry state: how much of its buffer has arrived, how often and how long it
    has failed. Shared by the threaded executor (which sleeps) and the concurrent one (which
    schedules the resumed read for later), so both retry and resume alike."""

    def __init__(self, transport, buffer: memoryview, offset: int, policy: RetryPolicy):
        self.transport, self.buffer, self.offset, self.policy = transport, buffer, offset, policy
        self.received = 0
        self.attempt = 0
        self.t0 = time.monotonic()

    @property
    def remaining(self) -> tuple[memoryview, int]:
        """(the buffer still to fill, its object offset): what the next attempt reads."""
        return self.buffer[self.received:], self.offset + self.received

    def failed(self, exc: RetryableError, on_fault) -> float:
        """Account for a failed attempt; return the delay before the next one, or raise
        TransportError when the policy gives up. on_fault(error, will_retry, resumed_bytes)."""
        n = len(self.buffer)
        got = max(0, min(exc.received, n - self.received))
        self.received += got
        self.attempt += 1
        policy = self.policy
        delay = policy.delay_s(self.attempt)
        spent = time.monotonic() - self.t0
        will_retry = self.attempt <= policy.retries and spent + delay < policy.total_s
        on_fault(exc, will_retry, got if will_retry else 0)
        if not will_retry:
            why = f"{policy.retries} retries" if self.attempt > policy.retries else f"{policy.total_s:g} s retry budget"
            raise TransportError(
                f"{self.transport.display_name}: gave up on bytes [{self.offset}, {self.offset + n}) after {why} "
                f"({self.attempt} attempt(s) failed; last: {exc})"
            ) from exc
        return delay


def read_with_retries(transport, buffer: memoryview, offset: int, policy: RetryPolicy, on_fault) -> float:
    """transport.read_into with retries; returns seconds to first byte of the last attempt.

    on_fault(error, will_retry, resumed_bytes) is called for every RetryableError seen.
    """
    attempts = Attempts(transport, buffer, offset, policy)
    while True:
        try:
            return transport.read_into(*attempts.remaining)
        except RetryableError as exc:
            time.sleep(attempts.failed(exc, on_fault))


def retry_call(fn, policy: RetryPolicy, what: str):
    """fn() retried per `policy` on RetryableError: for idempotent calls with nothing to resume
    (a HEAD, the 1-byte GET that finds a presigned object's size)."""
    attempt = 0
    t0 = time.monotonic()
    while True:
        try:
            return fn()
        except RetryableError as exc:
            attempt += 1
            delay = policy.delay_s(attempt)
            if attempt > policy.retries or time.monotonic() - t0 + delay >= policy.total_s:
                raise TransportError(f"{what}: gave up after {attempt} attempt(s); last: {exc}") from exc
            time.sleep(delay)
