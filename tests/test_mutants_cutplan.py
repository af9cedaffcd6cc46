"""ingest.core.cutplan's refusals, report and tie-breaks spelled out, and its documented fast
path checked: the tests that kill the mutants scripts/mutation.sh found surviving against
tests/test_cutplan.py's properties (docs/testing.md)."""
from __future__ import annotations

import numpy as np
import pytest

from ingest.core.cutplan import (SpanPlan, box_runs, box_selection, box_spans, gather_box, merge_runs, plan_spans,
                                 rank_share_box, source_order, split_axis, split_by_bytes)
from ingest.core.selection import Selection
from ingest.errors import RegionError
from ingest.formats.fits import FitsLayout


def _layout(shape, data_offset=2880):
    return FitsLayout(source="mem", hdu=0, shape=shape, bitpix=-32, header_offset=0, data_offset=data_offset,
                      object_bytes=data_offset + 4 * int(np.prod(shape)))


def _filled(plan, layout, shape):
    cube = np.arange(np.prod(shape), dtype=">f4").reshape(shape)
    obj = np.zeros(layout.object_bytes, np.uint8)
    obj[layout.data_offset:] = np.frombuffer(cube.tobytes(), np.uint8)
    buffer = np.concatenate([obj[a:b] for a, b in zip(plan.span_starts, plan.span_stops)])
    return cube, buffer


def test_a_rank_share_is_the_bounding_box_with_its_planes_split_rounding_up():
    boxes = [((2, 5), (1, 3), (0, 2)), ((9, 12), (3, 5), (1, 4))]  # bounds: planes 2..12, rows 1..5, columns 0..4
    assert rank_share_box(boxes, 3) == ((2, 6), (1, 5), (0, 4))  # 10 planes / 3 ranks: 4 each
    assert rank_share_box(boxes, 1) == ((2, 12), (1, 5), (0, 4))


def test_a_rank_share_needs_boxes_and_ranks():
    for boxes, n_ranks in (([], 2), ([((0, 4), (0, 4))], 0)):
        with pytest.raises(ValueError, match=rf"rank_share_box: {len(boxes)} box\(es\), {n_ranks} rank\(s\): "
                                             r"need at least one of each"):
            rank_share_box(boxes, n_ranks)


def test_plan_spans_refuses_no_boxes_a_negative_gap_and_empty_requests_by_name():
    layout = _layout((4, 4))
    with pytest.raises(RegionError, match=r"^plan_spans: no boxes to read$"):
        plan_spans(layout, [], max_gap_bytes=0, chunk_bytes=8)
    for gap, chunk in ((-1, 8), (0, 0)):
        with pytest.raises(RegionError, match=rf"plan_spans: max_gap_bytes {gap} must be >= 0 and chunk_bytes "
                                              rf"{chunk} >= 1"):
            plan_spans(layout, [((0, 1), (0, 1))], max_gap_bytes=gap, chunk_bytes=chunk)


def test_the_plans_report_says_what_was_read_and_why():
    # two 1-voxel boxes 3 voxels apart in a row: 8 bytes needed; a 12-byte gap closes into one
    # 20-byte span, cut into requests of at most 8 bytes
    plan = plan_spans(_layout((2, 8)), [((0, 1), (1, 2)), ((0, 1), (5, 6))], max_gap_bytes=12, chunk_bytes=8)
    assert (plan.max_gap_bytes, plan.chunk_bytes) == (12, 8)
    assert plan.describe() == {"requests": 3, "spans": 1, "bytes_needed": 8, "bytes_wire": 20, "max_gap_bytes": 12,
                               "chunk_bytes": 8, "read_amplification": 2.5}
    odd = SpanPlan(np.array([0]), np.array([7]), np.array([0]), np.array([7]), 3, 0, 8)
    assert odd.describe()["read_amplification"] == 2.3333
    empty = SpanPlan(*(np.zeros(0, np.int64),) * 4, 0, 0, 8)
    assert empty.describe()["read_amplification"] == 1.0


def test_a_box_whose_runs_lie_end_to_end_in_one_span_is_a_view_of_the_buffer():
    shape = (3, 4, 5)
    layout = _layout(shape)
    box = ((1, 3), (0, 4), (0, 5))  # two whole planes: one stretch of the object
    plan = plan_spans(layout, [box], max_gap_bytes=0, chunk_bytes=64)
    cube, buffer = _filled(plan, layout, shape)
    got = gather_box(plan, buffer, layout, box)
    assert np.array_equal(got, cube[1:3]) and np.shares_memory(got, buffer)


def test_split_by_bytes_cuts_where_an_items_midpoint_passes_the_share():
    # items of 3 and 1 bytes on 2 ranks: the first item's midpoint (1.5) is below the share (2)
    assert split_by_bytes([3, 1], 2) == [(0, 1), (1, 2)]
    assert split_by_bytes([1, 3], 2) == [(0, 1), (1, 2)]
    assert split_by_bytes([2, 2, 2], 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(RegionError, match=r"split_by_bytes: 0 ranks"):
        split_by_bytes([1, 2], 0)


def test_the_split_axis_is_the_least_reached_relative_to_its_length_ties_to_the_later_axis():
    assert split_axis([((0, 1), (0, 1), (0, 5))], (1, 1, 5)) == 0  # no axis but the innermost has 2 pixels
    assert split_axis([((0, 1), (0, 3), (0, 4))], (2, 3, 4)) == 0  # a 2-pixel axis is a candidate
    assert split_axis([((0, 5), (0, 2), (0, 5))], (10, 2, 5)) == 0  # 5/10 beats 2/2, not 5*10 vs 2*2
    assert split_axis([((0, 2), (0, 2), (0, 3))], (4, 4, 3)) == 1  # a tie at 0.5 goes to the later axis


def test_a_box_inside_one_span_is_gathered_without_listing_its_runs(monkeypatch):
    """The fast path: first and last run in one span (the first span too, and a box ending
    exactly at its span's end) needs no run offsets."""
    import ingest.core.cutplan as cutplan

    shape = (3, 4, 5)
    layout = _layout(shape)
    boxes = [((0, 2), (1, 3), (0, 5)), ((0, 3), (0, 4), (2, 4)), ((2, 3), (3, 4), (3, 5))]
    for box in boxes:
        plan = plan_spans(layout, [box], max_gap_bytes=10**6, chunk_bytes=64)  # one span, ending at the box's end
        cube, buffer = _filled(plan, layout, shape)
        monkeypatch.setattr(cutplan, "run_offsets", lambda lat: pytest.fail("listed every run"))
        got = gather_box(plan, buffer, layout, box)
        monkeypatch.undo()
        assert np.array_equal(got, cube[tuple(slice(a, b) for a, b in box)])


def test_a_box_over_several_spans_is_gathered_from_each_and_refused_when_the_plan_lacks_it():
    shape = (2, 5)
    layout = _layout(shape)
    box, between = ((0, 2), (1, 3)), ((0, 1), (4, 5))
    alone = plan_spans(layout, [box], max_gap_bytes=0, chunk_bytes=64)  # its 2 runs: 2 spans, end to end in the buffer
    cube, buffer = _filled(alone, layout, shape)
    got = gather_box(alone, buffer, layout, box)
    assert np.array_equal(got, cube[0:2, 1:3]) and np.shares_memory(got, buffer)
    both = plan_spans(layout, [box, between], max_gap_bytes=0, chunk_bytes=64)  # a span between its runs
    cube, buffer = _filled(both, layout, shape)
    assert np.array_equal(gather_box(both, buffer, layout, box), cube[0:2, 1:3])
    for outside in (((0, 1), (0, 1)), ((0, 2), (1, 4)), ((1, 2), (3, 5))):  # before, past and after the spans
        with pytest.raises(RegionError, match=r"box .*: some of its bytes are not in this plan's spans"):
            gather_box(alone, buffer[: alone.buffer_bytes], layout, outside)


def test_a_gap_of_exactly_max_gap_bytes_is_closed():
    layout = _layout((2, 5))
    box = ((0, 2), (1, 3))  # runs of 8 bytes, 20 apart: gaps of 12
    assert [a.tolist() for a in box_spans(layout, box, 12)] == [[2884], [2912]]
    assert [a.tolist() for a in box_spans(layout, box, 11)] == [[2884, 2904], [2892, 2912]]
    starts, stops = box_runs(layout, box)
    span_starts, span_stops, union_bytes = merge_runs(starts, stops, 12)
    assert (span_starts.tolist(), span_stops.tolist(), union_bytes) == ([2884], [2912], 16)


def test_a_box_is_a_selection_that_drops_no_axis_and_must_match_the_cube():
    sel = box_selection(((1, 3), (0, 2)), (4, 4))
    assert sel == Selection((1, 0), (2, 2), (1, 1), (False, False)) and sel.out_shape == (2, 2)
    with pytest.raises(RegionError, match=r"box \(\(0, 1\),\) has 1 axes, the cube 2 \(shape \(4, 4\)\)"):
        box_selection(((0, 1),), (4, 4))
    for box in (((1, 1), (0, 2)), ((0, 5), (0, 2)), ((-1, 1), (0, 2))):
        with pytest.raises(RegionError, match=r"box .* is empty or outside the cube \(shape \(4, 4\), numpy order\)"):
            box_selection(box, (4, 4))


def test_sources_are_ordered_by_their_start_on_the_split_axis_then_by_first_byte():
    layout = _layout((10, 6))
    boxes = [((2, 4), (0, 2)), ((0, 10), (3, 5)), ((2, 3), (1, 2))]
    assert source_order(layout, boxes, 0) == [1, 0, 2]  # starts 0, 2, 2; the tie by first byte
    assert source_order(layout, boxes, 1) == [0, 2, 1]
