"""Who owns each voxel of overlapping grid regions, worked out voxel by voxel: the oracle for
ingest.core.ownership's middle cut, sharing none of its arithmetic.

Along an axis, a voxel held by two neighbouring intervals belongs to the one it lies deeper in,
measured from the edge that faces the neighbour (voxels of the earlier interval after it, voxels
of the later one before it); a tie goes to the later interval. So an overlap of L voxels gives
its first L // 2 to the earlier region and the rest to the later one: a halo of h on each side
(an overlap of 2h) leaves each region exactly its core.
"""
from __future__ import annotations

import itertools

import numpy as np


def _duel(intervals, early: int, x: int) -> int:
    """Which of neighbours `early` and `early + 1`, both holding x, owns it."""
    late = early + 1
    after_x_in_early = intervals[early][1] - 1 - x
    before_x_in_late = x - intervals[late][0]
    return early if after_x_in_early > before_x_in_late else late


def _axis_owner(intervals: list[tuple[int, int]], n: int) -> np.ndarray:
    """Per coordinate 0..n-1, the index (into `intervals`, sorted) of the interval that owns it, -1
    if none: the holder that wins against each neighbour also holding it (s2p_setup's regions can
    overlap three deep, when the overlap is more than half a region)."""
    owner = np.full(n, -1)
    for x in range(n):
        holders = {i for i, (a, b) in enumerate(intervals) if a <= x < b}
        winners = [i for i in holders if (i + 1 not in holders or _duel(intervals, i, x) == i)
                   and (i - 1 not in holders or _duel(intervals, i - 1, x) == i)]
        if holders and len(winners) != 1:
            raise AssertionError(f"coordinate {x} of intervals {intervals}: owners {winners}, not one")
        owner[x] = winners[0] if winners else -1
    return owner


def owner_labels(regions, shape) -> np.ndarray:
    """Per voxel of `shape`, the index of the region (a grid of boxes) that writes it; -1 for none."""
    regions = [tuple((int(a), int(b)) for a, b in box) for box in regions]
    axes = [sorted({box[axis] for box in regions}) for axis in range(len(shape))]
    owners = [_axis_owner(intervals, n) for intervals, n in zip(axes, shape)]
    index = {box: r for r, box in enumerate(regions)}
    labels = np.full(shape, -1)
    for picks in itertools.product(*(range(len(intervals)) for intervals in axes)):
        box = tuple(intervals[i] for intervals, i in zip(axes, picks))
        where = [np.flatnonzero(owner == i) for owner, i in zip(owners, picks)]
        if box in index and all(len(w) for w in where):
            labels[np.ix_(*where)] = index[box]
    return labels


def labels_of(owned, shape) -> np.ndarray:
    """The same map from owned_boxes' answer: each region's index over the boxes it writes."""
    labels = np.full(shape, -1)
    for r, boxes in enumerate(owned):
        for box in boxes:
            labels[tuple(slice(a, b) for a, b in box)] = r
    return labels
