"""What a round of many streams reading at once moved, and in what time (pure).

A probe round (ingest.driver.probe_rounds) starts every rank's streams together, each stream a
short warm-up request and then the rest of its bytes. On a busy machine the streams do not line
up: a rank scheduled late starts tens of milliseconds after the others, and one straggler ends
after the rest. In a round of 30-100 ms those edges are a third of it, and timing the bytes from
the first stream's start to the last one's end (the union) prices the pipe by its edges, not by
what the ranks got while all of them read - which is what a job's ranks see for most of its time.

So the rate is taken over the round's core: from the moment half the streams were under way to
the moment half had finished, counting every stream's bytes that crossed inside it. A stream is
taken to move its bytes evenly over each of its two parts (the warm-up from the round's start to
its second request's first byte, then the rest to its last byte).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class StreamSpan:
    """One stream of a round, in seconds from the round's start (its barrier)."""

    warmup_bytes: int
    first_s: float  # the first byte of its second request
    end_s: float  # its last byte
    body_bytes: int

    def bytes_between(self, lo_s: float, hi_s: float) -> float:
        """The bytes this stream moved in [lo_s, hi_s], each part's taken as flowing evenly."""
        moved = 0.0
        for start, stop, nbytes in ((0.0, self.first_s, self.warmup_bytes), (self.first_s, self.end_s, self.body_bytes)):
            inside = min(stop, hi_s) - max(start, lo_s)
            if nbytes and inside > 0:
                moved += nbytes * inside / (stop - start) if stop > start else nbytes
        return moved


# A core shorter than this share of the bodies' union is a few scheduler slices of a tiny round
# (a 5 MB round on loopback had cores of 1-3 ms in 16-20 ms): its rate is noise, the union's is not.
CORE_FRACTION_MIN = 0.25


def core_window(spans) -> tuple[int, float]:
    """(bytes, seconds) of the round's core: from the moment half the streams had their first body
    byte to the moment half had their last. Where that window is empty (streams that ran one after another) or
    under CORE_FRACTION_MIN of the union of the bodies (the first body byte to the last byte of
    all), the union."""
    spans = [s for s in spans if s.end_s > s.first_s]
    if not spans:
        return 0, 0.0
    lo_s = statistics.median_high(s.first_s for s in spans)  # at least half under way
    hi_s = statistics.median_low(s.end_s for s in spans)  # at least half done
    union_lo_s, union_hi_s = min(s.first_s for s in spans), max(s.end_s for s in spans)
    if hi_s - lo_s < CORE_FRACTION_MIN * (union_hi_s - union_lo_s):
        lo_s, hi_s = union_lo_s, union_hi_s
    return int(sum(s.bytes_between(lo_s, hi_s) for s in spans)), hi_s - lo_s
