"""Retry policy for ranged reads: which failures to ride through, how long, and resuming.

Seed 000 saw 0.1-0.3 % of cloud downloads end with "connection unexpectedly closed" and runs
stall for up to 40 minutes, so one broken range must not sink a multi-hour, 25-rank job. Only
RetryableError is retried (resets, timeouts, truncated bodies, 500/502/503/504, SlowDown);
everything else (403, 404, 416, a wrong Content-Range, a changed object) fails at once. A
range that broke mid-body resumes after the bytes that did arrive.

A throttle (`is_throttle`: 503 SlowDown, 429) is not a fault: the store is healthy and asks for
fewer requests at once. It does not use up `retries`, which real failures get; only `total_s`
bounds it. A refused connection (`is_refusal`) also says "fewer at once" (a listener whose
backlog is full), but it is also what an endpoint with nothing behind it says, so it stays a
fault that uses up `retries`: a wrong URL fails in seconds, not after `total_s`. A `gate`
(ingest.engine.throttle's Limiter) hears every outcome (`gate_outcome`) and lowers the requests
in flight on both; the request waits a jittered backoff.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ingest.core.aimd import full_jitter_s
from ingest.errors import RetryableError, TransportError

# Outcomes a gate hears of each attempt it admitted.
OK, THROTTLED, FAILED = "ok", "throttled", "failed"

# Error codes (S3's and the AWS SDKs' list of throttling codes) and fault kinds that mean "fewer
# requests, please". A kind is a transport's short name (`slowdown`, `http_429`) or, for uploads,
# the S3 code or the status itself.
THROTTLE_CODES = frozenset({
    "slowdown", "http_429", "429", "SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
    "RequestThrottled", "RequestThrottledException", "TooManyRequests", "TooManyRequestsException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "ProvisionedThroughputExceededException",
})
# Said in the message of a 503 from AWS S3 ("Please reduce your request rate.") whatever its code.
_REDUCE_RATE = "reduce your request rate"
# A refused connection: the listener's backlog is full, or the store sheds connections. Asking
# again at once makes it worse; fewer connections at once is the cure, as for a 503 SlowDown.
_REFUSED = ("connection refused", "couldn't connect to server", "could not connect to server", "curl error 7:",
            "errno 111", "econnrefused")
# A part upload whose body was sent and whose answer did not come within the read timeout, or
# whose body the socket could not send within it: the timeout's clock runs while the body sits in
# the socket's buffer and the link's queue, so what it measured is the uplink shared by too many
# uploads, and fewer at once is the cure.
# It is still a failed attempt (a dead store looks the same), counted against the retries.
UPLOAD_TIMEOUT = "upload_timeout"


def is_throttle(error: BaseException) -> bool:
    """Did the store answer, asking for fewer requests at once (503 SlowDown or a 503 saying
    "reduce your request rate", 429 and the SDKs' throttling codes)? Then it is no fault."""
    if not isinstance(error, RetryableError):
        return False
    return error.kind in THROTTLE_CODES or _REDUCE_RATE in " ".join(chain_texts(error)).lower()


def is_refusal(error: BaseException) -> bool:
    """Was the connection refused (a full backlog, or nothing listening)? A fault, but one that
    fewer connections at once may cure."""
    if not isinstance(error, RetryableError):
        return False
    text = " ".join(chain_texts(error)).lower()
    return any(marker in text for marker in _REFUSED)


def gate_outcome(error: BaseException) -> str:
    """What a gate hears of a failed attempt: THROTTLED (lower the requests in flight) for a
    throttle, a refused connection or an upload's unanswered body, FAILED for anything else."""
    congested = isinstance(error, RetryableError) and error.kind == UPLOAD_TIMEOUT
    return THROTTLED if is_throttle(error) or is_refusal(error) or congested else FAILED


def chain_texts(error: BaseException, depth: int = 4) -> list[str]:
    """The messages of an error and of what caused it (botocore keeps the socket's error in
    `kwargs['error']`), a few links deep: a refusal is often said only at the bottom."""
    texts, seen = [], 0
    while error is not None and seen < depth:
        texts.append(str(error))
        inner = getattr(error, "kwargs", None)
        if isinstance(inner, dict) and inner.get("error") is not None:
            texts.append(str(inner["error"]))
        error = error.__cause__ or error.__context__
        seen += 1
    return texts


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds on retrying one request: by count and by time spent on it."""

    retries: int = 5  # attempts after the first
    total_s: float = 300.0  # give up once a request has spent this long, retries included
    backoff_s: float = 0.2  # first backoff ceiling; doubles each retry (full jitter below it)
    backoff_max_s: float = 20.0  # ceiling on one backoff
    # A throttled request waits less: the limiter, not the wait, is what lowers the load, and the
    # wait only spreads the ranks' returns. It doubles per throttle met at the limiter's floor
    # (`escalated`), where waiting longer is all a rank has left.
    throttle_backoff_s: float = 0.05  # first backoff ceiling after a throttle
    throttle_backoff_max_s: float = 5.0  # ceiling on one backoff after a throttle

    def delay_s(self, attempt: int) -> float:
        """Full jitter (AWS architecture blog): uniform in [0, min(max, base * 2**(attempt-1))],
        so 25 ranks hit by the same outage do not come back in lockstep."""
        return full_jitter_s(attempt, self.backoff_s, self.backoff_max_s, random.random())

    def throttle_delay_s(self, escalation: int) -> float:
        """Full jitter after a throttle: the ceiling doubles per step of `escalation` (0 or 1: the
        first ceiling; see `escalated`)."""
        return full_jitter_s(max(1, escalation), self.throttle_backoff_s, self.throttle_backoff_max_s,
                             random.random())


def escalated(escalation: int, gate) -> int:
    """A request's throttle backoff escalation after one more throttle. It grows only where the
    gate (the rank's Limiter) admits its floor, or with no gate: above the floor the limiter has
    just lowered the requests in flight, which is what relieves the store, and a wait that kept
    doubling would idle the request long after the store had room (one unlucky request, throttled
    six times, waits up to 1.6 s while its rank's others finish: the job's tail)."""
    return escalation + 1 if gate is None or gate.at_floor else escalation



class FaultLog:
    """Counts of what went wrong and what retrying saved; one per execution, thread-safe via
    the executor's lock (it calls `note` while holding it). Throttles are counted apart: they
    are neither faults nor retries."""

    def __init__(self):
        self.retries = 0
        self.resumed_bytes = 0  # bytes a resumed request did not have to fetch again
        self.throttled = 0  # replies that asked for fewer requests at once (is_throttle)
        self.faults: dict[str, int] = {}

    def record(self, error: RetryableError) -> None:
        self.faults[error.kind] = self.faults.get(error.kind, 0) + 1

    def note(self, error: RetryableError, will_retry: bool, resumed_bytes: int) -> None:
        """One RetryableError seen: a throttle counted as such; a fault counted always, and as a
        retry if retried. What resuming saved counts either way."""
        if will_retry:
            self.resumed_bytes += resumed_bytes
        if is_throttle(error):
            self.throttled += 1
            return
        self.record(error)
        if will_retry:
            self.retries += 1

    def as_dict(self) -> dict:
        return {"retries": self.retries, "resumed_bytes": self.resumed_bytes, "throttled": self.throttled,
                "faults": dict(self.faults)}


class Attempts:
    """One read's retry state: how much of its buffer has arrived, how often and how long it
    has failed. Shared by the threaded executor (which sleeps) and the concurrent one (which
    schedules the resumed read for later), so both retry and resume alike."""

    def __init__(self, transport, buffer: memoryview, offset: int, policy: RetryPolicy, gate=None):
        self.transport, self.buffer, self.offset, self.policy = transport, buffer, offset, policy
        self.gate = gate  # the Limiter that admits its attempts (None: none)
        self.received = 0
        self.attempt = 0  # failures that count against policy.retries
        self.throttles = 0  # throttles, which do not
        self.escalation = 0  # what sets the next throttle's backoff (`escalated`)
        self.last_throttled = False  # was the last failure a throttle (no fault, no retry used)
        self.t0 = time.monotonic()

    @property
    def remaining(self) -> tuple[memoryview, int]:
        """(the buffer still to fill, its object offset): what the next attempt reads."""
        return self.buffer[self.received:], self.offset + self.received

    def failed(self, exc: RetryableError, on_fault) -> float:
        """Account for a failed attempt; return the delay before the next one, or raise
        TransportError when the policy gives up. on_fault(error, will_retry, resumed_bytes).
        A throttle does not count against policy.retries; total_s bounds both. Called after the
        gate heard the attempt's outcome, so that its floor is the one the throttle left."""
        n = len(self.buffer)
        got = max(0, min(exc.received, n - self.received))
        self.received += got
        policy = self.policy
        self.last_throttled = is_throttle(exc)
        if self.last_throttled:
            self.throttles += 1
            self.escalation = escalated(self.escalation, self.gate)
            delay = policy.throttle_delay_s(self.escalation)
        else:
            self.attempt += 1
            delay = policy.delay_s(self.attempt)
        spent = time.monotonic() - self.t0
        within_count = self.last_throttled or self.attempt <= policy.retries
        will_retry = within_count and spent + delay < policy.total_s
        on_fault(exc, will_retry, got if will_retry else 0)
        if not will_retry:
            why = f"{policy.retries} retries" if not within_count else f"{policy.total_s:g} s retry budget"
            raise TransportError(
                f"{self.transport.display_name}: gave up on bytes [{self.offset}, {self.offset + n}) after {why} "
                f"({self.attempt} attempt(s) failed, {self.throttles} throttled by the store; last: {exc})"
            ) from exc
        return delay


def _gated(gate, call):
    """call() as one attempt admitted by `gate` (None: no gate), which hears its outcome: OK,
    THROTTLED or FAILED. Anything but a RetryableError is FAILED too and propagates."""
    if gate is None:
        return call()
    ticket = gate.acquire()
    outcome = FAILED
    try:
        result = call()
        outcome = OK
        return result
    except RetryableError as exc:
        outcome = gate_outcome(exc)
        raise
    finally:
        gate.release(ticket, outcome)


def read_with_retries(transport, buffer: memoryview, offset: int, policy: RetryPolicy, on_fault,
                      gate=None) -> float:
    """transport.read_into with retries; returns seconds to first byte of the last attempt.

    on_fault(error, will_retry, resumed_bytes) is called for every RetryableError seen. `gate`
    (a Limiter: acquire() -> ticket, release(ticket, outcome)) admits each attempt; the backoff
    is waited outside it, so a throttled request holds no slot while it waits.
    """
    attempts = Attempts(transport, buffer, offset, policy, gate)
    while True:
        try:
            return _gated(gate, lambda: transport.read_into(*attempts.remaining))
        except RetryableError as exc:
            time.sleep(attempts.failed(exc, on_fault))


def retry_call(fn, policy: RetryPolicy, what: str, gate=None, on_throttle=None, on_failure=None):
    """fn() retried per `policy` on RetryableError: for idempotent calls with nothing to resume
    (a HEAD, the 1-byte GET that finds a presigned object's size, an UploadPart). A throttle
    does not count against policy.retries (total_s bounds it) and calls on_throttle(error);
    any other failed attempt calls on_failure(error), whether or not another follows.
    `gate` admits each attempt, as in read_with_retries."""
    attempt = throttles = escalation = 0
    t0 = time.monotonic()
    while True:
        try:
            return _gated(gate, fn)
        except RetryableError as exc:
            if is_throttle(exc):
                throttles += 1
                escalation = escalated(escalation, gate)
                delay = policy.throttle_delay_s(escalation)
                if on_throttle is not None:
                    on_throttle(exc)
            else:
                attempt += 1
                delay = policy.delay_s(attempt)
                if on_failure is not None:
                    on_failure(exc)
            if attempt > policy.retries or time.monotonic() - t0 + delay >= policy.total_s:
                throttled = f", {throttles} more throttled by the store" if throttles else ""
                within = f" within its {policy.total_s:g} s retry budget" if attempt <= policy.retries else ""
                raise TransportError(f"{what}: gave up after {attempt} attempt(s){throttled}{within}; "
                                     f"last: {exc}") from exc
            time.sleep(delay)
