"""A rank's limit on its requests in flight to one store, lowered when the store throttles and
raised again slowly when it does not (the rule: ingest.core.aimd).

One Limiter per rank and store connection: the executor's worker threads wait on it before each
read (`acquire`), the native engine's loop starts a read only when it admits one
(`try_acquire`), and publish's upload slots wait on it before each part. Every attempt it
admitted reports its outcome (`release`: ok, throttled, failed), and only those outcomes move
the limit: a fault that is not a throttle (a reset, a timeout) leaves it alone, since fewer
requests would not cure it.

`limiter_for(transport, ceiling)` keeps one Limiter per open transport, so a rank's regions,
read one after another through the same transport, start from the limit the previous one
settled on instead of throttling the store afresh.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from ingest.core.aimd import AimdRule, admitted, after_success, after_throttle
from ingest.transports.retry import FAILED, OK, THROTTLED


@dataclass(frozen=True)
class ThrottleStats:
    """What a Limiter saw: attempts that asked for fewer requests (throttles and refused
    connections), and the requests in flight it allowed (its ceiling, the fewest, and the level
    it settled on: the mean admitted since the first such attempt, or the ceiling when none)."""

    throttled: int
    concurrency_ceiling: int
    concurrency_settled: float
    concurrency_min: int

    def as_dict(self) -> dict:
        return {"throttled": self.throttled, "concurrency_ceiling": self.concurrency_ceiling,
                "concurrency_settled": self.concurrency_settled, "concurrency_min": self.concurrency_min}


class Limiter:
    """At most `admitted(limit)` attempts in flight; the limit starts at `ceiling_requests`,
    halves (once per generation) on a throttle and grows by about one per window of successes.
    Thread-safe; `acquire` blocks, `try_acquire` does not."""

    def __init__(self, ceiling_requests: int, rule: AimdRule = AimdRule()):
        if ceiling_requests < 1:
            raise ValueError(f"ceiling_requests: {ceiling_requests!r} must be >= 1 (requests in flight)")
        self.rule = rule
        self._cond = threading.Condition(threading.Lock())
        self._ceiling = int(ceiling_requests)
        self._limit = float(ceiling_requests)
        self._generation = 0
        self._in_flight = 0
        self._throttled = 0
        self._min = admitted(self._limit, rule)
        self._admitted_sum = 0  # sum of the admitted level at each admission since the first throttle
        self._admissions = 0

    # ------------------------------------------------------------------ admitting
    def _admit(self) -> int:
        self._in_flight += 1
        if self._throttled:
            self._admitted_sum += admitted(self._limit, self.rule)
            self._admissions += 1
        return self._generation

    def acquire(self) -> int:
        """Wait for room; returns the ticket (the generation the attempt is sent under)."""
        with self._cond:
            while self._in_flight >= admitted(self._limit, self.rule):
                self._cond.wait()
            return self._admit()

    def try_acquire(self) -> int | None:
        """A ticket if there is room now, else None."""
        with self._cond:
            if self._in_flight >= admitted(self._limit, self.rule):
                return None
            return self._admit()

    @property
    def at_floor(self) -> bool:
        """Does it admit no more than the rule's floor: nothing left to lower but the waits?"""
        with self._cond:
            return admitted(self._limit, self.rule) <= self.rule.floor_requests

    def has_room(self) -> bool:
        with self._cond:
            return self._in_flight < admitted(self._limit, self.rule)

    def release(self, ticket: int, outcome: str) -> None:
        """One admitted attempt ended: OK raises the limit a little, THROTTLED lowers it (see
        ingest.core.aimd.after_throttle), FAILED (or an abandoned attempt) leaves it."""
        with self._cond:
            self._in_flight -= 1
            if outcome == OK:
                self._limit = after_success(self._limit, self._ceiling, self.rule)
            elif outcome == THROTTLED:
                self._throttled += 1
                self._limit, self._generation = after_throttle(self._limit, self._generation, ticket, self.rule)
                self._min = min(self._min, admitted(self._limit, self.rule))
            elif outcome != FAILED:
                raise ValueError(f"outcome: {outcome!r} is not {OK!r}, {THROTTLED!r} or {FAILED!r}")
            # Wake only as many waiters as there is room for: 16 threads woken for one slot
            # would each take the lock to find it gone.
            room = admitted(self._limit, self.rule) - self._in_flight
            if room > 0:
                self._cond.notify(room)

    # ------------------------------------------------------------------ state
    def set_ceiling(self, ceiling_requests: int) -> None:
        """A new execution's concurrency: the most the limit may reach; it keeps what it learned
        (a lower limit stays, and grows additively up to the new ceiling)."""
        with self._cond:
            self._ceiling = max(1, int(ceiling_requests))
            self._limit = min(self._limit, float(self._ceiling))
            self._min = min(self._min, admitted(self._limit, self.rule))
            self._cond.notify_all()

    @property
    def limit(self) -> int:
        """Attempts admitted at once now."""
        with self._cond:
            return admitted(self._limit, self.rule)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def stats(self) -> ThrottleStats:
        with self._cond:
            settled = (self._admitted_sum / self._admissions if self._admissions
                       else float(admitted(self._limit, self.rule)))
            return ThrottleStats(self._throttled, self._ceiling, round(settled, 2), self._min)


_LIMITERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LIMITERS_LOCK = threading.Lock()


def limiter_for(transport, ceiling_requests: int) -> Limiter:
    """The Limiter of this open transport (made on first use with `ceiling_requests`; later
    calls set its ceiling). It lives as long as the transport object does."""
    with _LIMITERS_LOCK:
        limiter = _LIMITERS.get(transport)
        if limiter is None:
            limiter = _LIMITERS[transport] = Limiter(ceiling_requests)
            return limiter
    limiter.set_ceiling(ceiling_requests)
    return limiter
