"""A round's core window (core/rounds.py): checked against the streams' running totals
interpolated by numpy, and on the rounds that made it (skewed starts, a straggler, streams in
turn)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ingest.core.rounds import CORE_FRACTION_MIN, StreamSpan, core_window

MiB = 1 << 20


def _interpolated_bytes(spans, lo_s: float, hi_s: float) -> float:
    """The same bytes another way: each stream's running total, linear between its knots (the
    start, its first body byte, its last byte), read at the window's two ends."""
    moved = 0.0
    for s in spans:
        knots_s = [0.0, s.first_s, s.end_s]
        totals = [0, s.warmup_bytes, s.warmup_bytes + s.body_bytes]
        moved += float(np.diff(np.interp([lo_s, hi_s], knots_s, totals))[0])
    return moved


spans_st = st.lists(
    st.tuples(st.integers(1, 4 * MiB), st.floats(0.001, 0.2), st.floats(0.001, 0.3), st.integers(1, 16 * MiB))
    .map(lambda a: StreamSpan(a[0], a[1], a[1] + a[2], a[3])), min_size=1, max_size=16)


@settings(max_examples=60, deadline=None)
@given(spans_st)
def test_core_window_counts_the_bytes_a_time_grid_sees(spans):
    nbytes, seconds = core_window(spans)
    firsts, ends = np.sort([s.first_s for s in spans]), np.sort([s.end_s for s in spans])
    lo_s, hi_s = float(firsts[len(spans) // 2]), float(ends[(len(spans) - 1) // 2])
    union_lo_s, union_hi_s = min(s.first_s for s in spans), max(s.end_s for s in spans)
    if hi_s - lo_s < CORE_FRACTION_MIN * (union_hi_s - union_lo_s):
        lo_s, hi_s = union_lo_s, union_hi_s
    assert seconds == pytest.approx(hi_s - lo_s)
    assert nbytes == pytest.approx(_interpolated_bytes(spans, lo_s, hi_s), rel=1e-9, abs=1)
    # No window moves more than every stream's bytes, nor faster than all of them at their peaks.
    assert nbytes <= sum(s.warmup_bytes + s.body_bytes for s in spans)
    peak = sum(max(s.warmup_bytes / s.first_s, s.body_bytes / (s.end_s - s.first_s)) for s in spans)
    assert nbytes / seconds <= peak * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(spans_st, st.floats(0.1, 10.0))
def test_the_rate_scales_with_time(spans, k):
    nbytes, seconds = core_window(spans)
    scaled = [StreamSpan(s.warmup_bytes, s.first_s * k, s.end_s * k, s.body_bytes) for s in spans]
    nbytes_k, seconds_k = core_window(scaled)
    assert seconds_k == pytest.approx(seconds * k) and abs(nbytes_k - nbytes) <= 1


def test_streams_in_step_give_their_sum():
    spans = [StreamSpan(MiB, 0.01, 0.05, 4 * MiB)] * 8  # 100 MiB/s each, all at once
    nbytes, seconds = core_window(spans)
    assert nbytes / seconds == pytest.approx(8 * 4 * MiB / 0.04)


def test_skewed_starts_and_a_straggler_do_not_price_the_pipe():
    """Eight streams share a 400 MB/s pipe for 40 ms; two ranks' streams start 10 ms late and one
    ends 20 ms late. The union (first body byte to last byte) gives 267 MB/s; the core 371."""
    rate = 50e6
    spans = [StreamSpan(int(rate * 0.01), 0.01, 0.05, int(rate * 0.04))] * 5
    spans += [StreamSpan(int(rate * 0.01), 0.02, 0.06, int(rate * 0.04))] * 2
    spans += [StreamSpan(int(rate * 0.01), 0.01, 0.07, int(rate * 0.04))]
    nbytes, seconds = core_window(spans)
    union_bps = sum(s.body_bytes for s in spans) / (0.07 - 0.01)
    assert union_bps == pytest.approx(267e6, rel=0.01)
    assert nbytes / seconds == pytest.approx(371e6, rel=0.01)


def test_streams_in_turn_fall_back_to_the_union():
    """Streams that ran one after another (a FIFO pipe) have no common core: the union is their rate."""
    spans = [StreamSpan(1, 0.001 + k * 0.01, 0.001 + (k + 1) * 0.01 - 1e-4, MiB) for k in range(4)]
    nbytes, seconds = core_window(spans)
    assert seconds > 0 and 0.5 * MiB / 0.01 < nbytes / seconds < 1.2 * MiB / 0.01


def test_a_core_of_a_few_milliseconds_in_a_tiny_round_is_not_its_rate():
    """Half the streams end just after the other half begin (a 5 MB round on a busy machine): the
    1 ms core would price the pipe by one scheduler slice; the union is used."""
    spans = [StreamSpan(MiB // 4, 0.002, 0.010, MiB)] * 4 + [StreamSpan(MiB // 4, 0.009, 0.018, MiB)] * 4
    nbytes, seconds = core_window(spans)
    assert seconds == pytest.approx(0.016)
    assert nbytes == pytest.approx(8 * MiB + 4 * (MiB // 4) * (0.009 - 0.002) / 0.009, rel=1e-6)


def test_no_body_no_window():
    assert core_window([StreamSpan(100, 0.01, 0.01, 0)]) == (0, 0.0)
