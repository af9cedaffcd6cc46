"""A round's span and core (core/rounds.py): checked against the streams' running totals
interpolated by numpy, and on the rounds that decided their design (capped flows with a late
rank and a straggler, a fair pipe whose flows finish apart, a tiny round)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ingest.core.rounds import CORE_FRACTION_MIN, StreamSpan, overlap_s, requests_inside, steady_window

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
@given(spans_st, st.booleans())
def test_the_window_counts_the_bytes_the_running_totals_give(spans, capped):
    nbytes, seconds = steady_window(spans, flows_capped=capped)
    lo_s, hi_s = min(s.first_s for s in spans), max(s.end_s for s in spans)
    firsts, ends = np.sort([s.first_s for s in spans]), np.sort([s.end_s for s in spans])
    core_lo_s, core_hi_s = float(firsts[len(spans) // 2]), float(ends[(len(spans) - 1) // 2])
    if capped and core_hi_s - core_lo_s >= CORE_FRACTION_MIN * (hi_s - lo_s):
        lo_s, hi_s = core_lo_s, core_hi_s
    elif not capped:  # the span holds every body, and no more than every stream's bytes
        assert sum(s.body_bytes for s in spans) - 1 <= nbytes <= sum(s.warmup_bytes + s.body_bytes for s in spans)
    assert seconds == pytest.approx(hi_s - lo_s)
    assert nbytes == pytest.approx(_interpolated_bytes(spans, lo_s, hi_s), rel=1e-9, abs=1)
    # no window moves bytes faster than all the streams at their parts' rates at once
    peak = sum(max(s.warmup_bytes / s.first_s, s.body_bytes / (s.end_s - s.first_s)) for s in spans)
    assert nbytes / seconds <= peak * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(spans_st, st.floats(0.1, 10.0))
def test_the_rate_scales_with_time(spans, k):
    nbytes, seconds = steady_window(spans, flows_capped=True)
    scaled = [StreamSpan(s.warmup_bytes, s.first_s * k, s.end_s * k, s.body_bytes) for s in spans]
    nbytes_k, seconds_k = steady_window(scaled, flows_capped=True)
    assert seconds_k == pytest.approx(seconds * k) and abs(nbytes_k - nbytes) <= 1


def test_streams_in_step_give_their_sum():
    spans = [StreamSpan(MiB, 0.01, 0.05, 4 * MiB)] * 8  # 100 MiB/s each, all at once
    nbytes, seconds = steady_window(spans)
    assert nbytes / seconds == pytest.approx(8 * 4 * MiB / 0.04)


def test_a_fair_pipe_whose_flows_finish_apart_is_priced_by_the_span():
    """Two flows share 10 MB/s fairly from 0.02 s: A's 1 MB body ends at 0.22 s (5 MB/s each), then
    B alone gets the pipe and its 3 MB end at 0.42 s. The span gives 10 MB/s; the core (ending
    when half the flows were done, at 0.22 s) counts B at its 7.5 MB/s average: 12.5."""
    a = StreamSpan(100_000, 0.02, 0.22, 1_000_000)
    b = StreamSpan(100_000, 0.02, 0.42, 3_000_000)
    nbytes, seconds = steady_window([a, b])
    assert nbytes / seconds == pytest.approx(10e6)
    nbytes, seconds = steady_window([a, b], flows_capped=True)
    assert nbytes / seconds == pytest.approx(12.5e6)


def test_capped_flows_with_a_late_rank_and_a_straggler_are_priced_by_the_core():
    """Eight flows capped at 50 MB/s each for 40 ms; two start 10 ms late and one ends 20 ms late
    (a rank scheduled late, a straggler). The span gives 275 MB/s; the core 371, near the 400
    they move together."""
    rate = 50e6
    spans = [StreamSpan(int(rate * 0.01), 0.01, 0.05, int(rate * 0.04))] * 5
    spans += [StreamSpan(int(rate * 0.01), 0.02, 0.06, int(rate * 0.04))] * 2
    spans += [StreamSpan(int(rate * 0.01), 0.01, 0.07, int(rate * 0.04))]
    nbytes, seconds = steady_window(spans)
    assert nbytes / seconds == pytest.approx(275e6, rel=0.01)
    nbytes, seconds = steady_window(spans, flows_capped=True)
    assert nbytes / seconds == pytest.approx(371e6, rel=0.01)


def test_a_core_of_a_few_milliseconds_in_a_tiny_round_is_not_its_rate():
    """Half the streams end just after the other half begin (a 5 MB round on a busy machine): the
    1 ms core would price the link by one scheduler slice; the span is used."""
    spans = [StreamSpan(MiB // 4, 0.002, 0.010, MiB)] * 4 + [StreamSpan(MiB // 4, 0.009, 0.018, MiB)] * 4
    assert steady_window(spans, flows_capped=True) == steady_window(spans)
    assert steady_window(spans)[1] == pytest.approx(0.016)


def test_no_body_no_window():
    assert steady_window([StreamSpan(100, 0.01, 0.01, 0)]) == (0, 0.0)


@settings(max_examples=60, deadline=None)
@given(spans_st)
def test_the_overlap_is_when_every_body_flowed_at_once(spans):
    """Against numpy: the streams whose bodies are flowing at a time t, counted on a grid; the
    overlap is positive exactly where some t has all of them, and is the length of those ts."""
    got = overlap_s(spans)
    firsts, ends = np.array([s.first_s for s in spans]), np.array([s.end_s for s in spans])
    grid = np.linspace(0.0, ends.max(), 4001)
    flowing = ((grid[:, None] >= firsts) & (grid[:, None] <= ends)).sum(axis=1)
    all_at_once = grid[flowing == len(spans)]
    if all_at_once.size > 1:
        assert got == pytest.approx(all_at_once[-1] - all_at_once[0], abs=2 * grid[1])
    else:
        assert got <= 2 * grid[1]  # none (or one grid step's worth) at once
    assert got == pytest.approx(ends.min() - firsts.max())


def test_a_round_whose_streams_ran_one_after_another_has_no_overlap():
    one, two = StreamSpan(MiB, 0.002, 0.010, 3 * MiB), StreamSpan(MiB, 0.012, 0.020, 3 * MiB)
    assert overlap_s([one, two]) == pytest.approx(-0.002) and overlap_s([]) == 0.0
    assert overlap_s([one, StreamSpan(MiB, 0.004, 0.004, 0)]) == pytest.approx(0.008)  # no body: not a stream


@settings(max_examples=60, deadline=None)
@given(spans_st)
def test_the_window_holds_both_requests_of_every_stream_that_began_its_body_inside_it(spans):
    """Against numpy: the streams whose first body byte came after the span opened (the earliest
    first body byte), two requests each; none where each connection is capped."""
    firsts = np.array([s.first_s for s in spans])
    assert requests_inside(spans) == 2 * int((firsts > firsts.min()).sum())
    assert requests_inside(spans, flows_capped=True) == 0
    assert 0 <= requests_inside(spans) <= 2 * (len(spans) - 1)


def test_streams_started_late_count_their_requests_and_empty_ones_do_not():
    early, late = StreamSpan(MiB, 0.002, 0.010, 3 * MiB), StreamSpan(MiB, 0.006, 0.020, 3 * MiB)
    assert requests_inside([early, late, late]) == 4
    assert requests_inside([early, early]) == 0  # all began at once: their requests came before
    assert requests_inside([early, StreamSpan(MiB, 0.009, 0.009, 0)]) == 0 and requests_inside([]) == 0
