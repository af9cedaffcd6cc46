"""The output object's byte geometry (pure): where a box's voxels lie in it, part by part.

An `ObjectImage` is what a publish writes: metadata `pieces` (a FITS header and the zeros that
pad its data to a 2880-byte block; an HDF5 file's metadata before and after its contiguous
dataset) and the data, a C-order array of `shape` at `data_offset`. Together they tile the object.

A box's bytes in the data are runs: the box is cut into rows along its innermost axis that does
not span the cube (axes after it are whole, so each run is contiguous in the object and in any
array that holds the box). `box_runs` lists the runs that meet a byte range, clipped to it, and
`box_bytes_before` counts a box's bytes before byte positions without listing anything (a
lexicographic count, vectorised over positions), so the bytes every rank holds of every part
cost O(parts x ndim) per box, not a pass over the cube.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ingest.errors import RegionError

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ObjectImage:
    """One object: metadata bytes at offsets, and a C-order array of `shape` at `data_offset`."""

    object_bytes: int
    data_offset: int
    shape: tuple[int, ...]  # numpy order
    itemsize: int
    pieces: tuple[tuple[int, bytes], ...]  # ((offset, bytes), ...): everything but the data

    @property
    def data_bytes(self) -> int:
        return self.itemsize * math.prod(self.shape)

    def check(self) -> None:
        """Refuse an image whose pieces and data do not tile [0, object_bytes) exactly."""
        spans = sorted([(o, o + len(b), "metadata") for o, b in self.pieces if b]
                       + [(self.data_offset, self.data_offset + self.data_bytes, "data")])
        at = 0
        for start, stop, what in spans:
            if start != at:
                raise RegionError(f"object image: {what} at byte {start} but the previous span ends at {at}; "
                                  f"the object would have {'a hole' if start > at else 'overlapping bytes'}")
            at = stop
        if at != self.object_bytes:
            raise RegionError(f"object image: spans end at byte {at}, the object is {self.object_bytes} bytes")


def _item_strides(shape) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def _run_axis(box: Box, shape) -> int:
    """The innermost axis the box does not span whole (-1: the box is the whole cube)."""
    for axis in range(len(shape) - 1, -1, -1):
        if box[axis] != (0, shape[axis]):
            return axis
    return -1


def box_runs(box: Box, shape, itemsize: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) in bytes from the data's first byte of the box's runs that meet [lo, hi),
    clipped to it, in order (int64 arrays)."""
    shape = tuple(shape)
    if lo >= hi:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    strides = _item_strides(shape)
    axis = _run_axis(box, shape)
    if axis < 0:
        start, stop = max(lo, 0), min(hi, itemsize * math.prod(shape))
        return (np.array([start], np.int64), np.array([stop - start], np.int64)) if start < stop else \
            (np.zeros(0, np.int64), np.zeros(0, np.int64))
    run_bytes = (box[axis][1] - box[axis][0]) * strides[axis] * itemsize
    lead = [b - a for a, b in box[:axis]]
    n_runs = math.prod(lead)

    def start_of(j: int) -> int:  # byte where run j starts
        offset, rest = box[axis][0] * strides[axis], j
        for k in range(axis - 1, -1, -1):
            rest, i = divmod(rest, lead[k])
            offset += (box[k][0] + i) * strides[k]
        return offset * itemsize

    # Runs rise in the object: binary-search the first that ends after lo and the first at or past hi.
    a, b = 0, n_runs
    while a < b:
        m = (a + b) // 2
        a, b = (m + 1, b) if start_of(m) + run_bytes <= lo else (a, m)
    first = a
    a, b = first, n_runs
    while a < b:
        m = (a + b) // 2
        a, b = (m + 1, b) if start_of(m) < hi else (a, m)
    j = np.arange(first, a, dtype=np.int64)
    starts = np.full(j.size, box[axis][0] * strides[axis], dtype=np.int64)
    if axis:
        index = np.unravel_index(j, lead)
        for k in range(axis):
            starts += (index[k] + box[k][0]) * strides[k]
    starts *= itemsize
    stops = np.minimum(starts + run_bytes, hi)
    starts = np.maximum(starts, lo)
    return starts, stops - starts


def box_bytes_before(box: Box, shape, itemsize: int, positions) -> np.ndarray:
    """For each byte position (from the data's first byte, 0..data bytes), how many of the box's
    bytes lie before it: items counted lexicographically, plus the part of the item it cuts."""
    positions = np.asarray(positions, dtype=np.int64)
    strides = _item_strides(shape)
    items, within = np.divmod(positions, itemsize)
    count = np.zeros(positions.shape, dtype=np.int64)
    inside = np.ones(positions.shape, dtype=bool)  # the item at `positions` is in the box on the axes so far
    rest = items
    for axis, (a, b) in enumerate(box):
        coord, rest = np.divmod(rest, strides[axis])
        below = np.clip(coord, a, b) - a  # the box's coordinates on this axis before coord
        count += np.where(inside, below * math.prod(hi - lo for lo, hi in box[axis + 1:]), 0)
        inside &= (coord >= a) & (coord < b)
    return count * itemsize + np.where(inside, within, 0)


def range_blocks(shape, start: int, stop: int) -> list[Box]:
    """Items [start, stop) of a C-order array of `shape` as at most 2 x ndim - 1 boxes, in order:
    the rest of the first row (plane, ...), the whole middle, the start of the last."""
    shape = tuple(shape)
    if start >= stop:
        return []
    if len(shape) == 1:
        return [((start, stop),)]
    inner = math.prod(shape[1:])
    (a, ra), (b, rb) = divmod(start, inner), divmod(stop, inner)
    if a == b:
        return [((a, a + 1),) + box for box in range_blocks(shape[1:], ra, rb)]
    blocks = []
    if ra:
        blocks += [((a, a + 1),) + box for box in range_blocks(shape[1:], ra, inner)]
        a += 1
    if a < b:
        blocks.append(((a, b),) + tuple((0, n) for n in shape[1:]))
    if rb:
        blocks += [((b, b + 1),) + box for box in range_blocks(shape[1:], 0, rb)]
    return blocks


def box_item_range(box: Box, shape, lo_item: int, hi_item: int) -> tuple[int, int]:
    """The box's items whose place in the cube is in [lo_item, hi_item), as a range of the box's
    own C order (the cube's order restricted to a box is the box's order, so this is one range)."""
    counts = box_bytes_before(box, shape, 1, [lo_item, hi_item])
    return int(counts[0]), int(counts[1])


def cube_item(box: Box, shape, local: int) -> int:
    """The cube's flat index of item `local` (in the box's own C order) of the box."""
    index = np.unravel_index(local, tuple(b - a for a, b in box))
    return int(np.ravel_multi_index(tuple(int(i) + a for i, (a, _) in zip(index, box)), tuple(shape)))
