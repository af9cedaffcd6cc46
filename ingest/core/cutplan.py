"""Many boxes of one contiguous cube (pure): their runs, merged spans, requests, gathering.

A catalogue's cut-outs are thousands of small boxes. Read one by one, each box is its own set of
requests and the bytes that neighbouring or overlapping boxes have in common are fetched again
for every box. Here the boxes of one batch become ONE set of requests:
1. every box's runs (`core.lattice`: contiguous stretches of the object) are listed;
2. their union is merged into spans wherever the gap between two runs is at most
   `max_gap_bytes` (reading the gap costs less than another request), overlaps counted once;
3. spans are laid end to end in one buffer and cut into requests of at most `chunk_bytes`;
4. each box is gathered from the buffer by one vectorised index.
So where the boxes cover most of the cube, the gaps close and the plan reads the object in long
spans; where they are sparse, it reads only their runs. Byte ranges are half-open everywhere.
`core.cutstripes` builds on these: how `ingest cutouts` splits a catalogue over ranks and how
each rank streams its stripe of the cube band by band.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ingest.core.layout import Layout
from ingest.core.lattice import Lattice, lattice_for
from ingest.core.selection import Selection
from ingest.errors import RegionError

Box = tuple[tuple[int, int], ...]


def box_selection(box: Box, shape: tuple[int, ...]) -> Selection:
    """The step-1 Selection of a half-open numpy-order box, checked against the cube."""
    if len(box) != len(shape):
        raise RegionError(f"box {box} has {len(box)} axes, the cube {len(shape)} (shape {shape})")
    for (a, b), n in zip(box, shape):
        if not 0 <= a < b <= n:
            raise RegionError(f"box {box} is empty or outside the cube (shape {shape}, numpy order)")
    return Selection(tuple(a for a, _ in box), tuple(b - a for a, b in box), (1,) * len(box), (False,) * len(box))


def rank_share_box(boxes, n_ranks: int) -> Box:
    """Roughly what one of `n_ranks` ranks reads of these boxes: their bounding box with its
    planes (numpy axis 0) split n ways. What a cut-out job is tuned and its shared rounds sized
    for: one cut-out's box is a fraction of a rank's read, and rounds that short see a pipe's
    burst, not its rate."""
    if not boxes or n_ranks < 1:
        raise ValueError(f"rank_share_box: {len(boxes)} box(es), {n_ranks} rank(s): need at least one of each")
    lo = [min(box[d][0] for box in boxes) for d in range(len(boxes[0]))]
    hi = [max(box[d][1] for box in boxes) for d in range(len(boxes[0]))]
    planes = -(-(hi[0] - lo[0]) // n_ranks)
    return ((lo[0], lo[0] + planes),) + tuple(zip(lo[1:], hi[1:]))


def run_offsets(lat: Lattice) -> np.ndarray:
    """Object offsets of a lattice's runs, in C order of its outer axes (int64)."""
    offsets = np.array([lat.base], dtype=np.int64)
    for count, stride in zip(lat.counts, lat.strides):
        offsets = (offsets[:, None] + np.arange(count, dtype=np.int64) * stride).reshape(-1)
    return offsets


def box_bytes(box: Box, itemsize: int) -> int:
    """Bytes of one box."""
    return itemsize * math.prod(b - a for a, b in box)


def first_byte(layout: Layout, box: Box) -> int:
    """Object offset of a box's first voxel: the order sources are split and batched in."""
    return layout.data_offset + sum(a * s for (a, _), s in zip(box, layout.strides_bytes))


@dataclass(frozen=True)
class SpanPlan:
    """The requests that read a batch of boxes: merged spans laid end to end in one buffer."""

    span_starts: np.ndarray  # object offsets of the merged spans, ascending
    span_stops: np.ndarray
    request_starts: np.ndarray  # the spans cut into requests of at most chunk_bytes
    request_stops: np.ndarray
    needed_bytes: int  # bytes of the union of the boxes' runs
    max_gap_bytes: int
    chunk_bytes: int

    @property
    def buffer_bytes(self) -> int:
        """Bytes the buffer holds: every span once (= the bytes on the wire)."""
        return int((self.span_stops - self.span_starts).sum())

    @property
    def wire_bytes(self) -> int:
        return self.buffer_bytes

    @property
    def n_requests(self) -> int:
        return len(self.request_starts)

    @cached_property
    def buffer_positions(self) -> np.ndarray:
        """Where each span starts in the buffer (computed once: every box gathered asks)."""
        sizes = self.span_stops - self.span_starts
        return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)

    def request_buffer_offsets(self) -> np.ndarray:
        """Where each request's bytes go in the buffer."""
        span_of = np.searchsorted(self.span_starts, self.request_starts, side="right") - 1
        return self.buffer_positions[span_of] + (self.request_starts - self.span_starts[span_of])

    def describe(self) -> dict:
        """Summary for the report: what was read and why."""
        return {"requests": self.n_requests, "spans": len(self.span_starts), "bytes_needed": self.needed_bytes,
                "bytes_wire": self.wire_bytes, "max_gap_bytes": self.max_gap_bytes, "chunk_bytes": self.chunk_bytes,
                "read_amplification": round(self.wire_bytes / self.needed_bytes, 4) if self.needed_bytes else 1.0}


def merge_runs(starts: np.ndarray, stops: np.ndarray, max_gap_bytes: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Merge [start, stop) runs whose gap is at most max_gap_bytes: (span starts, stops, union bytes)."""
    order = np.argsort(starts, kind="stable")
    starts, stops = starts[order], stops[order]
    reach = np.maximum.accumulate(stops)  # the furthest byte covered so far
    # A run begins a new span where it starts past everything before it by more than the gap.
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1] + max_gap_bytes
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:] - 1, [len(starts) - 1]))
    span_starts, span_stops = starts[first], reach[last]
    # Bytes of the exact union (gap 0), for the report's amplification.
    exact_new = np.empty(len(starts), dtype=bool)
    exact_new[0] = True
    exact_new[1:] = starts[1:] > reach[:-1]
    e_first = np.flatnonzero(exact_new)
    e_last = np.concatenate((e_first[1:] - 1, [len(starts) - 1]))
    union_bytes = int((reach[e_last] - starts[e_first]).sum())
    return span_starts, span_stops, union_bytes


def cut_requests(span_starts: np.ndarray, span_stops: np.ndarray, chunk_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Each span cut into requests of at most chunk_bytes (equal pieces but the last)."""
    sizes = span_stops - span_starts
    pieces = -(-sizes // chunk_bytes)
    owner = np.repeat(np.arange(len(sizes)), pieces)
    k = np.arange(len(owner)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    starts = span_starts[owner] + k * chunk_bytes
    stops = np.minimum(starts + chunk_bytes, span_stops[owner])
    return starts, stops


def plan_spans(layout: Layout, boxes, *, max_gap_bytes: int, chunk_bytes: int) -> SpanPlan:
    """The requests that read every box of `boxes` once (see the module docstring)."""
    if not boxes:
        raise RegionError("plan_spans: no boxes to read")
    if max_gap_bytes < 0 or chunk_bytes < 1:
        raise RegionError(f"plan_spans: max_gap_bytes {max_gap_bytes} must be >= 0 and chunk_bytes "
                          f"{chunk_bytes} >= 1")
    starts, stops = [], []
    for box in boxes:
        lat = lattice_for(layout, box_selection(box, layout.shape))
        offsets = run_offsets(lat)
        starts.append(offsets)
        stops.append(offsets + lat.run_bytes)
    span_starts, span_stops, union_bytes = merge_runs(np.concatenate(starts), np.concatenate(stops), max_gap_bytes)
    req_starts, req_stops = cut_requests(span_starts, span_stops, chunk_bytes)
    return SpanPlan(span_starts, span_stops, req_starts, req_stops, union_bytes, max_gap_bytes, chunk_bytes)


def gather_box(plan: SpanPlan, buffer: np.ndarray, layout: Layout, box: Box) -> np.ndarray:
    """A box's raw stored bytes from the filled buffer, as a C-order array of layout.raw_dtype."""
    lat = lattice_for(layout, box_selection(box, layout.shape))
    first = lat.base
    last = first + sum((count - 1) * stride for count, stride in zip(lat.counts, lat.strides))
    k = int(np.searchsorted(plan.span_starts, first, side="right")) - 1
    if k >= 0 and last + lat.run_bytes <= plan.span_stops[k]:
        # The first and the last run in one span, so every run between them (the offsets rise in C
        # order): the box is a view of the buffer, or one strided copy of it, found without listing
        # each run's offset (most of a small cut-out's gathering).
        at0 = int(plan.buffer_positions[k] + (first - plan.span_starts[k]))
        shape = tuple(b - a for a, b in box)
        if last - first == (lat.n_runs - 1) * lat.run_bytes:  # the runs end to end
            return buffer[at0: at0 + lat.n_runs * lat.run_bytes].view(layout.raw_dtype).reshape(shape)
        view = np.lib.stride_tricks.as_strided(buffer[at0:], shape=lat.counts + (lat.run_bytes,),
                                               strides=lat.strides + (1,), writeable=False)
        return np.ascontiguousarray(view).view(layout.raw_dtype).reshape(shape)
    offsets = run_offsets(lat)
    span_of = np.searchsorted(plan.span_starts, offsets, side="right") - 1
    if np.any(span_of < 0) or np.any(offsets + lat.run_bytes > plan.span_stops[span_of]):
        raise RegionError(f"box {box}: some of its bytes are not in this plan's spans")
    at = plan.buffer_positions[span_of] + (offsets - plan.span_starts[span_of])
    shape = tuple(b - a for a, b in box)
    if len(at) == 1 or np.all(np.diff(at) == lat.run_bytes):  # one stretch of the buffer
        return buffer[at[0]: at[0] + len(at) * lat.run_bytes].view(layout.raw_dtype).reshape(shape)
    item = layout.itemsize
    if np.all(at % item == 0):  # runs start on whole voxels of the buffer: index voxels, not bytes
        voxels = buffer[: len(buffer) - len(buffer) % item].view(layout.raw_dtype)
        return voxels[(at[:, None] // item + np.arange(lat.run_bytes // item, dtype=np.int64)).reshape(-1)].reshape(shape)
    flat = buffer[(at[:, None] + np.arange(lat.run_bytes, dtype=np.int64)).reshape(-1)]
    return flat.view(layout.raw_dtype).reshape(shape)


def split_by_bytes(weights_bytes, n_ranks: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) stretches of items (already in object order), one per rank, each near
    total/n_ranks bytes: a stretch ends where the running total first reaches its share."""
    weights = np.asarray(weights_bytes, dtype=np.float64)
    n = len(weights)
    if n_ranks < 1:
        raise RegionError(f"split_by_bytes: {n_ranks} ranks")
    if n == 0:
        return [(0, 0)] * n_ranks
    cum = np.cumsum(weights)
    total = cum[-1]
    bounds = [0]
    for r in range(1, n_ranks):
        # Items whose running total's midpoint falls below r/n of the whole go to the earlier ranks.
        mid = cum - weights / 2
        cut = int(np.searchsorted(mid, total * r / n_ranks, side="left"))
        bounds.append(max(bounds[-1], min(cut, n)))
    bounds.append(n)
    return [(bounds[r], bounds[r + 1]) for r in range(n_ranks)]


def split_axis(boxes, shape: tuple[int, ...]) -> int:
    """The numpy axis to split the sources over ranks along: of the axes outside the innermost
    one (a rank's share of the innermost axis is no contiguous stretch of the object) that the
    cube has more than one pixel of, the one the boxes reach least far along, relative to its
    length. A rank then reads its stretch of that axis plus about one box's reach past each end,
    so the bytes two ranks both read are smallest."""
    candidates = [a for a in range(len(shape) - 1) if shape[a] > 1] or [0]
    extent = np.array([[b - a for a, b in box] for box in boxes], dtype=np.float64)
    reach = {a: float(extent[:, a].mean()) / shape[a] for a in candidates}
    return min(candidates, key=lambda a: (reach[a], -a))


def source_order(layout: Layout, boxes, axis: int) -> list[int]:
    """Indices of `boxes` by their start along `axis`, then by first byte in the object."""
    keys = [(box[axis][0], first_byte(layout, box)) for box in boxes]
    return sorted(range(len(boxes)), key=keys.__getitem__)


def box_runs(layout: Layout, box: Box) -> tuple[np.ndarray, np.ndarray]:
    """(starts, stops) of a box's runs in the object, ascending."""
    lat = lattice_for(layout, box_selection(box, layout.shape))
    offsets = run_offsets(lat)
    return offsets, offsets + lat.run_bytes


def _merged_axes(layout: Layout, box: Box, max_gap_bytes: int):
    """(lattice, counts, strides, run_bytes) of a box's runs after the gap rule: a box's runs nest
    (each axis's step is longer than everything inside it), so the rule joins whole axes from the
    innermost out: where the gap between two neighbours along an axis is at most max_gap_bytes,
    that axis becomes part of the run."""
    lat = lattice_for(layout, box_selection(box, layout.shape))
    counts, strides, run = list(lat.counts), list(lat.strides), lat.run_bytes
    while counts and strides[-1] - run <= max_gap_bytes:
        run = (counts.pop() - 1) * strides.pop() + run
    return lat, counts, strides, run


def box_spans(layout: Layout, box: Box, max_gap_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """A box's runs merged with the gap rule: the spans it would be read in alone. Merging is
    associative (two runs join when a chain of gaps of at most max_gap_bytes links them), so the
    spans of many boxes are the merge of their boxes' spans: a batch is priced from a few spans
    per box, not from every run."""
    lat, counts, strides, run = _merged_axes(layout, box, max_gap_bytes)
    starts = np.array([lat.base], dtype=np.int64)
    for count, stride in zip(counts, strides):
        starts = (starts[:, None] + np.arange(count, dtype=np.int64) * stride).reshape(-1)
    return starts, starts + run


def box_read_cost_bytes(layout: Layout, box: Box, max_gap_bytes: int) -> int:
    """What reading a box alone costs, in bytes, in closed form: its spans' bytes (box_spans, the
    gaps the rule bridges included) plus max_gap_bytes for each span's request. The gap rule
    bridges a gap exactly when reading it costs less than another request, so max_gap_bytes is a
    request's worth of reading; boxes near each other in a plane then price what merging their
    spans would read, not just their own bytes."""
    _, counts, _, run = _merged_axes(layout, box, max_gap_bytes)
    return math.prod(counts) * (run + max_gap_bytes)
