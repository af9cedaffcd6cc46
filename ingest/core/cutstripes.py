"""A catalogue's cut-outs read by ranks (pure): each rank streams its stripe of the cube once.

A rank owns a stripe of the cube: the planes (along the band axis, the outermost axis of more
than one pixel, so a range of planes is one stretch of the object) and, when ranks are split
along another axis, the stretch of that axis its sources reach. It reads the stripe once, in
plane order, band by band: a band is as many planes as the memory budget allows, read either
whole ("stream": the stripe's runs merged by the gap rule, long requests) or as the merged spans
of its cut-outs alone ("spans"), whichever the cost model predicts sooner. After each band the
cut-outs whose last plane it read are gathered from the buffer and handed on, so each byte is
read once per rank and no cut-out waits for a later read. A cut-out that reaches past the band
keeps what it needs either as planes carried over into the next band's buffer or as its own
partial array filled band by band: at each band boundary the split between the two is the one
that holds the fewest bytes (planes shared by many open cut-outs are cheaper carried; a deep
cut-out in a sparse stripe is cheaper as its own array).

`choose_split` picks the axis ranks split along and `split_by_stripes` the split; `plan_stripe`
a rank's bands; `carry_over` and `band_cutouts` what a rank does with each band once it is read
(the driver reads, the tests fill the buffer from numpy: the same code either way).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ingest.core.cutplan import (Box, SpanPlan, box_bytes, box_read_cost_bytes, box_spans, cut_requests, gather_box,
                                 merge_runs, source_order)
from ingest.core.layout import Layout
from ingest.errors import RegionError


@dataclass(frozen=True)
class Band:
    """One band of a rank's stripe: planes [lo, hi) read, planes [keep_from, lo) carried over."""

    lo: int
    hi: int
    keep_from: int
    mode: str  # "stream" or "spans"
    held: SpanPlan  # what the buffer holds (carried spans, then this band's), and this band's requests
    moves: tuple  # (from, to, nbytes): carried bytes moved to the buffer's front, ascending
    n_requests: int
    wire_bytes: int
    whole: np.ndarray  # boxes gathered whole once this band is read
    fills: tuple  # (box, plane_lo, plane_hi): planes of a partial box's array filled from this band
    finished: np.ndarray  # partial boxes complete after this band's fills
    partial_bytes: int  # bytes of partial arrays alive while this band is cut
    choice: dict  # both modes' requests, bytes and predicted seconds


@dataclass(frozen=True)
class StripePlan:
    """How one rank reads its sources: its stripe, band by band."""

    axis: int  # the band axis
    stripe: Box
    bands: tuple
    budget_bytes: int
    needed_bytes: int  # the cut-outs' own bytes (a byte two cut-outs share counted for each)
    source_requests: np.ndarray  # each box's share of the requests of the bands it is read in
    source_wire_bytes: np.ndarray
    largest_box_bytes: int

    @property
    def buffer_bytes(self) -> int:
        """The one buffer the rank allocates: the largest band's carried and read spans."""
        return max((b.held.buffer_bytes for b in self.bands), default=0)

    @property
    def memory_bytes(self) -> int:
        """What a rank holds at most: the buffer, the partial arrays alive in one band, and one
        cut-out gathered at a time."""
        return self.buffer_bytes + max((b.partial_bytes for b in self.bands), default=0) + self.largest_box_bytes

    @property
    def n_requests(self) -> int:
        return sum(b.n_requests for b in self.bands)

    @property
    def wire_bytes(self) -> int:
        return sum(b.wire_bytes for b in self.bands)

    def choice_text(self) -> str:
        """Which reading each band got, and why, in words."""
        modes = {m: [b for b in self.bands if b.mode == m] for m in ("stream", "spans")}
        sums = {k: sum(b.choice[k] for b in self.bands) for k in ("stream_bytes", "spans_bytes", "stream_requests",
                                                                   "spans_requests", "stream_s", "spans_s")}
        cover = sums["spans_bytes"] / max(1, sums["stream_bytes"])
        used = ", ".join(f"{m} in {len(bs)}" for m, bs in modes.items() if bs)
        lo, hi = self.stripe[self.axis]
        return (f"planes {lo}-{hi - 1} ({sums['stream_bytes'] / 2**20:.3g} MiB of stripe) in {len(self.bands)} "
                f"band(s) of at most {self.budget_bytes / 2**20:.3g} MiB: {used}; the cut-outs' merged spans cover "
                f"{100 * cover:.0f} % of the stripe ({sums['spans_requests']:,} requests predicted "
                f"{sums['spans_s']:.2f} s) against streaming it ({sums['stream_requests']:,} requests, "
                f"{sums['stream_s']:.2f} s)")


def rank_budget_bytes(budget_bytes: int, resident: list, rank: int) -> int:
    """The band budget of `rank`: `budget_bytes` less what it holds beyond the leanest rank just
    before the reads (`resident`: every rank's resident bytes then, None where unknown). Rank 0
    alone has read the catalogue and converted it through the WCS, whose libraries and leftovers
    stay resident (about 25 MB at 10,000 sources); its bands give that room back, so that no
    rank's peak passes the leanest rank's own memory plus the budget. Never below a quarter of
    the budget: a rank holding far more than the others is not starved of its reads for it."""
    if resident[rank] is None:
        return budget_bytes
    leanest = min(r for r in resident if r is not None)
    return max(budget_bytes // 4, budget_bytes - (resident[rank] - leanest))


def band_axis(shape: tuple[int, ...]) -> int:
    """The outermost axis of more than one pixel (leading axes of one pixel, e.g. Stokes, add
    nothing): a range of its planes is one contiguous stretch of the object."""
    return next((a for a, n in enumerate(shape[:-1]) if n > 1), 0)


def hull(boxes) -> Box:
    """The smallest box holding every box."""
    return tuple((min(b[k][0] for b in boxes), max(b[k][1] for b in boxes)) for k in range(len(boxes[0])))


def clip_spans(starts: np.ndarray, stops: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of ascending, disjoint [start, stop) spans inside [lo, hi)."""
    keep = (stops > lo) & (starts < hi)
    return np.maximum(starts[keep], lo), np.minimum(stops[keep], hi)


def covered_below(starts: np.ndarray, stops: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Bytes of ascending, disjoint spans below each offset of xs."""
    cum = np.concatenate(([0], np.cumsum(stops - starts))).astype(np.int64)
    k = np.searchsorted(starts, xs, side="left")  # spans starting below x
    over = np.where(k > 0, np.maximum(0, stops[np.maximum(k - 1, 0)] - xs), 0) if len(starts) else 0
    return cum[k] - over


def _join_touching(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ascending spans laid end to end in a buffer, with spans that touch joined (their bytes are
    already consecutive there), so a run crossing from one to the next is gathered whole."""
    if len(starts) < 2:
        return starts, stops
    new = np.concatenate(([True], starts[1:] != stops[:-1]))
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:] - 1, [len(starts) - 1]))
    return starts[first], stops[last]


def stripe_box(shape: tuple[int, ...], boxes, axis: int, split_axis_: int) -> Box:
    """What a rank streams: its boxes' hull along the band axis and the split axis, the whole
    cube along the others (so a plane's part is one or a few long runs, not a box's rows)."""
    h = hull(boxes)
    return tuple(h[k] if k in (axis, split_axis_) else (0, n) for k, n in enumerate(shape))


def plan_stripe(layout: Layout, boxes, *, split: int, budget_bytes: int, max_gap_bytes: int, chunk_bytes: int,
                cost, threads: int) -> StripePlan:
    """The bands one rank reads its boxes in (see the comment above Band)."""
    if not boxes:
        raise RegionError("plan_stripe: no boxes to read")
    p = band_axis(layout.shape)
    stripe = stripe_box(layout.shape, boxes, p, split)
    z0, z1 = stripe[p]
    first = np.array([b[p][0] for b in boxes], np.int64)
    last = np.array([b[p][1] for b in boxes], np.int64)
    nbytes = np.array([box_bytes(b, layout.itemsize) for b in boxes], np.int64)
    per_plane = nbytes // (last - first)
    stream = box_spans(layout, stripe, max_gap_bytes)
    own = [box_spans(layout, b, max_gap_bytes) for b in boxes]
    need = merge_runs(np.concatenate([s for s, _ in own]), np.concatenate([e for _, e in own]), max_gap_bytes)[:2]
    plane = lambda z: layout.data_offset + int(z) * layout.strides_bytes[p]  # noqa: E731
    W = covered_below(*stream, layout.data_offset + np.arange(z0, z1 + 1, dtype=np.int64) * layout.strides_bytes[p])
    w = lambda a, b: int(W[b - z0] - W[a - z0])  # noqa: E731 - stream bytes of planes [a, b)
    partial, done = np.zeros(len(boxes), bool), np.zeros(len(boxes), bool)
    req_share, wire_share = np.zeros(len(boxes)), np.zeros(len(boxes))
    bands, za, keep, prev = [], z0, z0, None
    while za < z1:
        keep_from, made_bytes = keep, 0
        held_partial = int(nbytes[partial & ~done].sum())
        room = W[keep - z0] + max(0, budget_bytes - held_partial)
        zb = min(z1, max(za + 1, z0 + int(np.searchsorted(W, room, side="right")) - 1))
        lo_b, hi_b = plane(za), plane(zb)
        modes = {"stream": clip_spans(*stream, lo_b, hi_b), "spans": clip_spans(*need, lo_b, hi_b)}
        figures = {}
        for m, (s, e) in modes.items():
            rs, re_ = cut_requests(s, e, chunk_bytes)
            figures[m] = (rs, re_, int((e - s).sum()))
        choice = {f"{m}_{k}": v for m, (rs, _, wb) in figures.items()
                  for k, v in (("requests", len(rs)), ("bytes", wb), ("s", cost.predict_s(len(rs), wb, threads)))}
        mode = "spans" if choice["spans_s"] < choice["stream_s"] else "stream"
        # The buffer: the planes carried from the last band, then this band's spans.
        moves, c_s, c_e = [], np.zeros(0, np.int64), np.zeros(0, np.int64)
        if prev is not None and keep < za:
            pos = prev.buffer_positions
            k = (prev.span_stops > plane(keep)) & (prev.span_starts < lo_b)
            c_s = np.maximum(prev.span_starts[k], plane(keep))
            c_e = np.minimum(prev.span_stops[k], lo_b)
            src = pos[k] + (c_s - prev.span_starts[k])
            dst = np.concatenate(([0], np.cumsum(c_e - c_s)[:-1]))
            moves = [(int(a), int(b), int(n)) for a, b, n in zip(src, dst, c_e - c_s) if a != b]
        s, e = modes[mode]
        h_s, h_e = _join_touching(np.concatenate((c_s, s)).astype(np.int64), np.concatenate((c_e, e)).astype(np.int64))
        rs, re_, wb = figures[mode]
        touched = (first < zb) & (last > za)
        band_need = per_plane * np.maximum(0, np.minimum(last, zb) - np.maximum(first, za)) * touched
        if band_need.sum():
            share = band_need / band_need.sum()
        else:  # a stretch streamed through that no cut-out touches: charged to those it leads to
            ahead = first >= zb
            weights = (ahead if ahead.any() else np.ones(len(boxes), bool)).astype(float)
            share = weights / max(1.0, weights.sum())
        req_share += share * len(rs)
        wire_share += share * wb
        held = SpanPlan(h_s, h_e, rs, re_, int(band_need.sum()), max_gap_bytes, chunk_bytes)
        # Boxes the band completes: gathered whole, or the last fill of a partial array.
        whole = np.flatnonzero(~partial & ~done & (last <= zb))
        fills = [(int(i), za, int(min(last[i], zb))) for i in np.flatnonzero(partial & ~done & (first < zb))]
        finished = np.flatnonzero(partial & ~done & (last <= zb))
        done[whole] = done[finished] = True
        # At the boundary: open boxes starting before `keep` become partial arrays (filled now),
        # the rest are carried as planes [keep, zb); `keep` holds the fewest bytes.
        keep = zb
        open_ = np.flatnonzero(~partial & ~done & (first < zb)) if zb < z1 else np.zeros(0, np.int64)
        if len(open_):
            order = open_[np.argsort(first[open_], kind="stable")]
            starts = first[order]
            before = np.concatenate(([0], np.cumsum(nbytes[order])))  # bytes of the boxes before each
            costs = [w(int(t), zb) + int(before[j]) for j, t in enumerate(starts)] + [int(before[-1])]
            j = int(np.argmin(costs))
            keep = int(starts[j]) if j < len(starts) else zb
            made = order[:j] if j < len(starts) else order
            made = made[first[made] < keep]
            fills += [(int(i), int(first[i]), zb) for i in made]
            partial[made] = True
            made_bytes = int(nbytes[made].sum())
        bands.append(Band(za, zb, keep_from, mode, held, tuple(moves), len(rs), wb, whole, tuple(fills), finished,
                          held_partial + made_bytes, choice))
        prev, za = held, zb
    return StripePlan(p, stripe, tuple(bands), budget_bytes, int(nbytes.sum()), req_share, wire_share,
                      int(nbytes.max()))


def split_by_stripes(layout: Layout, boxes, order, n_ranks: int, axis: int, *,
                     max_gap_bytes: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) stretches of `order` (boxes sorted by their start along `axis`), one per
    rank, making the largest rank's read smallest. A stretch costs the fewer of its stripe's bytes
    (dense cut-outs: the stripe is read; neighbouring stripes share a box's reach, so an equal
    share of the cut-outs is no equal share of the reading) and what its cut-outs cost read
    alone, summed (sparse: only their spans are read; `box_read_cost_bytes`: each span's bytes,
    the gaps the rule bridges included, plus a request's worth). Pricing boxes by their own bytes
    instead would call a stretch sparse whose spans merge into most of its stripe, and hand one
    rank far more of the cube to read than another.
    Both only grow as a stretch grows, so the smallest largest cost is found by bisection, each
    stretch greedily as long as that cost allows."""
    p, shape, n = band_axis(layout.shape), layout.shape, len(order)
    if n == 0:
        return [(0, 0)] * n_ranks
    col = lambda k, end: np.array([boxes[i][k][end] for i in order], np.int64)  # noqa: E731
    lo_s, hi_s, lo_p, hi_p = col(axis, 0), col(axis, 1), col(p, 0), col(p, 1)
    alone = np.array([box_read_cost_bytes(layout, boxes[i], max_gap_bytes) for i in order], np.float64)
    across = float(layout.itemsize * math.prod(m for k, m in enumerate(shape) if k not in (axis, p)))

    def costs(i: int, end: int) -> np.ndarray:  # of the stretches order[i:j], j = i+1..end (non-decreasing)
        stripe = (np.maximum.accumulate(hi_s[i:end]) - lo_s[i]) * across
        if axis != p:
            stripe = stripe * (np.maximum.accumulate(hi_p[i:end]) - np.minimum.accumulate(lo_p[i:end]))
        return np.minimum(stripe, np.cumsum(alone[i:end]))

    def costs_upto(i: int, limit: float) -> np.ndarray:  # costs(i), far enough to pass limit
        reach = 2 * (n // n_ranks) + 1
        while True:
            c = costs(i, min(n, i + reach))
            if c[-1] > limit or i + reach >= n:
                return c
            reach *= 2

    def stretches(limit: float) -> list[tuple[int, int]]:
        out, i = [], 0
        while i < n:
            j = i + max(1, int(np.searchsorted(costs_upto(i, limit), limit, side="right")))
            out.append((i, j))
            i = j
        return out

    lo, hi = 0.0, float(costs(0, n)[-1])
    for _ in range(60):  # bisection to well under a byte's worth of the whole
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if len(stretches(mid)) <= n_ranks else (mid, hi)
        if hi - lo <= max(1.0, 1e-6 * hi):
            break
    parts = stretches(hi)
    return parts + [(n, n)] * (n_ranks - len(parts))


def choose_split(layout: Layout, boxes, n_ranks: int, *, max_gap_bytes: int, chunk_bytes: int, cost,
                 threads: int) -> tuple[int, list[int], list[tuple[int, int]], str]:
    """The axis to split the sources over ranks along, and the split: of the axes outside the
    innermost (a share of it is no stretch of the object), the one whose stripes the cost model
    predicts streamed soonest by the slowest rank (then: fewest bytes in all). Along the band axis
    a stripe is one stretch of the object but neighbouring stripes share a box's depth of planes;
    along another axis they share less but each plane's part is a run of its own. Sources go to
    ranks in object order along that axis, contiguous stretches balanced by what each reads
    (`split_by_stripes`).
    Returns (axis, order: indices of boxes, parts: per rank [lo, hi) of order, why in words)."""
    p = band_axis(layout.shape)
    candidates = [a for a in range(len(layout.shape) - 1) if layout.shape[a] > 1] if n_ranks > 1 else []
    tried = []
    for axis in candidates or [p]:
        order = source_order(layout, boxes, axis)
        parts = split_by_stripes(layout, boxes, order, n_ranks, axis, max_gap_bytes=max_gap_bytes)
        slowest_s, wire = 0.0, 0
        for lo, hi in parts:
            if lo < hi:
                s, e = box_spans(layout, stripe_box(layout.shape, [boxes[i] for i in order[lo:hi]], p, axis),
                                 max_gap_bytes)
                sizes = e - s
                slowest_s = max(slowest_s, cost.predict_s(int((-(-sizes // chunk_bytes)).sum()), int(sizes.sum()),
                                                          threads))
                wire += int(sizes.sum())
        tried.append((slowest_s, wire, axis, order, parts))
    slowest_s, wire, axis, order, parts = min(tried, key=lambda t: (t[0], t[1]))
    if n_ranks == 1:
        return axis, order, parts, "one rank: its stripe is the cut-outs' planes"
    others = "; ".join(f"along axis {a}: {s:.2f} s, {w / max(1, layout.data_bytes):.2f}x the data"
                       for s, w, a, _, _ in tried if a != axis)
    kind = "the band axis: each stripe one stretch of the object" if axis == p else "each plane's part one run"
    return axis, order, parts, (f"ranks split along numpy axis {axis} ({kind}), balanced by the bytes each reads: "
                                f"streaming the stripes predicted {slowest_s:.2f} s for the slowest rank, "
                                f"{wire / max(1, layout.data_bytes):.2f}x the data in all"
                                + (f" (against {others})" if others else ""))


def carry_over(buffer: np.ndarray, band: Band, step_bytes: int = 8 << 20) -> None:
    """Move the planes a band keeps from the last one to the front of the buffer. Every move goes
    towards the front and they ascend, so in place they never overwrite bytes still to move;
    numpy copies an overlapping piece through a temporary, at most step_bytes."""
    for src, dst, n in band.moves:
        for k in range(0, n, step_bytes):
            m = min(step_bytes, n - k)
            buffer[dst + k: dst + k + m] = buffer[src + k: src + k + m]


def band_cutouts(band: Band, buffer: np.ndarray, layout: Layout, boxes, partials: dict):
    """Once a band is in the buffer: fill the partial arrays it reaches (`partials`, box index ->
    array, kept by the caller across bands), then yield (box index, raw array) for every box it
    completes, one at a time, so one gathered cut-out is held beside the buffer."""
    p = band_axis(layout.shape)
    for i, lo, hi in band.fills:
        box = boxes[i]
        if i not in partials:
            partials[i] = np.empty(tuple(b - a for a, b in box), layout.raw_dtype)
        part = box[:p] + ((lo, hi),) + box[p + 1:]
        partials[i][(slice(None),) * p + (slice(lo - box[p][0], hi - box[p][0]),)] = gather_box(
            band.held, buffer, layout, part)
    for i in band.whole:
        yield int(i), gather_box(band.held, buffer, layout, boxes[i])
    for i in band.finished:
        yield int(i), partials.pop(int(i))
