"""How many requests a rank keeps in flight against a store that throttles, and how long a
throttled request waits: additive increase, multiplicative decrease (AIMD), and full jitter.

A store answers `503 SlowDown` (or `429`, or refuses connections) when more requests arrive
than it serves at once. Retrying each request on its own keeps the same number in flight, so the
store keeps refusing; lowering the number in flight is what ends the throttling. The rule is
TCP's congestion avoidance, which the AWS SDKs' adaptive retry mode applies to a send rate:

- a throttle multiplies the limit by `decrease` (0.5), never below `floor_requests` (1), once per
  generation: requests already in flight when the limit fell were sent under the old limit, so
  their throttles say nothing new (without this, 16 throttles of one burst would take 16 to 1);
- each success adds `increase_per_window / limit`, so the limit grows by about
  `increase_per_window` requests per window of `limit` successes, up to the ceiling;
- `floor(limit)` requests are admitted at once.

Several ranks each halving on their own throttles share the store fairly (AIMD converges to
equal shares); full jitter on the backoff keeps them from coming back in lockstep.

Pure: numbers in, numbers out; the random draw is an argument. The limiter threads and the
native engine's loop share is `ingest.engine.throttle`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ingest.errors import ConfigError


@dataclass(frozen=True)
class AimdRule:
    """The constants of the rule: the factor a throttle multiplies the limit by, the requests a
    window of successes adds, the fewest requests ever admitted."""

    decrease: float = 0.5  # multiplicative decrease on a throttle, in (0, 1)
    increase_per_window: float = 1.0  # requests added per window of `limit` successes, > 0
    floor_requests: int = 1  # the limit never falls below this many requests in flight, >= 1

    def __post_init__(self):
        if not 0.0 < self.decrease < 1.0:
            raise ConfigError(f"decrease: {self.decrease!r} must lie strictly between 0 and 1 (a factor)")
        if not self.increase_per_window > 0.0:
            raise ConfigError(f"increase_per_window: {self.increase_per_window!r} must be > 0 (requests per window)")
        if int(self.floor_requests) != self.floor_requests or self.floor_requests < 1:
            raise ConfigError(f"floor_requests: {self.floor_requests!r} must be an integer >= 1 (requests)")


def admitted(limit: float, rule: AimdRule = AimdRule()) -> int:
    """Requests in flight the limit allows: its whole part, at least the floor."""
    return max(rule.floor_requests, int(math.floor(limit)))


def after_success(limit: float, ceiling_requests: int, rule: AimdRule = AimdRule()) -> float:
    """The limit after one success: + increase_per_window / limit, capped at the ceiling (which
    is itself never below the floor)."""
    top = max(rule.floor_requests, ceiling_requests)
    return min(float(top), limit + rule.increase_per_window / max(limit, 1.0))


def after_throttle(limit: float, generation: int, sent_generation: int,
                   rule: AimdRule = AimdRule()) -> tuple[float, int]:
    """(limit, generation) after a throttle of a request sent in `sent_generation`: decreased
    and the generation advanced when the request saw the current limit; unchanged when it was
    sent before the last decrease (that decrease already answered the same overload)."""
    if sent_generation != generation:
        return limit, generation
    return max(float(rule.floor_requests), limit * rule.decrease), generation + 1


def full_jitter_s(attempt: int, base_s: float, cap_s: float, draw: float) -> float:
    """Backoff before retry `attempt` (1, 2, ...): `draw` (uniform in [0, 1)) times
    min(cap_s, base_s * 2**(attempt - 1)). Full jitter spreads clients hit by the same overload
    over the whole interval, so they do not return together (AWS architecture blog)."""
    if attempt < 1:
        raise ValueError(f"attempt: {attempt!r} must be >= 1")
    if not 0.0 <= draw <= 1.0:
        raise ValueError(f"draw: {draw!r} must lie in [0, 1]")
    # min() before the power grows past a float: attempt 2000 must not overflow.
    doublings = min(attempt - 1, 1023)
    return draw * min(cap_s, base_s * 2.0 ** doublings)
