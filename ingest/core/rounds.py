"""What a round of many streams reading at once moved, and in what time (pure).

A probe round (ingest.driver.probe_rounds) starts every rank's streams together, each stream a
short warm-up request and then the rest of its bytes (its body). A stream's bytes are known only
at its parts' ends, so each part is taken to move its bytes evenly. Two windows time the round:

- The **span**, from the first stream's first body byte to the last stream's last byte, every
  stream's bytes inside it (a stream still warming up when another's body began was moving bytes
  through the same pipes). On a link its flows share, a flow speeds up when others finish and
  the link stays full to the last byte: the span is its rate.
- The **core**, from the moment half the streams had their first body byte to the moment half
  had their last. Where each connection is capped (Toxiproxy's, a long path's TCP window), a
  flow's rate does not rise when others finish, so its average is its rate throughout; what the
  core leaves out is a rank the scheduler started late and a straggler, the edges of a round of
  tens of milliseconds on a busy machine, which pull the span below what a job's read gets.

The core on a shared link puts a flow's fast tail inside it, so there it reads faster than the
pipe carries a job; the span is that link's rate (BENCHMARKS: Rounds).

Both place a stream's warm-up evenly between its start and its body's first byte, which a shared
pipe does not: where the streams' bodies queue behind each other (a node's flows through one FIFO
leaf), their warm-ups were all served early, and the span counted warm-up bytes inside it that
the pipe had carried before it opened (a 5 MB/s egress measured at up to 5.5 on a loaded
machine). What a shared pipe was certainly seen to carry (carried_window) counts no byte outside
its window: the bodies over their span, or every byte over the whole round.

The span also holds requests (requests_inside): the streams that began their bodies after it
opened asked for both their parts inside it, and the model takes their time out at the request
rate the round measured (ingest.core.sharing.SharedRound).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class StreamSpan:
    """One stream of a round, in seconds from the round's start (the first rank's start)."""

    warmup_bytes: int
    first_s: float  # the first byte of its second request
    end_s: float  # its last byte
    body_bytes: int
    start_s: float = 0.0  # its first request (its rank's start: 0 for the first rank, later for a late one)

    def later(self, offset_s: float) -> "StreamSpan":
        """The same stream with every time offset_s later: a rank's spans, timed from its own
        start, on the axis of a round whose first rank started offset_s before it."""
        return StreamSpan(self.warmup_bytes, self.first_s + offset_s, self.end_s + offset_s, self.body_bytes,
                          self.start_s + offset_s)

    def bytes_between(self, lo_s: float, hi_s: float) -> float:
        """The bytes this stream moved in [lo_s, hi_s], each part's taken as flowing evenly."""
        moved = 0.0
        for start, stop, nbytes in ((self.start_s, self.first_s, self.warmup_bytes),
                                    (self.first_s, self.end_s, self.body_bytes)):
            inside = min(stop, hi_s) - max(start, lo_s)
            if nbytes and inside > 0:
                moved += nbytes * inside / (stop - start) if stop > start else nbytes
        return moved


# A core shorter than this share of the span is a few scheduler slices of a tiny round (a
# millisecond or two): its rate is noise, the span's is not.
CORE_FRACTION_MIN = 0.25


def _with_body(spans) -> list[StreamSpan]:
    """The streams whose second request moved bytes over some time (the rest have no body)."""
    return [s for s in spans if s.end_s > s.first_s]


def _window(spans, flows_capped: bool) -> tuple[float, float]:
    """(lo_s, hi_s) of steady_window, for streams that had a body."""
    lo_s, hi_s = min(s.first_s for s in spans), max(s.end_s for s in spans)
    if flows_capped:
        core_lo_s = statistics.median_high(s.first_s for s in spans)  # at least half under way
        core_hi_s = statistics.median_low(s.end_s for s in spans)  # at least half done
        if core_hi_s - core_lo_s >= CORE_FRACTION_MIN * (hi_s - lo_s):
            return core_lo_s, core_hi_s
    return lo_s, hi_s


def steady_window(spans, flows_capped: bool = False) -> tuple[int, float]:
    """(bytes, seconds) the round is timed over: its core where `flows_capped` (and the core is
    at least CORE_FRACTION_MIN of the span), else its span; (0, 0.0) when no stream had a body."""
    spans = _with_body(spans)
    if not spans:
        return 0, 0.0
    lo_s, hi_s = _window(spans, flows_capped)
    return int(sum(s.bytes_between(lo_s, hi_s) for s in spans)), hi_s - lo_s


def requests_inside(spans, flows_capped: bool = False) -> int:
    """The requests that took the pipe's time inside steady_window: both of each stream whose body
    began after the window opened. Such a stream asked for its warm-up and its body while the
    others' bytes flowed over a link the streams share, and where serving a request takes what
    moves the bytes (on one machine: the cores) that time was not the bytes'. A round of 2-8 MiB
    a stream on loopback got 0.46-0.93 of the rate the job's whole share got over its window; less
    these requests at the rate its own small requests got, 0.71-1.21 (two runs of `python -m
    bench.rounds`, medians of 5 repeats in each of 12 cells). Where each connection is capped (`flows_capped`),
    the flowing streams cannot take the time a waiting one leaves: none count."""
    spans = _with_body(spans)
    if flows_capped or not spans:
        return 0
    lo_s, _ = _window(spans, flows_capped)
    return 2 * sum(1 for s in spans if s.first_s > lo_s)


def overlap_s(spans) -> float:
    """How long every stream's body was flowing at once: the first last byte less the last first
    body byte; negative where a stream had finished before another's body began (a small round
    on busy cores runs its streams partly one after another), 0.0 when no stream had a body."""
    spans = _with_body(spans)
    if not spans:
        return 0.0
    return min(s.end_s for s in spans) - max(s.first_s for s in spans)


def carried_window(spans) -> tuple[int, float]:
    """(bytes, seconds) a pipe the streams share was certainly seen to carry: the bodies over their
    span (each body's bytes arrive after its first byte: all inside), or every byte over the whole
    round (from the first stream's start, before any request was sent), whichever gives the
    higher rate. Each is at most what the pipe carried over its window (the first misses the
    warm-ups that overlapped it, the second counts the start-up as pipe time), so the higher of
    the two is too; (0, 0.0) when no stream had a body."""
    spans = _with_body(spans)
    if not spans:
        return 0, 0.0
    lo_s, hi_s = min(s.first_s for s in spans), max(s.end_s for s in spans)
    bodies = (sum(s.body_bytes for s in spans), hi_s - lo_s)
    whole = (sum(s.warmup_bytes + s.body_bytes for s in spans), hi_s - min(s.start_s for s in spans))
    return max((bodies, whole), key=lambda w: w[0] / w[1] if w[1] > 0 else 0.0)
