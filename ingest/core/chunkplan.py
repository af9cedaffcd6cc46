"""Chunk planner (pure): a box of a CHUNKED dataset (HDF5) -> the byte-range requests that read it.

A chunked dataset's bytes are not a lattice: each written chunk is one compressed blob at an
arbitrary offset, and a chunk never written is not in the file at all (it reads as the fill
value). A chunk is indivisible (it must be decoded whole), so a request holds whole chunks.

Planning:
1. `chunks_for_box`: the chunk-grid range the box touches, per axis; the index's chunks inside
   it (present) and the grid positions inside it the index lacks (missing).
2. Sort the present chunks by file offset. A chunk inside the extent of an earlier one (a
   duplicate or overlapping blob) adds no bytes and joins whatever request holds the earlier
   bytes; the rest ("blobs") then have strictly increasing starts and ends.
3. Merge a blob into the current request when the gap from the request's end to its start is at
   most `gap_bytes` (the cost model's break-even: reading the gap costs less than one more
   request) and the request would still span at most `chunk_bytes`. A blob larger than
   `chunk_bytes` is a request of its own. Blobs that partly overlap across a cut are read by
   both requests (not expected in HDF5 files). The greedy cut is computed with pointer
   doubling: O(n log n) numpy work, no Python loop over chunks or requests.

Byte ranges are half-open (offset, offset + nbytes) everywhere, as in `planner`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ingest.core.chunks import ChunkIndex
from ingest.core.cost import CostModel
from ingest.errors import ConfigError, RegionError

Box = tuple[tuple[int, int], ...]


def _grid_range(index: ChunkIndex, box) -> tuple[np.ndarray, np.ndarray]:
    """Per axis, the half-open range [lo, hi) of chunk positions the box touches."""
    if len(box) != len(index.shape):
        raise RegionError(f"box {box} has {len(box)} axes but the dataset has {len(index.shape)} (shape {index.shape})")
    for axis, ((a, b), n) in enumerate(zip(box, index.shape)):
        if not 0 <= a < b <= n:
            raise RegionError(f"box axis {axis}: {a}:{b} is empty or outside the dataset (axis length {n})")
    starts = np.array([a for a, _ in box], dtype=np.int64)
    stops = np.array([b for _, b in box], dtype=np.int64)
    chunk = np.array(index.chunk_shape, dtype=np.int64)
    return starts // chunk, -(-stops // chunk)


def chunks_for_box(index: ChunkIndex, box) -> tuple[np.ndarray, np.ndarray]:
    """(present chunk ids, (m, ndim) missing grid positions) for the half-open `box`.

    Present: one vectorised range test per axis over the index, O(n_chunks x ndim).
    Missing: a dense boolean grid over the touched range, O(touched positions). The touched
    range is what the box covers, so its size is bounded by the box's own extent in chunks, and
    the missing list can be as long as the touched range anyway (a sparse dataset): no method
    that lists the missing positions beats that. A sorted-key search would cost the same
    enumeration of touched keys plus a log factor, and a sort of the present keys.
    """
    lo, hi = _grid_range(index, box)
    grid = np.asarray(index.grid, dtype=np.int64)
    inside = np.ones(len(grid), dtype=bool)
    for axis in range(len(lo)):
        col = grid[:, axis]
        inside &= (col >= lo[axis]) & (col < hi[axis])
    present = np.flatnonzero(inside)
    dims = tuple(int(d) for d in hi - lo)
    written = np.zeros(math.prod(dims), dtype=bool)
    if len(present):
        written[np.ravel_multi_index(tuple((grid[present] - lo).T), dims)] = True
    missing_flat = np.flatnonzero(~written)
    missing = np.stack(np.unravel_index(missing_flat, dims), axis=1).astype(np.int64) + lo
    return present, missing.reshape(-1, len(dims))


@dataclass(frozen=True, eq=False)
class ChunkPlan:
    """Requests that fetch the chunks a box needs. Request r reads [req_offsets[r],
    req_offsets[r] + req_nbytes[r]) and holds chunks chunk_ids[req_start[r]:req_start[r + 1]]
    (ids into the ChunkIndex), in file-offset order."""

    req_offsets: np.ndarray  # (R,) int64
    req_nbytes: np.ndarray  # (R,) int64
    req_start: np.ndarray  # (R + 1,) int64, CSR row pointers into chunk_ids
    chunk_ids: np.ndarray  # (n_present,) int64
    missing: np.ndarray  # (m, ndim) int64 grid positions never written: fill value
    needed_chunk_bytes: int  # stored bytes of the needed chunks (overlaps counted once)
    box_elements: int  # elements in the box (decoded bytes = box_elements x itemsize)
    itemsize: int | None  # bytes per element, if the caller said
    gap_bytes: int
    chunk_bytes: int

    strategy = "chunks"  # for callers that treat a ChunkPlan like a planner.Plan

    @property
    def max_gap_bytes(self) -> int:
        return self.gap_bytes

    @property
    def n_requests(self) -> int:
        return len(self.req_offsets)

    @property
    def needed_bytes(self) -> int:
        """Decoded bytes of the box (needs the itemsize given to plan_chunks)."""
        if self.itemsize is None:
            raise ValueError("ChunkPlan.needed_bytes: plan_chunks was not given the itemsize")
        return self.box_elements * self.itemsize

    def request(self, r: int) -> "ChunkRequest":
        """Request r: its byte range and the ids of the chunks in it, in file order."""
        ids = self.chunk_ids[self.req_start[r]:self.req_start[r + 1]]
        return ChunkRequest(int(self.req_offsets[r]), int(self.req_nbytes[r]), ids)

    @property
    def wire_bytes(self) -> int:
        return int(self.req_nbytes.sum())

    @property
    def amplification(self) -> float:
        """Bytes on the wire per stored byte of the needed chunks (1.0 when nothing is read)."""
        return self.wire_bytes / self.needed_chunk_bytes if self.needed_chunk_bytes else 1.0

    def predicted_s(self, cost: CostModel, threads: int) -> float:
        """The cost model's transfer time (decoding is not modelled)."""
        return cost.predict_s(self.n_requests, self.wire_bytes, threads)

    def describe(self, cost: CostModel, threads: int) -> dict:
        """Summary for `plan`, reports and logs (keys as planner.Plan.describe, plus chunk counts)."""
        return {
            "strategy": "chunks",
            "requests": self.n_requests,
            "request_bytes_max": int(self.req_nbytes.max()) if self.n_requests else 0,
            "request_bytes_min": int(self.req_nbytes.min()) if self.n_requests else 0,
            "bytes_needed": None if self.itemsize is None else self.needed_bytes,
            "bytes_wire": self.wire_bytes,
            "bytes_stored": self.needed_chunk_bytes,
            "read_amplification": round(self.amplification, 4),
            "chunks": len(self.chunk_ids),
            "chunks_missing": len(self.missing),
            "max_gap_bytes": self.gap_bytes,
            "chunk_bytes": self.chunk_bytes,
            "predicted_s": round(self.predicted_s(cost, threads), 4),
        }


@dataclass(frozen=True, eq=False)
class ChunkRequest:
    offset: int
    nbytes: int
    chunk_ids: np.ndarray  # ids into the ChunkIndex, in file order


def _greedy_starts(next_start: np.ndarray) -> np.ndarray:
    """Indices visited from 0 by i -> next_start[i] (next_start[i] > i; n is the end), i.e. the
    first blob of each request. Pointer doubling: position t of the walk is next^t(0), built
    from the binary digits of t with one gather per digit, and next^(2^(j+1)) = next^(2^j)
    composed with itself; O(n log n) in numpy, whatever the number of requests."""
    n = len(next_start)
    jump = np.append(next_start, n)  # n maps to itself
    steps = np.arange(n + 1)
    pos = np.zeros(n + 1, dtype=np.int64)
    bit = 0
    while (1 << bit) <= n:
        use = (steps >> bit) & 1 == 1
        pos[use] = jump[pos[use]]
        jump = jump[jump]
        bit += 1
    return np.unique(pos[pos < n])


def _plan_present(index, present, missing, box_elements, *, gap_bytes, chunk_bytes, itemsize) -> ChunkPlan:
    if gap_bytes < 0:
        raise ConfigError(f"max_gap_bytes: {gap_bytes} must be >= 0 bytes")
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes: {chunk_bytes} must be at least 1 byte")
    offsets = np.asarray(index.offsets, dtype=np.int64)[present]
    ends = offsets + np.asarray(index.sizes, dtype=np.int64)[present]
    order = np.lexsort((-ends, offsets))  # by offset; of equal offsets, the longest first
    ids = present[order].astype(np.int64)
    start, end = offsets[order], ends[order]
    n = len(ids)
    # A chunk ending at or before the furthest end so far lies inside earlier bytes: not a blob.
    prev_end = np.maximum.accumulate(np.concatenate(([np.iinfo(np.int64).min], end[:-1])))
    blob = np.flatnonzero(end > prev_end) if n else np.zeros(0, dtype=np.int64)
    b_start, b_end = start[blob], end[blob]  # both strictly increasing
    # Segments: runs of blobs whose gaps are all <= gap_bytes (a negative gap is an overlap).
    breaks = np.flatnonzero(b_start[1:] - b_end[:-1] > gap_bytes) + 1
    seg_stop = np.append(breaks, len(blob))[np.searchsorted(breaks, np.arange(len(blob)), side="right")]
    # Within a segment a request from blob k ends before the first blob reaching past start + chunk_bytes.
    reach = np.searchsorted(b_end, b_start + chunk_bytes, side="right")
    next_start = np.minimum(np.maximum(reach, np.arange(1, len(blob) + 1)), seg_stop)
    first = blob[_greedy_starts(next_start)] if len(blob) else blob
    req_start = np.append(first, n).astype(np.int64)
    last_blob = np.searchsorted(blob, req_start[1:], side="left") - 1  # the last blob of each request
    req_offsets = start[first]
    req_nbytes = end[blob[last_blob]] - req_offsets if len(first) else np.zeros(0, dtype=np.int64)
    # Union of the stored bytes: each blob adds what lies past the previous blob's end.
    stored = 0
    if len(blob):
        stored = int(np.sum(b_end - np.maximum(b_start, np.concatenate(([b_start[0]], b_end[:-1])))))
    return ChunkPlan(req_offsets.astype(np.int64), req_nbytes.astype(np.int64), req_start, ids, missing,
                     stored, box_elements, itemsize, int(gap_bytes), int(chunk_bytes))


def plan_chunks(index: ChunkIndex, box, *, gap_bytes: int, chunk_bytes: int, itemsize: int | None = None) -> ChunkPlan:
    """Plan the requests that fetch every written chunk the half-open `box` touches.

    `gap_bytes`: merge chunks whose gap is at most this (CostModel.gap_bytes, 0, or
    UNLIMITED_GAP); `chunk_bytes`: the most one request may span unless it holds one chunk;
    `itemsize`: bytes per decoded element, only for `describe`'s bytes_needed."""
    present, missing = chunks_for_box(index, box)
    box_elements = math.prod(int(b) - int(a) for a, b in box)
    return _plan_present(index, present, missing, box_elements, gap_bytes=gap_bytes,
                         chunk_bytes=chunk_bytes, itemsize=itemsize)


def chunk_aligned_split(shape, chunk_shape, n_parts_per_axis, origin=None) -> tuple[list[tuple[int, int]], ...]:
    """Per numpy axis, `parts` half-open (start, stop) intervals covering [0, n) in order.

    `origin` (default zeros) is where [0, n) starts in the dataset, so a job region that starts
    mid-chunk still cuts on the dataset's chunk boundaries. When an axis touches at least as
    many chunks as parts, its chunks are shared out as evenly as possible (counts differ by at
    most 1, larger parts first, so the partial edge chunk, if any, is in the last part) and
    every boundary is a chunk boundary: no chunk is needed by two parts. With more parts than
    chunks that is impossible; the axis's pixels are then split evenly (sizes differ by at most
    1) and chunks are shared.
    """
    origin = (0,) * len(shape) if origin is None else tuple(origin)
    if not (len(shape) == len(chunk_shape) == len(n_parts_per_axis) == len(origin)):
        raise ConfigError(f"shape {shape}, chunk shape {chunk_shape} and parts {n_parts_per_axis} disagree in length")
    out = []
    for axis, (n, c, p, o) in enumerate(zip(shape, chunk_shape, n_parts_per_axis, origin)):
        n, c, p, o = int(n), int(c), int(p), int(o)
        if c < 1 or not 1 <= p <= n:
            raise ConfigError(f"axis {axis}: cannot split {n} pixels in chunks of {c} into {p} parts")
        first_chunk = o // c
        n_chunks = (o + n - 1) // c - first_chunk + 1
        if p <= n_chunks:
            size, extra = divmod(n_chunks, p)
            cuts = (first_chunk + np.concatenate(([0], np.cumsum([size + (i < extra) for i in range(p)])))) * c - o
        else:
            size, extra = divmod(n, p)
            cuts = np.concatenate(([0], np.cumsum([size + (i < extra) for i in range(p)])))
        cuts = np.clip(cuts, 0, n)
        out.append([(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])])
    return tuple(out)
