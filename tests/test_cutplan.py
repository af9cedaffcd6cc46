"""Many boxes read as one set of requests (ingest.core.cutplan), checked against numpy slicing."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ingest.core.cutplan import (batches, box_bytes, box_runs, first_byte, gather_box, plan_spans, requests_touching,
                                 source_order, split_axis, split_by_bytes)
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


@settings(max_examples=150, deadline=None)
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
        # The requests carrying its bytes, counted without listing them, against a listing.
        runs = [(a, b) for a, b in zip(*box_runs(layout, box))]
        touched = {k for k, (s, e) in enumerate(zip(plan.request_starts, plan.request_stops))
                   if any(a < e and s < b for a, b in runs)}
        assert requests_touching(plan, layout, box) == len(touched)

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


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=0, max_size=40), st.integers(1, 9))
def test_split_by_bytes_is_contiguous_complete_and_balanced(weights, n_ranks):
    parts = split_by_bytes(weights, n_ranks)
    assert len(parts) == n_ranks and parts[0][0] == 0 and parts[-1][1] == len(weights)
    assert all(a <= b for a, b in parts) and all(parts[i][1] == parts[i + 1][0] for i in range(n_ranks - 1))
    if weights and sum(weights):
        share = sum(weights) / n_ranks
        for a, b in parts:  # a rank is off its share by less than one item's weight
            assert sum(weights[a:b]) <= share + max(weights)


def test_batches_are_consecutive_and_read_at_most_the_batch_bytes_each():
    layout = _layout((6, 20, 20))
    rng = np.random.default_rng(3)
    boxes = []
    for _ in range(30):
        z, y, x = rng.integers(0, 5), rng.integers(0, 15), rng.integers(0, 15)
        boxes.append(((z, z + 2), (y, y + 5), (x, x + 5)))
    order = source_order(layout, boxes, split_axis(boxes, layout.shape))
    for batch_bytes in (1, 500, 4000, 10**9):
        groups = batches(layout, boxes, order, batch_bytes, max_gap_bytes=64)
        assert [i for g in groups for i in g] == order
        for g in groups:
            wire = plan_spans(layout, [boxes[i] for i in g], max_gap_bytes=64, chunk_bytes=256).wire_bytes
            assert len(g) == 1 or wire <= batch_bytes
        if batch_bytes == 10**9:
            assert len(groups) == 1
    assert first_byte(_layout((4, 5, 6)), ((1, 2), (2, 3), (3, 4))) == 2880 + 4 * (30 + 12 + 3)


def test_ranks_split_along_the_axis_the_boxes_reach_least_far():
    # Boxes deep in z but short in y: splitting by y shares fewer bytes between ranks.
    boxes = [((0, 40), (y, y + 2), (0, 5)) for y in range(0, 60, 3)]
    assert split_axis(boxes, (50, 64, 64)) == 1
    assert split_axis([((z, z + 1), (0, 60), (0, 5)) for z in range(10)], (50, 64, 64)) == 0
