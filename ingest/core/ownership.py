"""Who writes which voxel (pure): overlapping regions (halos, s2p_setup's overlaps) cut so that
every voxel of the output is written exactly once, by the region that owns it.

Regions that form a grid (every region the product of one interval per axis, as `grid_boxes`
and `s2p_regions` make them) are cut per axis at the middle of each overlap: a halo of h pixels
on both sides overlaps by 2h, so each region owns exactly its core, and a source finder's
output near a region's edge, where it is least reliable, is the neighbour's to write. Any other
set of boxes falls back to cells (the boxes' edges cut the cube), each owned by the first
region, in index order, that holds it.

Boxes are half-open (start, stop) pairs in numpy axis order, as everywhere in the core.
"""
from __future__ import annotations

import itertools
import math

from ingest.errors import RegionError

Box = tuple[tuple[int, int], ...]


def _grid_axes(regions: list[Box]) -> list[list[tuple[int, int]]] | None:
    """Per axis, the sorted distinct intervals, when the regions are exactly their product (no
    duplicates) and each axis's intervals rise in both start and stop; else None."""
    ndim = len(regions[0])
    axes = [sorted({box[axis] for box in regions}) for axis in range(ndim)]
    if len(set(regions)) != len(regions) or math.prod(len(a) for a in axes) != len(regions):
        return None
    if set(regions) != set(itertools.product(*axes)):
        return None
    for intervals in axes:
        if any(b[0] <= a[0] or b[1] <= a[1] for a, b in zip(intervals, intervals[1:])):
            return None
    return axes


def _axis_cuts(intervals: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Owned interval per input interval: cut at the middle of each overlap (or at the boundary
    when neighbours only touch). None if a cut would leave an interval owning nothing or
    something outside itself (intervals nested in an overlap)."""
    cuts = [intervals[0][0]]
    for (_, stop), (start, _) in zip(intervals, intervals[1:]):
        cuts.append((start + stop) // 2 if start < stop else stop)  # a gap keeps its hole: found by the cover check
    cuts.append(intervals[-1][1])
    owned = []
    for (start, stop), lo, hi in zip(intervals, cuts, cuts[1:]):
        lo, hi = max(lo, start), min(hi, stop)
        if lo >= hi:
            return None
        owned.append((lo, hi))
    return owned


def _grid_owned(regions: list[Box]) -> list[tuple[Box, ...]] | None:
    axes = _grid_axes(regions)
    if axes is None:
        return None
    owned_axes = []
    for intervals in axes:
        owned = _axis_cuts(intervals)
        if owned is None:
            return None
        owned_axes.append(dict(zip(intervals, owned)))
    return [(tuple(owned_axes[axis][interval] for axis, interval in enumerate(box)),) for box in regions]


def _cell_owned(regions: list[Box]) -> list[tuple[Box, ...]]:
    """Cells between all the boxes' edges, each given to the first region holding it; a region's
    cells are merged along the last axis where they touch, to keep the count down."""
    ndim = len(regions[0])
    cuts = [sorted({v for box in regions for v in box[axis]}) for axis in range(ndim)]
    owned: list[list[Box]] = [[] for _ in regions]
    for index in itertools.product(*(range(len(c) - 1) for c in cuts)):
        cell = tuple((cuts[axis][i], cuts[axis][i + 1]) for axis, i in enumerate(index))
        for r, box in enumerate(regions):
            if all(a <= lo and hi <= b for (lo, hi), (a, b) in zip(cell, box)):
                mine = owned[r]
                if mine and mine[-1][:-1] == cell[:-1] and mine[-1][-1][1] == cell[-1][0]:
                    mine[-1] = cell[:-1] + ((mine[-1][-1][0], cell[-1][1]),)
                else:
                    mine.append(cell)
                break
    return [tuple(boxes) for boxes in owned]


def _uncovered_voxel(owned: list[tuple[Box, ...]], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """A voxel of `shape` no owned box holds, or None when they cover it all (they are disjoint)."""
    boxes = [box for mine in owned for box in mine]
    if sum(math.prod(b - a for a, b in box) for box in boxes) == math.prod(shape):
        return None
    cuts = [sorted({0, n} | {v for box in boxes for v in box[axis]}) for axis, n in enumerate(shape)]
    for index in itertools.product(*(range(len(c) - 1) for c in cuts)):
        corner = tuple(cuts[axis][i] for axis, i in enumerate(index))
        if not any(all(a <= v < b for v, (a, b) in zip(corner, box)) for box in boxes):
            return corner
    return None  # unreachable for disjoint boxes inside the shape


def owned_boxes(regions, shape) -> tuple[tuple[Box, ...], ...]:
    """Per region, the boxes of voxels it writes: disjoint across regions and, together, exactly
    `shape`. Raises RegionError naming the region or a voxel that no region holds."""
    shape = tuple(int(n) for n in shape)
    boxes = [tuple((int(a), int(b)) for a, b in box) for box in regions]
    if not boxes:
        raise RegionError(f"regions: none given for a cube of shape {shape} (numpy order)")
    for index, box in enumerate(boxes):
        if len(box) != len(shape) or any(not 0 <= a < b <= n for (a, b), n in zip(box, shape)):
            raise RegionError(f"region {index}: box {box} is empty or outside the cube (shape {shape}, numpy order)")
    owned = _grid_owned(boxes)
    if owned is None:
        owned = _cell_owned(boxes)
    hole = _uncovered_voxel(owned, shape)
    if hole is not None:
        raise RegionError(f"regions: voxel {hole} (numpy order) is in no region; the regions must cover the whole "
                          f"cube {shape} for it to be published as one object")
    return tuple(owned)
