"""Properties of the chunk planner (core.chunkplan) on random chunk indexes laid out in a
virtual file: which chunks a box needs, how they are grouped into requests, and the
chunk-aligned split."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.core.chunkplan import chunk_aligned_split, chunks_for_box, plan_chunks
from ingest.core.chunks import ChunkIndex
from ingest.core.lattice import UNLIMITED_GAP
from ingest.core.cost import CostModel
from ingest.errors import ConfigError, RegionError


@st.composite
def indexes(draw, overlaps=True):
    """A random shape and chunk shape, a random subset of its chunks written, in a random order,
    with random sizes and gaps; optionally some chunks duplicate or overlap an earlier blob."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    chunk_shape = tuple(draw(st.integers(1, n + 1)) for n in shape)
    per_axis = [-(-n // c) for n, c in zip(shape, chunk_shape)]
    positions = list(itertools.product(*(range(k) for k in per_axis)))
    written = draw(st.lists(st.sampled_from(positions), unique=True, max_size=len(positions)))
    written = draw(st.permutations(written))  # file order differs from grid order
    offsets, sizes, pos = [], [], draw(st.integers(0, 50))
    for _ in written:
        if overlaps and offsets and draw(st.integers(0, 5)) == 0:
            j = draw(st.integers(0, len(offsets) - 1))  # duplicate or overlap an earlier blob
            start = offsets[j] + draw(st.integers(0, sizes[j] - 1))
            offsets.append(start)
            sizes.append(draw(st.integers(1, 60)))
            pos = max(pos, start + sizes[-1])
            continue
        pos += draw(st.sampled_from([0, 0, 1, 5, 20, 100]))
        offsets.append(pos)
        sizes.append(draw(st.integers(1, 60)))
        pos += sizes[-1]
    n = len(written)
    grid = np.array(written, dtype=np.int64).reshape(n, ndim)
    index = ChunkIndex(shape, chunk_shape, grid, np.array(offsets, dtype=np.int64),
                       np.array(sizes, dtype=np.int64), np.zeros(n, dtype=np.uint32))
    box = []
    for n_px in shape:
        a = draw(st.integers(0, n_px - 1))
        box.append((a, draw(st.integers(a + 1, n_px))))
    return index, tuple(box)


gaps = st.sampled_from([0, 0, 1, 5, 20, 100, UNLIMITED_GAP])
chunk_limits = st.sampled_from([1, 10, 40, 60, 100, 300, 1 << 40])


def touched_brute(index, box):
    """Every grid position whose chunk intersects the box, by testing all of them."""
    out = set()
    for p in itertools.product(*(range(k) for k in index.chunks_per_axis)):
        if all(g * c < b and (g + 1) * c > a for g, c, (a, b) in zip(p, index.chunk_shape, box)):
            out.add(p)
    return out


def union_bytes(ranges):
    total, reach = 0, None
    for a, b in sorted(ranges):
        if reach is None or a >= reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


def reference_plan(index, ids, gap, limit):
    """The greedy rule, one chunk at a time: join the current request when the chunk lies inside
    it, or when its gap is <= gap and the request would span <= limit."""
    order = sorted(ids, key=lambda i: (index.offsets[i], -(index.offsets[i] + index.sizes[i]), i))
    reqs = []  # [start, end, [ids]]
    for i in order:
        s, e = int(index.offsets[i]), int(index.offsets[i] + index.sizes[i])
        if reqs and (e <= reqs[-1][1] or (s - reqs[-1][1] <= gap and max(e, reqs[-1][1]) - reqs[-1][0] <= limit)):
            reqs[-1][1] = max(reqs[-1][1], e)
            reqs[-1][2].append(i)
        else:
            reqs.append([s, e, [i]])
    return reqs


@settings(max_examples=400, deadline=None)
@given(indexes(), gaps, chunk_limits)
def test_plan_properties(case, gap, limit):
    index, box = case
    plan = plan_chunks(index, box, gap_bytes=gap, chunk_bytes=limit, itemsize=4)
    present, missing = chunks_for_box(index, box)
    # present + missing = exactly the touched grid positions
    touched = touched_brute(index, box)
    got = [tuple(index.grid[i]) for i in present] + [tuple(m) for m in missing]
    assert len(got) == len(set(got)) and set(got) == touched
    assert missing.shape == (len(touched) - len(present), len(index.shape))
    # every needed chunk in exactly one request
    assert sorted(plan.chunk_ids.tolist()) == sorted(present.tolist())
    assert plan.req_start[0] == 0 and plan.req_start[-1] == len(plan.chunk_ids)
    assert np.all(np.diff(plan.req_start) >= 1)
    assert len(plan.req_start) == plan.n_requests + 1
    for r in range(plan.n_requests):
        ids = plan.chunk_ids[plan.req_start[r]: plan.req_start[r + 1]]
        starts, ends = index.offsets[ids], index.offsets[ids] + index.sizes[ids]
        lo, hi = int(plan.req_offsets[r]), int(plan.req_offsets[r] + plan.req_nbytes[r])
        assert lo == starts.min() and hi == ends.max()  # covers its chunks, nothing beyond
        if hi - lo > limit:  # only when one chunk spans the whole request
            assert np.any((starts == lo) & (ends == hi))
        order = np.argsort(starts, kind="stable")
        reach = np.maximum.accumulate(ends[order])
        assert np.all(starts[order][1:] - reach[:-1] <= gap)
    assert plan.wire_bytes == int(plan.req_nbytes.sum())
    ranges = [(int(index.offsets[i]), int(index.offsets[i] + index.sizes[i])) for i in present]
    assert plan.needed_chunk_bytes == union_bytes(ranges)
    assert plan.wire_bytes >= plan.needed_chunk_bytes
    # the vectorised plan is exactly the one-chunk-at-a-time greedy
    ref = reference_plan(index, present.tolist(), gap, limit)
    assert [r[0] for r in ref] == plan.req_offsets.tolist()
    assert [r[1] - r[0] for r in ref] == plan.req_nbytes.tolist()
    assert [i for r in ref for i in r[2]] == plan.chunk_ids.tolist()
    d = plan.describe(CostModel(), 4)
    assert d["strategy"] == "chunks" and d["requests"] == plan.n_requests
    assert d["bytes_needed"] == math.prod(b - a for a, b in box) * 4
    assert d["bytes_stored"] == plan.needed_chunk_bytes and d["bytes_wire"] == plan.wire_bytes
    assert plan.needed_bytes == d["bytes_needed"] and plan.strategy == "chunks" and plan.max_gap_bytes == gap
    if plan.n_requests:
        req = plan.request(plan.n_requests - 1)
        assert (req.offset, req.nbytes) == (plan.req_offsets[-1], plan.req_nbytes[-1])
        assert req.chunk_ids.tolist() == plan.chunk_ids[plan.req_start[-2]:].tolist()


@settings(max_examples=300, deadline=None)
@given(indexes(overlaps=False), gaps, chunk_limits)
def test_disjoint_blobs(case, gap, limit):
    """Without overlapping blobs: requests are disjoint and in file order, stored bytes are the
    sum of sizes, and a request over chunk_bytes holds one chunk."""
    index, box = case
    plan = plan_chunks(index, box, gap_bytes=gap, chunk_bytes=limit)
    present, _ = chunks_for_box(index, box)
    assert plan.needed_chunk_bytes == int(index.sizes[present].sum())
    ends = plan.req_offsets + plan.req_nbytes
    assert np.all(ends[:-1] <= plan.req_offsets[1:])
    counts = np.diff(plan.req_start)
    assert np.all((plan.req_nbytes <= limit) | (counts == 1))
    # consecutive requests could not have merged: the gap or the limit forbade it
    for r in range(plan.n_requests - 1):
        nxt = plan.chunk_ids[plan.req_start[r + 1]]
        gap_between = plan.req_offsets[r + 1] - ends[r]
        assert gap_between > gap or index.offsets[nxt] + index.sizes[nxt] - plan.req_offsets[r] > limit


@settings(max_examples=200, deadline=None)
@given(indexes(overlaps=False))
def test_gap_zero_merges_only_touching(case):
    index, box = case
    plan = plan_chunks(index, box, gap_bytes=0, chunk_bytes=1 << 40)
    ends = plan.req_offsets + plan.req_nbytes
    assert np.all(plan.req_offsets[1:] > ends[:-1])  # separate requests never touch
    assert plan.wire_bytes == plan.needed_chunk_bytes  # and no gap byte is read


def test_duplicates_counted_once():
    grid = np.array([[0], [1], [2]], dtype=np.int64)
    index = ChunkIndex((30,), (10,), grid, np.array([100, 100, 500]), np.array([50, 50, 50]), np.zeros(3, np.uint32))
    plan = plan_chunks(index, ((0, 30),), gap_bytes=0, chunk_bytes=10)
    assert plan.needed_chunk_bytes == 100 and plan.wire_bytes == 100
    assert plan.n_requests == 2 and plan.req_start.tolist() == [0, 2, 3]
    assert plan.amplification == 1.0


def test_missing_and_edge_chunks():
    # shape 10 in chunks of 4: chunks [0,4) [4,8) [8,10); only chunk 2 written
    index = ChunkIndex((10,), (4,), np.array([[2]]), np.array([7]), np.array([3]), np.zeros(1, np.uint32))
    present, missing = chunks_for_box(index, ((3, 10),))
    assert present.tolist() == [0] and missing.tolist() == [[0], [1]]
    plan = plan_chunks(index, ((0, 2),), gap_bytes=0, chunk_bytes=100)
    assert plan.n_requests == 0 and plan.missing.tolist() == [[0]] and plan.amplification == 1.0
    assert plan.describe(CostModel(), 1)["requests"] == 0
    with pytest.raises(RegionError):
        chunks_for_box(index, ((0, 11),))
    with pytest.raises(ConfigError):
        plan_chunks(index, ((0, 2),), gap_bytes=-1, chunk_bytes=100)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_chunk_aligned_split(data):
    ndim = data.draw(st.integers(1, 4))
    shape = data.draw(st.lists(st.integers(1, 40), min_size=ndim, max_size=ndim))
    chunks = [data.draw(st.integers(1, n + 3)) for n in shape]
    parts = [data.draw(st.integers(1, n)) for n in shape]
    # A job region may start mid-chunk: the cuts must still fall on the dataset's chunk grid.
    origin = [data.draw(st.integers(0, 2 * c)) for c in chunks]
    split = chunk_aligned_split(shape, chunks, parts, origin)
    for n, c, p, o, bounds in zip(shape, chunks, parts, origin, split):
        assert len(bounds) == p and bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(a < b for a, b in bounds)
        assert all(bounds[i][1] == bounds[i + 1][0] for i in range(p - 1))
        if p <= (o + n - 1) // c - o // c + 1:  # enough chunks: every inner boundary is on the chunk grid
            assert all((b + o) % c == 0 for _, b in bounds[:-1])
            sizes = [(b + o - 1) // c - (a + o) // c + 1 for a, b in bounds]  # chunks per part, balanced
            assert max(sizes) - min(sizes) <= 1
        else:
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ConfigError):
        chunk_aligned_split((4,), (2,), (5,))


def test_a_large_index_plans_exactly_the_chunks_its_box_touches():
    """10^4 grid positions, 90 % written in shuffled file order, a box touching 10^3: the chunks
    found are exactly the written ones in the box (the rest missing), and the requests are the
    one-chunk-at-a-time greedy's."""
    rng = np.random.default_rng(0)
    shape, chunk = (100, 100, 100), (10, 10, 1)
    grid = np.stack(np.unravel_index(np.arange(10 * 10 * 100), (10, 10, 100)), axis=1).astype(np.int64)
    keep = rng.random(len(grid)) < 0.9
    grid = grid[keep][rng.permutation(keep.sum())]
    sizes = rng.integers(100, 1000, len(grid))
    offsets = np.cumsum(sizes + rng.integers(0, 50, len(grid))) - sizes
    index = ChunkIndex(shape, chunk, grid, offsets, sizes, np.zeros(len(grid), np.uint32))
    plan = plan_chunks(index, ((0, 100), (0, 100), (0, 10)), gap_bytes=20, chunk_bytes=1 << 16)
    inside = np.flatnonzero(grid[:, 2] < 10)  # the box spans all of axes 0 and 1 and planes 0..9 of axis 2
    assert sorted(plan.chunk_ids.tolist()) == inside.tolist()
    written = {tuple(p) for p in grid[inside].tolist()}
    assert {tuple(p) for p in plan.missing.tolist()} == touched_brute(index, ((0, 100), (0, 100), (0, 10))) - written
    assert len(plan.chunk_ids) + len(plan.missing) == 1000
    ref = reference_plan(index, inside.tolist(), 20, 1 << 16)
    assert [r[0] for r in ref] == plan.req_offsets.tolist()
    assert [r[1] - r[0] for r in ref] == plan.req_nbytes.tolist()
    assert [i for r in ref for i in r[2]] == plan.chunk_ids.tolist()
    assert plan.needed_chunk_bytes == int(sizes[inside].sum())


def test_limits_are_inclusive():
    """A request may span exactly chunk_bytes, and a gap of exactly gap_bytes merges."""
    grid = np.array([[0], [1], [2]], dtype=np.int64)
    index = ChunkIndex((3,), (1,), grid, np.array([0, 5, 13]), np.array([5, 5, 5]), np.zeros(3, np.uint32))
    plan = plan_chunks(index, ((0, 3),), gap_bytes=3, chunk_bytes=10)
    assert plan.req_offsets.tolist() == [0, 13] and plan.req_nbytes.tolist() == [10, 5]
    plan = plan_chunks(index, ((0, 3),), gap_bytes=3, chunk_bytes=18)
    assert plan.n_requests == 1 and plan.wire_bytes == 18 and plan.needed_chunk_bytes == 15
    plan = plan_chunks(index, ((0, 3),), gap_bytes=2, chunk_bytes=18)
    assert plan.n_requests == 2
