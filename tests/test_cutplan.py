"""Many boxes read as one set of requests (ingest.core.cutplan), and a rank's stripe streamed band by band
(ingest.core.cutstripes), checked against numpy slicing."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest.core.cost import CostModel
from ingest.core.cutplan import (box_bytes, box_read_cost_bytes, box_runs, box_selection, box_spans, first_byte, gather_box,
                                 merge_runs, plan_spans, rank_share_box, source_order, split_axis, split_by_bytes)
from ingest.core.cutstripes import (band_cutouts, carry_over, choose_split, plan_stripe, rank_budget_bytes,
                                    split_by_stripes, stripe_box)
from ingest.formats.fits import FitsLayout


def _layout(shape, bitpix=-32, data_offset=2880):
    n = abs(bitpix) // 8
    for s in shape:
        n *= s
    return FitsLayout(source="mem", hdu=0, shape=shape, bitpix=bitpix, header_offset=0,
                      data_offset=data_offset, object_bytes=data_offset + n)


@st.composite
def _cube_and_boxes(draw):
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    boxes = []
    for _ in range(draw(st.integers(1, 8))):
        box = []
        for n in shape:
            a = draw(st.integers(0, n - 1))
            box.append((a, draw(st.integers(a + 1, n))))
        boxes.append(tuple(box))
    gap = draw(st.sampled_from([0, 1, 7, 64, 10**9]))
    chunk = draw(st.sampled_from([1, 5, 64, 4096]))
    return shape, boxes, gap, chunk


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cube_and_boxes())
def test_every_box_gathered_from_the_spans_equals_numpy_slicing(case):
    shape, boxes, gap, chunk = case
    layout = _layout(shape)
    cube = np.arange(np.prod(shape), dtype=">f4").reshape(shape)
    obj = np.zeros(layout.object_bytes, np.uint8)
    obj[layout.data_offset:] = np.frombuffer(cube.tobytes(), np.uint8)

    plan = plan_spans(layout, boxes, max_gap_bytes=gap, chunk_bytes=chunk)
    buffer = np.zeros(plan.buffer_bytes, np.uint8)
    for start, stop, at in zip(plan.request_starts, plan.request_stops, plan.request_buffer_offsets()):
        assert stop - start <= chunk
        buffer[at: at + stop - start] = obj[start:stop]
    for box in boxes:
        got = gather_box(plan, buffer, layout, box)
        np.testing.assert_array_equal(got, cube[tuple(slice(a, b) for a, b in box)])

    # The requests tile the spans exactly, and overlapping boxes' bytes are read once.
    assert int((plan.request_stops - plan.request_starts).sum()) == plan.wire_bytes
    covered = np.zeros(layout.object_bytes, bool)
    for box in boxes:
        view = np.zeros(shape, bool)
        view[tuple(slice(a, b) for a, b in box)] = True
        covered[layout.data_offset:] |= np.repeat(view.reshape(-1), 4)
    assert plan.needed_bytes == int(covered.sum())
    if gap == 0:
        assert plan.wire_bytes == plan.needed_bytes


def test_dense_boxes_close_their_gaps_into_one_long_span():
    layout = _layout((8, 64, 64))
    boxes = [((z, z + 1), (y, y + 16), (x, x + 16)) for z in range(8) for y in range(0, 64, 16) for x in range(0, 64, 16)]
    plan = plan_spans(layout, boxes, max_gap_bytes=1024, chunk_bytes=1 << 30)
    assert len(plan.span_starts) == 1 and plan.wire_bytes == layout.data_bytes
    sparse = plan_spans(layout, boxes[:1], max_gap_bytes=0, chunk_bytes=1 << 30)
    assert sparse.wire_bytes == sparse.needed_bytes == box_bytes(boxes[0], 4)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 1000), min_size=0, max_size=40), st.integers(1, 9))
def test_split_by_bytes_is_contiguous_complete_and_balanced(weights, n_ranks):
    parts = split_by_bytes(weights, n_ranks)
    assert len(parts) == n_ranks and parts[0][0] == 0 and parts[-1][1] == len(weights)
    assert all(a <= b for a, b in parts) and all(parts[i][1] == parts[i + 1][0] for i in range(n_ranks - 1))
    if weights and sum(weights):
        share = sum(weights) / n_ranks
        for a, b in parts:  # a rank is off its share by less than one item's weight
            assert sum(weights[a:b]) <= share + max(weights)


def test_first_byte_is_the_offset_of_the_boxs_first_voxel():
    assert first_byte(_layout((4, 5, 6)), ((1, 2), (2, 3), (3, 4))) == 2880 + 4 * (30 + 12 + 3)


def test_ranks_split_along_the_axis_the_boxes_reach_least_far():
    # Boxes deep in z but short in y: splitting by y shares fewer bytes between ranks.
    boxes = [((0, 40), (y, y + 2), (0, 5)) for y in range(0, 60, 3)]
    assert split_axis(boxes, (50, 64, 64)) == 1
    assert split_axis([((z, z + 1), (0, 60), (0, 5)) for z in range(10)], (50, 64, 64)) == 0


def _object(layout, shape):
    cube = np.arange(np.prod(shape), dtype=">f4").reshape(shape)
    obj = np.zeros(layout.object_bytes, np.uint8)
    obj[layout.data_offset:] = np.frombuffer(cube.tobytes(), np.uint8)
    return cube, obj


def _stream(plan, layout, boxes, obj):
    """What a rank does with a stripe plan, the reads served from `obj`: {box index: array}, and
    the (start, stop) of every request, and the largest partial bytes held at once."""
    buffer = np.zeros(plan.buffer_bytes, np.uint8)
    got, partials, requests, held_max = {}, {}, [], 0
    for band in plan.bands:
        carry_over(buffer, band)
        held = band.held
        for start, stop, at in zip(held.request_starts, held.request_stops, held.request_buffer_offsets()):
            buffer[at: at + stop - start] = obj[start:stop]
            requests.append((int(start), int(stop)))
        for i, raw in band_cutouts(band, buffer, layout, boxes, partials):
            assert i not in got, f"box {i} handed on twice"
            got[i] = raw.copy()
            held_max = max(held_max, sum(a.nbytes for a in partials.values()))
    assert not partials, "a partial cut-out was never finished"
    return got, requests, held_max


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cube_and_boxes(), st.sampled_from([1, 64, 700, 5000, 10**9]), st.sampled_from([0.0, 0.002]))
def test_a_stripe_streamed_band_by_band_hands_on_every_box_equal_to_numpy_reading_each_byte_once(case, budget,
                                                                                                 latency_s):
    shape, boxes, gap, chunk = case
    layout = _layout(shape)
    cube, obj = _object(layout, shape)
    cost = CostModel(latency_s=latency_s, bandwidth_bytes_per_s=1e6)
    for split in sorted({split_axis(boxes, shape), 0}):
        plan = plan_stripe(layout, boxes, split=split, budget_bytes=budget, max_gap_bytes=gap, chunk_bytes=chunk,
                           cost=cost, threads=2)
        got, requests, held_max = _stream(plan, layout, boxes, obj)
        assert sorted(got) == list(range(len(boxes)))
        for i, box in enumerate(boxes):
            np.testing.assert_array_equal(got[i], cube[tuple(slice(a, b) for a, b in box)])
        # Requests are at most chunk_bytes, never overlap (each byte read once per rank) and
        # stay inside the stripe's planes.
        requests.sort()
        assert all(b - a <= chunk for a, b in requests)
        assert all(requests[k][1] <= requests[k + 1][0] for k in range(len(requests) - 1))
        assert sum(b - a for a, b in requests) == plan.wire_bytes
        p = 0 if shape[0] > 1 or len(shape) == 1 else next((a for a, n in enumerate(shape[:-1]) if n > 1), 0)
        lo, hi = plan.stripe[p]
        stride = layout.strides_bytes[p]
        assert all(layout.data_offset + lo * stride <= a and b <= layout.data_offset + hi * stride
                   for a, b in requests)
        # Each band read the way its own prediction called cheaper, and the bound holds what was held.
        for band in plan.bands:
            assert band.mode == ("spans" if band.choice["spans_s"] < band.choice["stream_s"] else "stream")
            assert band.choice["spans_bytes"] <= band.choice["stream_bytes"]
        assert held_max <= max(b.partial_bytes for b in plan.bands)
        assert plan.memory_bytes >= plan.buffer_bytes + max(box_bytes(b, 4) for b in boxes)
        assert np.isclose(plan.source_requests.sum(), plan.n_requests)
        assert np.isclose(plan.source_wire_bytes.sum(), plan.wire_bytes)


def test_dense_cutouts_stream_their_stripe_and_sparse_ones_read_their_spans():
    layout = _layout((64, 64, 64))
    cost = CostModel(latency_s=0.002, bandwidth_bytes_per_s=75e6)
    dense = [((z, z + 8), (y, y + 8), (x, x + 8)) for z in range(0, 57, 4) for y in range(0, 57, 8)
             for x in range(0, 57, 8)]
    plan = plan_stripe(layout, dense, split=0, budget_bytes=1 << 30, max_gap_bytes=cost.gap_bytes,
                       chunk_bytes=1 << 20, cost=cost, threads=4)
    assert [b.mode for b in plan.bands] == ["stream"] and plan.n_requests == 1
    assert "stream in 1" in plan.choice_text()
    sparse = [((10, 12), (5, 7), (5, 7)), ((40, 42), (50, 52), (50, 52))]
    plan = plan_stripe(layout, sparse, split=0, budget_bytes=1 << 30, max_gap_bytes=0, chunk_bytes=1 << 20,
                       cost=cost, threads=4)
    assert {b.mode for b in plan.bands} == {"spans"} and plan.wire_bytes == sum(box_bytes(b, 4) for b in sparse)
    assert "spans in" in plan.choice_text()


def test_a_small_budget_cuts_the_stripe_into_bands_and_keeps_the_fewest_bytes_across_them():
    # Sixteen shallow boxes in every plane: carrying a box's planes into the next band holds less
    # than every open box's own array; one deep thin box alone: its own array holds less.
    layout = _layout((32, 16, 16))
    cost = CostModel(latency_s=0.0, bandwidth_bytes_per_s=1e9)
    plane_bytes = 16 * 16 * 4
    shallow = [((z, z + 3), (y, y + 4), (x, x + 4)) for z in range(0, 29, 2) for y in (0, 4, 8, 12) for x in (0, 4, 8, 12)]
    plan = plan_stripe(layout, shallow, split=0, budget_bytes=8 * plane_bytes, max_gap_bytes=0, chunk_bytes=1 << 20,
                       cost=cost, threads=1)
    assert len(plan.bands) > 3 and all(not b.fills for b in plan.bands)
    assert plan.buffer_bytes <= 8 * plane_bytes
    deep = [((0, 32), (0, 1), (0, 1))]
    plan = plan_stripe(layout, deep, split=0, budget_bytes=8 * plane_bytes, max_gap_bytes=10**9,
                       chunk_bytes=1 << 20, cost=CostModel(latency_s=1.0, bandwidth_bytes_per_s=1e9), threads=1)
    assert len(plan.bands) > 1 and any(b.fills for b in plan.bands)
    _, obj = _object(layout, (32, 16, 16))
    got, _, _ = _stream(plan, layout, deep, obj)
    assert got[0].shape == (32, 1, 1)


def test_choose_split_keeps_ranks_contiguous_and_says_why():
    layout = _layout((64, 64, 64))
    cost = CostModel(latency_s=0.002, bandwidth_bytes_per_s=75e6)
    boxes = [((z, z + 4), (y, y + 4), (0, 64)) for z in range(0, 60, 6) for y in range(0, 60, 6)]
    axis, order, parts, why = choose_split(layout, boxes, 3, max_gap_bytes=cost.gap_bytes, chunk_bytes=1 << 20,
                                           cost=cost, threads=2)
    assert sorted(order) == list(range(len(boxes))) and parts[0][0] == 0 and parts[-1][1] == len(boxes)
    assert axis in (0, 1) and f"axis {axis}" in why and "predicted" in why
    starts = [boxes[i][axis][0] for i in order]
    assert starts == sorted(starts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cube_and_boxes())
def test_a_boxs_spans_in_closed_form_are_its_runs_merged_by_the_gap_rule(case):
    shape, boxes, gap, _ = case
    layout = _layout(shape)
    for box in boxes:
        starts, stops, _ = merge_runs(*box_runs(layout, box), gap)
        got = box_spans(layout, box, gap)
        np.testing.assert_array_equal(got[0], starts)
        np.testing.assert_array_equal(got[1], stops)
        assert box_read_cost_bytes(layout, box, gap) == int((stops - starts).sum()) + len(starts) * gap


def test_stripes_are_balanced_by_what_the_spans_read_not_by_the_boxes_own_bytes():
    # 100 planes of 8 x 8 float32 (256 B): a 2 x 2 box's rows merge across its 10 planes (the gap
    # rule bridges a plane), so each box alone reads 10 planes' width, not its 160 bytes. Ten boxes
    # crowd the top planes and ten spread over the rest: equal shares of the boxes' own bytes would
    # give one rank planes 0-19 and the other planes 10-100.
    layout = _layout((100, 8, 8))
    boxes = [((z, z + 10), (0, 2), (0, 2)) for z in range(10)] + \
            [((z, z + 10), (4, 6), (4, 6)) for z in range(10, 91, 9)]
    order = source_order(layout, boxes, 0)
    parts = split_by_stripes(layout, boxes, order, 2, 0, max_gap_bytes=1024)
    planes = [max(boxes[i][0][1] for i in order[a:b]) - min(boxes[i][0][0] for i in order[a:b]) for a, b in parts]
    assert max(planes) <= 60 and sum(planes) <= 100 + 10, planes


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cube_and_boxes(), st.integers(1, 5))
def test_split_by_stripes_is_contiguous_complete_and_no_worse_than_an_equal_share_of_the_cutouts(case, n_ranks):
    shape, boxes, gap, _ = case
    layout = _layout(shape)
    axis = split_axis(boxes, shape)
    order = source_order(layout, boxes, axis)
    parts = split_by_stripes(layout, boxes, order, n_ranks, axis, max_gap_bytes=gap)
    assert len(parts) == n_ranks and parts[0][0] == 0 and parts[-1][1] == len(boxes)
    assert all(a <= b for a, b in parts) and all(parts[i][1] == parts[i + 1][0] for i in range(n_ranks - 1))

    def largest(split):  # the largest rank's read: the fewer of its stripe's bytes and its boxes' cost alone
        worst = 0
        for a, b in split:
            if a < b:
                mine = [boxes[i] for i in order[a:b]]
                p = next((k for k, n in enumerate(shape[:-1]) if n > 1), 0)
                stripe = stripe_box(shape, mine, p, axis)
                alone = 0
                for x in mine:
                    starts, stops = box_spans(layout, x, gap)
                    alone += int((stops - starts).sum()) + len(starts) * gap
                worst = max(worst, min(box_bytes(stripe, 4), alone))
        return worst

    by_bytes = split_by_bytes([box_bytes(boxes[i], 4) for i in order], n_ranks)
    assert largest(parts) <= largest(by_bytes) * (1 + 1e-6) + 1


@given(_cube_and_boxes(), st.integers(1, 12))
def test_a_ranks_share_of_the_boxes_lies_in_their_bounding_box_and_n_shares_cover_its_planes(case, n_ranks):
    shape, boxes, _, _ = case
    share = rank_share_box(boxes, n_ranks)
    box_selection(share, shape)  # a box of the cube: a selection the tuner can take
    lo = [min(b[d][0] for b in boxes) for d in range(len(shape))]
    hi = [max(b[d][1] for b in boxes) for d in range(len(shape))]
    assert all(lo[d] <= a < b <= hi[d] for d, (a, b) in enumerate(share))
    assert list(share[1:]) == list(zip(lo[1:], hi[1:]))  # whole along every axis but the planes'
    planes = share[0][1] - share[0][0]
    assert planes * n_ranks >= hi[0] - lo[0] > (planes - 1) * n_ranks  # n shares just cover the planes


def test_a_ranks_band_budget_gives_back_what_it_holds_beyond_the_leanest_rank():
    mib = 1 << 20
    assert rank_budget_bytes(256 * mib, [425 * mib, 400 * mib, 401 * mib], 0) == 231 * mib
    assert rank_budget_bytes(256 * mib, [425 * mib, 400 * mib, 401 * mib], 1) == 256 * mib  # the leanest
    assert rank_budget_bytes(256 * mib, [425 * mib, 400 * mib, 401 * mib], 2) == 255 * mib
    assert rank_budget_bytes(256 * mib, [900 * mib, 400 * mib], 0) == 64 * mib  # never below a quarter
    assert rank_budget_bytes(256 * mib, [None, 400 * mib], 0) == 256 * mib  # unknown: the budget as set
    assert rank_budget_bytes(256 * mib, [None], 0) == 256 * mib
    assert rank_budget_bytes(256 * mib, [300 * mib], 0) == 256 * mib  # one rank: nobody leaner
