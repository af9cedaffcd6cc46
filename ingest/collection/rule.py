"""The rule that picks, for one source (or region), the tile of a collection its cut-out comes from.

Pure: each tile's answer for the source in, one choice out; no I/O, no WCS (ingest.collection.place
computes the answers through each tile's own WCS, ingest.sky.pixels' rule).

The rule:
1. A tile holds the source whole when its box there is clipped on no axis (`WorldBox.clipped`
   is empty: no pixel centre just beyond any edge would be in the region). Among the tiles that
   hold it whole, the pick is the one where the box lies farthest from the edges: its
   `edge_px`, the least of the four distances in pixels from the box to the edges of the tile's
   sky plane (x_start, nx - x_stop, y_start, ny - y_stop, the box half-open), is largest. Far
   from the edges is where a mosaic's tile has its best sensitivity and where the neighbours
   least need to be consulted.
2. Where no tile holds it whole, the tile holding the largest part: the most voxels in its
   clipped box. The cut-out is that part, recorded as clipped.
3. Off every tile (no tile has a pixel centre in it): no tile; the caller records the source as
   skipped with the reason.
Ties go to the first tile in the collection's order (its objects sorted by key), so the pick
does not depend on listing order or thread timing. One tile is always chosen: several tiles are
never stitched (that needs reprojection, and each tile keeps its own WCS and beams).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """A source's box in one tile: numpy order, half-open, clipped to the tile; the axes it was
    clipped on; its least distance in pixels to the four edges of the tile's sky plane; its voxels."""

    box: tuple[tuple[int, int], ...]
    clipped: tuple[str, ...]
    edge_px: int
    voxels: int

    @property
    def whole(self) -> bool:
        """Does the tile hold the source whole (no axis clipped)?"""
        return not self.clipped


def placement(box, clipped, shape, x_axis: int | None, y_axis: int | None) -> Placement:
    """The Placement of a box (numpy order, half-open, inside a cube of numpy-order `shape`)
    clipped on `clipped`, whose sky plane is numpy axes x_axis and y_axis (None: the cube has no
    sky plane, and edge_px is 0)."""
    box = tuple((int(a), int(b)) for a, b in box)
    if x_axis is None or y_axis is None:
        edge_px = 0
    else:
        (x0, x1), (y0, y1) = box[x_axis], box[y_axis]
        edge_px = min(x0, shape[x_axis] - x1, y0, shape[y_axis] - y1)
    return Placement(box, tuple(clipped), int(edge_px), math.prod(b - a for a, b in box))


@dataclass(frozen=True)
class Choice:
    """One source's tile: its index in the collection's tiles and its Placement there, or None
    with `reason` saying why it is off every tile."""

    tile: int | None
    placement: Placement | None = None
    reason: str | None = None
    tiles_holding: int = 0  # tiles holding some part of the source (2 or more: it lies in an overlap)

    @property
    def clipped(self) -> bool:
        """Is the cut-out only a part of the source (no tile held it whole)?"""
        return self.placement is not None and not self.placement.whole


def pick_tile(placements: Sequence[Placement | None]) -> int | None:
    """The index of the tile the rule (module docstring) picks among one source's placements, one
    per tile in the collection's order (None: the source is off that tile); None when it is off all."""
    whole = [i for i, p in enumerate(placements) if p is not None and p.whole]
    if whole:
        return max(whole, key=lambda i: (placements[i].edge_px, -i))
    part = [i for i, p in enumerate(placements) if p is not None]
    if part:
        return max(part, key=lambda i: (placements[i].voxels, -i))
    return None
